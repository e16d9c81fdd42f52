"""What to do when Slack refuses a message: which refusals no retry can fix,
and what the requester is told instead. Pure: no Slack, no SQL, no clock.

Slack answers a refused chat.postMessage with HTTP 200 and `ok: false`. The
error says whether the trouble is the channel (every later message there
fails the same way), this one message, or the app itself (a bad token, Slack
down): only the last is worth waiting for.
"""
from __future__ import annotations

from worker.i18n import N_, _

BOT = "@trialbot"  # the bot user's name in manifest.yml

# The bot cannot post in the conversation at all: later messages of the same
# trial go to the requester instead (a response_url, else a direct message).
CHANNEL_ERRORS = {
    "not_in_channel", "channel_not_found", "is_archived", "restricted_action",
    "restricted_action_read_only_channel", "restricted_action_thread_only_channel",
    "restricted_action_non_threadable_channel", "ekm_access_denied", "no_permission",
    "team_access_not_granted", "user_not_in_channel",
}
# This message cannot be posted (or edited); the next one may well be.
MESSAGE_ERRORS = {
    "msg_too_long", "no_text", "too_many_attachments", "invalid_blocks", "invalid_blocks_format",
    "invalid_attachments", "invalid_thread_ts", "cannot_reply_to_message", "message_not_found",
    "cant_update_message", "edit_window_closed", "message_limit_exceeded",
    "duplicate_message_id", "invalid_metadata_format", "invalid_metadata_schema",
    "metadata_too_large", "too_many_contact_cards", "messages_tab_disabled",
    "cannot_dm_bot", "user_not_found", "user_disabled",
    "expired_url", "used_url", "invalid_token",  # a response_url that is spent or expired
}
# About the app or Slack, not the message: the message waits and is retried.
APP_ERRORS = {
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
    "missing_scope", "not_allowed_token_type", "ratelimited", "rate_limited",
    "internal_error", "fatal_error", "service_unavailable", "request_timeout",
    "org_login_required", "team_added_to_org", "accesslimited",
}
# An error in none of the lists is retried this many times, then set aside: an
# unknown refusal must not hold its channel for ever.
UNKNOWN_TRIES = 5

# Written in the language of the channel the message was for (bot/delivery/outbox.py).
FIXES = {
    "not_in_channel": N_("I am not a member of {where}: invite me with `/invite {bot}` there"),
    "channel_not_found": N_("I cannot see {where} (a private channel or a direct message I am "
                            "not in, or it was deleted): invite me with `/invite {bot}`, or "
                            "use `/trial` in a channel I am in"),
    "is_archived": N_("{where} is archived: unarchive it, or use `/trial` in another channel"),
    "msg_too_long": N_("Slack refused the message as too long (over 40,000 characters)"),
    "no_text": N_("the message was empty (a trialbot bug: please report it)"),
}
RESTRICTED = N_("posting in {where} is restricted by a workspace setting (read-only, "
                "thread-only or admins only): ask a workspace admin, or use another channel")
# What a refused message was, as the requester's note names it.
KINDS = {"report": N_("report"), "chart": N_("memory chart"), "summary": N_("summary"),
         "digest": N_("budget digest"), "export": N_("plan export"),
         "sweep-chart": N_("sweep chart"), "digest-chart": N_("digest chart")}
OTHER_KIND = N_("message")


def classify(error: str, tries: int = 0) -> str:
    """"channel", "message" or "retry" for Slack's error code (tries: the
    message's failed tries before this one)."""
    if error in CHANNEL_ERRORS:
        return "channel"
    if error in MESSAGE_ERRORS:
        return "message"
    if error in APP_ERRORS or tries + 1 < UNKNOWN_TRIES:
        return "retry"
    return "message"


def fix(error: str, channel: str) -> str:
    """What went wrong, in words that name the fix."""
    where = f"<#{channel}>"
    if error.startswith("restricted_action") or error in ("ekm_access_denied", "no_permission",
                                                          "team_access_not_granted"):
        return _(RESTRICTED, where=where)
    text = FIXES.get(error)
    if text is None:
        return _("Slack refused it ({error})", error=error)
    return _(text, where=where, bot=BOT)


def redirected(text: str, blocks: list, error: str, channel: str, trial: str | None
               ) -> tuple[str, list]:
    """A message that could not go to `channel`, as its requester receives it."""
    values = {"trial": trial, "channel": channel, "fix": fix(error, channel)}
    if trial:
        head = _(":warning: {trial}: not posted in <#{channel}> — {fix}. Until then this comes "
                 "to you here.", **values)
    else:
        head = _(":warning: not posted in <#{channel}> — {fix}. Until then this comes to you "
                 "here.", **values)
    context = {"type": "context", "elements": [{"type": "mrkdwn", "text": head[:3000]}]}
    return f"{head}\n\n{text}", [context, *blocks][:50]


def notice(error: str, channel: str, trial: str | None, kind: str | None) -> str:
    """The requester's note about one message Slack refused (the channel itself works)."""
    values = {"what": _(KINDS.get(kind or "", OTHER_KIND)), "trial": trial,
              "channel": channel, "fix": fix(error, channel)}
    if trial:
        return _(":warning: {trial}'s {what} could not be posted in <#{channel}>: {fix}. "
                 "`/trial status {trial}` shows the report.", **values)
    return _(":warning: A {what} could not be posted in <#{channel}>: {fix}.", **values)


def token_notice(error: str, channel: str, trial: str) -> str:
    """The requester's note, through the command's response_url (which needs no
    token), when Slack refuses the bot's own token: nothing is lost, all waits."""
    return _(":warning: {trial}: I cannot post in <#{channel}> now: Slack refuses my token "
             "({error}). {trial}'s messages wait and are posted once an admin replaces "
             "SLACK_BOT_TOKEN and restarts me; `/trial status {trial}` answers meanwhile.",
             trial=trial, channel=channel, error=error)


def can_post(channel: str, info: dict | None, error: str | None) -> str | None:
    """From Slack's conversations.info answer (`info`, or its `error`): None
    when the bot can post in `channel`, else why not and how to fix it. An
    answer that says nothing about the channel (a missing scope, Slack down)
    is no refusal: the outbox still sends the requester whatever Slack refuses."""
    if error is not None:
        return fix(error, channel) if error in ("channel_not_found",) else None
    info = info or {}
    if info.get("is_archived"):
        return fix("is_archived", channel)
    if info.get("is_member") is False:  # absent for a direct message
        return fix("not_in_channel", channel)
    return None


class Undeliverable(Exception):
    """Slack refused the request itself (HTTP 200, `ok: false`): `error` is
    its code, which bot/delivery/refusals.py sorts into wait, channel or message."""

    def __init__(self, error: str):
        super().__init__(error)
        self.error = error
