"""Buttons on a trial's card: Cancel, Re-run, Add to plan…. Each acks first;
the core's work and the answer to the clicking user (ephemeral, through the
click's response_url) come after the ack (bot/slack/later.py), in the
language of the channel the card is in. Add to plan's modal opens right
after the ack, within its trigger_id's 3 s, and a Slack too slow for it gets
an answer too. Each runs inside the catch-all (bot/commands.py)."""
from __future__ import annotations

import functools
from concurrent.futures import Future

from bot import commands
from bot.slack.later import later
from bot.trials import card, tags
from bot.trials import command as trial_command
from worker import i18n
from worker.i18n import _


def _say(respond, text: str) -> None:
    respond(response_type="ephemeral", replace_original=False, text=text)


def _channel_lang(ctx, body) -> str | None:
    return ctx.store.channel_lang((body.get("channel") or {}).get("id"))


def _language(ctx, body):
    return i18n.using(_channel_lang(ctx, body))


def _guarded(handler, ctx, body, respond, what: str, *args):
    """handler(ctx, body, *args, respond) inside the catch-all: a failure is
    answered to the clicking user (ephemeral), as its work would have been."""
    return commands.guarded(functools.partial(handler, ctx, body, *args, respond),
                            lambda reply: _say(respond, reply["text"]), what,
                            functools.partial(_channel_lang, ctx, body))


def cancel_callback(ack, body, action, respond, context) -> Future:
    ack()
    return later(_guarded, _cancel, context["trialbot"], body, respond, "Cancel", action)


def _cancel(ctx, body, action, respond) -> None:
    with _language(ctx, body):
        try:
            text = _(":no_entry_sign: {answer}.", answer=trial_command.cancel(
                ctx, int(action["value"]), body["user"]["id"]))
        except ValueError as exc:
            text = _(":x: {error}.", error=exc)
    _say(respond, text)


def rerun_callback(ack, body, action, respond, context) -> Future:
    ack()
    return later(_guarded, _rerun, context["trialbot"], body, respond, "Re-run", action)


def _rerun(ctx, body, action, respond) -> None:
    ts = ((body.get("container") or {}).get("message_ts")
          or (body.get("message") or {}).get("ts"))
    clicked = ts and f"{(body.get('channel') or {}).get('id')}:{ts}"
    with _language(ctx, body):
        reply = trial_command.rerun(ctx, int(action["value"]), body["user"]["id"],
                                    body.get("trigger_id"), body.get("response_url"), clicked)
    _say(respond, reply["text"])


def add_to_plan_callback(ack, body, action, client, respond, context) -> Future:
    ack()
    ctx = context["trialbot"]
    return commands.guarded(  # the answer, as the work's, after the ack
        functools.partial(_add_to_plan, ctx, body, action, client, respond),
        lambda reply: later(_say, respond, reply["text"]), "Add to plan",
        functools.partial(_channel_lang, ctx, body))


def _add_to_plan(ctx, body, action, client, respond) -> Future:
    user = body["user"]["id"]
    with _language(ctx, body):  # reads only: nothing waits on a write here
        job = ctx.store.job(int(action["value"]))
        if job is None:
            return later(_say, respond, _(":x: There is no trial T{id} any more.",
                                          id=action["value"]))
        refused = ctx.allows("run", user, job["channel"], "change plans")
        if refused:  # the modal's submission checks again
            return later(_say, respond, _(":lock: {refused} Nothing was changed.",
                                          refused=refused))
        choices = tags.choices(ctx, user, job["channel"])
        if not choices:
            return later(_say, respond, _(
                ":x: No plan of this channel has a block yet: start one with "
                "`/plan new NAME` and `/plan NAME block KIND ...`."))
        view = card.plan_modal(job, choices)
    return later(_open, ctx, body, client, view, respond)


VIEWS_OPEN_SECONDS = 2.5  # the click's trigger_id lasts 3 s; Slack's trip took some


def _open(ctx, body, client, view, respond) -> None:
    """The modal, after the ack: a slow views.open holds neither the ack nor the
    slots other slash commands wait for (bot/http/server.py). Bolt's client is
    this request's own, so its timeout and retries are set for the trigger."""
    client.timeout, client.retry_handlers = VIEWS_OPEN_SECONDS, []
    try:
        client.views_open(trigger_id=body["trigger_id"], view=view)
    except Exception as exc:  # noqa: BLE001 - Slack slow or refusing: the user clicks again
        error = getattr(getattr(exc, "response", None), "get", lambda *_: None)("error")
        with _language(ctx, body):
            _say(respond, _(":x: Slack did not open the dialog ({error}); click *Add to "
                            "plan…* again.", error=error or type(exc).__name__))


def register(app) -> None:
    app.action(card.CANCEL)(cancel_callback)
    app.action(card.RERUN)(rerun_callback)
    app.action(card.ADD_TO_PLAN)(add_to_plan_callback)
