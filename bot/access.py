"""Who may do what. Two permissions:

- run: queue trials (/trial run, sweep, ladder, ab, the Re-run button) and
  change plans (/plan new, set, block, lock, unlock, actual, Add to plan…);
- admin: record prices, schedule or stop the weekly digest, cancel other
  people's trials. Admins may also run.

Reading (help, list, status, workers, fit, /plan show, review, prices…) is
open to anyone who can type the command; a trial or a plan only in its own
channel, or by an admin (JobQueue.hides). With nothing configured nobody may
run and nobody is an admin (see docs/operations.md, "Who may do what").

Pure: the Slack adapter supplies user-group membership as a callable; the
settings (environment, TOML) are read by bot/app/config.py.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields

from worker.i18n import N_, _

DO_THIS, RUN_TRIALS = N_("do this"), N_("run trials")  # what a refusal says by default


def _ids() -> frozenset:
    return field(default_factory=frozenset)


@dataclass(frozen=True)
class Policy:
    run_users: frozenset = _ids()
    run_usergroups: frozenset = _ids()
    run_channels: frozenset = _ids()
    admins: frozenset = _ids()
    admin_usergroups: frozenset = _ids()
    run_everyone: bool = False  # anyone in the workspace may run (never admin)

    @property
    def configured(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


def operator(user: str) -> Policy:
    """`trialbot console`: the one local user owns the box, so is the admin."""
    return Policy(admins=frozenset({user}))


class GroupLookupError(Exception):
    """Slack could not say who is in a user group."""


def no_groups(group: str) -> frozenset:
    raise GroupLookupError("user groups cannot be checked without Slack")


def allows(policy: Policy, action: str, user: str, channel: str,
           members: Callable[[str], Iterable[str]] = no_groups,
           what: str | None = None) -> str | None:
    """None when `user` in `channel` may do `action` ("run" or "admin"); else
    one refusal sentence naming the missing permission and how to get it.
    `members(group)` is asked only when a user group could decide; when it
    fails the answer is no (fail closed) and the refusal says so."""
    assert action in ("run", "admin"), action
    failed: list[str] = []

    def in_any(groups) -> bool:
        for group in sorted(groups):
            try:
                if user in members(group):
                    return True
            except GroupLookupError as exc:
                failed.append(f"<!subteam^{group}> ({exc})")
        return False

    if user in policy.admins:
        return None
    if action == "run" and (policy.run_everyone or user in policy.run_users
                            or channel in policy.run_channels):
        return None
    if in_any(policy.admin_usergroups) or (action == "run" and in_any(policy.run_usergroups)):
        return None
    # `what` is a phrase marked N_ by the caller ("record prices"), shown translated.
    unchecked = (" " + _("Slack could not say whether you are in user group {groups}; try "
                         "again in a minute.", groups=", ".join(failed)) if failed else "")
    if action == "admin":
        doing = _(what or DO_THIS)
        if not (policy.admins or policy.admin_usergroups):
            return _("Only an admin may {doing} (permission: admin), and no admin is "
                     "configured: whoever runs `trialbot serve` sets TRIALBOT_ADMINS "
                     "(docs/operations.md, \"Who may do what\").", doing=doing)
        where = "TRIALBOT_ADMINS" + (" or TRIALBOT_ADMIN_USERGROUPS"
                                     if policy.admin_usergroups else "")
        return (_("Only an admin may {doing} (permission: admin): you are not in {where}.",
                  doing=doing, where=where) + f"{unchecked} {_ask(policy)}")
    doing = _(what or RUN_TRIALS)
    if not policy.configured:
        return _("Nobody may {doing} yet (permission: run): this bot has no access settings; "
                 "whoever runs `trialbot serve` sets TRIALBOT_RUN_USERS, TRIALBOT_RUN_CHANNELS, "
                 "TRIALBOT_RUN_USERGROUPS or TRIALBOT_ADMINS (docs/operations.md, \"Who may do "
                 "what\").", doing=doing)
    where = "TRIALBOT_RUN_USERS" + (" or TRIALBOT_RUN_USERGROUPS" if policy.run_usergroups
                                    else "")
    if policy.run_channels:
        refusal = _("You may not {doing} here (permission: run): your user is not in {where} "
                    "and this channel is not in TRIALBOT_RUN_CHANNELS.", doing=doing,
                    where=where)
    else:
        refusal = _("You may not {doing} here (permission: run): your user is not in {where}.",
                    doing=doing, where=where)
    return f"{refusal}{unchecked} {_ask(policy)}"


def _ask(policy: Policy) -> str:
    if not policy.admins:
        return _("Ask whoever runs the bot to add you.")
    shown = sorted(policy.admins)[:3]
    return _("Ask an admin ({admins}) to add you.",
             admins=", ".join(f"<@{a}>" for a in shown))
