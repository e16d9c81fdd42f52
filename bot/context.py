"""What every command reads: the store, the queue, who may do what, and what
only the Slack adapter knows (who is in a user group, whether the bot can post
in a channel). One explicit, frozen object, made once by bot/app/runtime.py
and handed to the trials, plans and digest commands; what the Slack app learns
after it is made is held in its SlackParts."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot import access
from bot.states import Postable
from worker.i18n import _, did_you_mean, sentences

if TYPE_CHECKING:  # types only: views read Context, and must not import the store
    from bot.ports import AppStore, Channels, Queue, Schedule

PLAN_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
# /plan's own words: never a plan name
PLAN_WORDS = {"new", "list", "help", "price", "prices", "digest", "calibration", "settings"}


def plan_name_problem(word: str) -> str | None:
    """Why `word` cannot name a plan, or None."""
    if word in PLAN_WORDS:
        return _("`{word}` is one of `/plan`'s own words, not a plan name", word=word)
    if not PLAN_NAME.fullmatch(word):
        return _("`{word}` is not a plan name: use lower-case letters, digits, `-` and `_`, "
                 "at most 40 characters (e.g. `adkv-repro`)", word=word)
    return None


def unwritable_text(exc) -> str:
    """Why the database refused a command's write (bot/store's Unwritable: the
    views below import no store, so neither does this), and what to do: the
    requester's words, after "Nothing was queued: "."""
    reason = exc.reason.value
    if reason == "locked":
        return _("the bot's database is busy: another program has held it too long (an open "
                 "`sqlite3` session, a long query or a copy). Try again in a minute; if it "
                 "keeps happening, tell whoever runs the bot")
    if reason == "full":
        return _("the disk holding the bot's database is full. Tell whoever runs the bot "
                 "(`trialbot doctor` shows the free space), then run the command again")
    if reason == "read-only":
        return _("the bot's database cannot be written: its file or filesystem is read-only. "
                 "Tell whoever runs the bot (`trialbot doctor` checks it), then run the "
                 "command again")
    # SQLite says only "disk I/O error": the disk failed, or the file or its filesystem
    # refused the write (made read-only or immutable while the bot had it open).
    return _("the bot's database could not be written ({detail}): its disk failed, or its "
             "file or filesystem became read-only. Tell whoever runs the bot (`trialbot "
             "doctor` checks it), then run the command again", detail=exc.detail)


class PlanUnreachable(Exception):
    """No plan of that name (or no such name can be), as the user may be told."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class HiddenPlan(PlanUnreachable):
    """The plan lives in another channel (perhaps a private one)."""


class AnyChannel:
    """Where there is no Slack to ask (the console, tests): every channel can be posted in."""

    def cached(self, channel: str) -> Postable:
        return Postable.YES

    def confirm(self, channel: str) -> None:
        pass

    def refusal(self, channel: str) -> str | None:
        return None

    def forget(self, channel: str) -> None:
        pass


def _anyone() -> access.Policy:
    return access.Policy(run_everyone=True)


def _no_failures() -> dict[str, int]:
    return {}


class SlackParts:
    """What only the Slack adapter knows, given when its app is built
    (bot/slack/app.py), after the Context: a user group's users, whether the
    bot may post in a channel, and its own failed calls. Alone (the console,
    tests): no user groups, every channel, none failed."""

    def __init__(self) -> None:
        self.members: Callable[[str], Iterable[str]] = access.no_groups
        self.channels: Channels = AnyChannel()
        self.failures: Callable[[], dict[str, int]] = _no_failures


@dataclass(frozen=True)
class Context:
    store: AppStore  # bot.store.Store
    queue: Queue  # bot.trials.queue.JobQueue
    # Alone (tests, scripts) anyone may run; the runtime passes the configured policy.
    policy: access.Policy = field(default_factory=_anyone)
    slack: SlackParts = field(default_factory=SlackParts)
    digests: Schedule | None = None  # the running digest schedule, re-read when a schedule changes
    notify: Callable[[], None] = lambda: None  # wakes the outbox: messages were stored
    outbox_alert_minutes: float = 5  # unsent longer: shown to admins in `/trial workers`

    @property
    def members(self) -> Callable[[str], Iterable[str]]:
        """A user group's users (Slack)."""
        return self.slack.members

    @property
    def channels(self) -> Channels:
        """Can the bot post there (Slack): AnyChannel or bot/slack/channels.ChannelCheck."""
        return self.slack.channels

    def allows(self, action: str, user: str, channel: str, what: str | None = None
               ) -> str | None:
        """None when allowed, else the refusal (bot/access.py)."""
        return access.allows(self.policy, action, user, channel, self.members, what)

    def hides(self, home: str, user: str, channel: str) -> bool:
        """A trial or a plan is read in its own channel (it may be a private
        one) or by an admin anywhere."""
        return home != channel and self.allows("admin", user, channel) is not None

    def visible_plans(self, user: str, channel: str) -> tuple[list[dict], bool]:
        """The plans `user` may reach from `channel`: its own, or every plan for an
        admin (then True)."""
        if self.allows("admin", user, channel) is None:
            return self.store.plans(), True
        return self.store.plans(channel), False

    def plan(self, name: str, user: str, channel: str) -> dict:
        """The plan, if `user` may reach it from `channel`; a refusal names the
        plan and nothing of it. Raises PlanUnreachable (a name no plan can
        have, or no such plan: the message lists those reachable here) or
        HiddenPlan (another channel's)."""
        problem = plan_name_problem(name)
        if problem:
            raise PlanUnreachable(problem)
        plan = self.store.plan(name)
        if plan is None:
            seen, admin = self.visible_plans(user, channel)
            known = ", ".join(p["name"] for p in seen) or _("none yet")
            # `/plan lsit` or `/plan adkvv show`: a slip of a word or of a plan's name
            hint = did_you_mean(name, [*PLAN_WORDS, *(p["name"] for p in seen)], "/plan ")
            raise PlanUnreachable(sentences(
                _("There is no plan `{plan}`.", plan=name), hint,
                _("Plans: {known}. Start one with `/plan new {plan}`", plan=name, known=known)
                if admin else
                _("Plans here: {known}. Start one with `/plan new {plan}`", plan=name,
                  known=known)))
        if self.hides(plan["channel"], user, channel):
            raise HiddenPlan(_("Plan `{plan}` belongs to another channel; ask there (or an "
                               "admin can ask anywhere).", plan=name))
        return plan
