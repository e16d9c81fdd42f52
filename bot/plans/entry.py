"""How `/plan` runs through its table: an Entry per action (its word, parser,
handler, help lines and the right it needs), the Asked every handler
reads, and `run`, which parses by the table, checks the right and calls the
entry's handler. The table itself is bot/plans/command.py's; the digest's
entries join it a layer above (bot/commands.py)."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.blocks import about
from bot.context import Context, HiddenPlan, PlanUnreachable, Postable, unwritable_text
from bot.plans import estimate, helpview, parse, views
from bot.plans.grammar import PlanCommand, PlanError
from bot.states import Json
from bot.store import Unwritable
from worker.i18n import _, did_you_mean, sentences


@dataclass(frozen=True)
class Asked:
    """One `/plan` as received."""
    user: str
    channel: str
    today: dt.date
    now: dt.datetime  # the digest's clock
    request: str | None  # Slack's trigger_id: a retried `actual ... slurm=` asks once
    response_url: str | None  # reaches the requester if the channel refuses what is posted
    table: Sequence[Entry]  # the table this command runs through (`/plan help` lists it)


@dataclass(frozen=True)
class Entry:
    """An action of `/plan`. Actions that share a word share its parser (`price`
    parses price, price-correct and price-delete); `of_plan`: the word comes
    after a plan's name (`/plan NAME lock`). `needs`: the right (bot.access)
    and what it is for; reading is open to anyone (a plan in its own channel)."""
    name: str
    word: str
    parse: Callable[[str | None, str, list[str], dt.date], PlanCommand]
    handle: Callable[..., Json]  # (ctx, cmd, Asked) -> the reply
    help: tuple[str, ...] = ()  # its lines in `/plan help`
    needs: tuple[str, str] | None = None
    posts: bool = False  # its messages are posted in the channel later
    of_plan: bool = False


class PlanHidden(PlanError):
    """The plan lives in another channel (perhaps a private one)."""


def plan_of(ctx: Context, name: str | None, asked: Asked) -> Json:
    """The plan, if the asker may reach it from their channel (as `/trial
    status`: a plan may live in a private channel); its name is all a refusal
    tells."""
    assert name is not None  # a plan's action: the table routes it only with the name
    try:
        return ctx.plan(name, asked.user, asked.channel)
    except HiddenPlan as exc:
        raise PlanHidden(exc.message) from None
    except PlanUnreachable as exc:
        raise PlanError(exc.message) from None


def route(text: str, today: dt.date, table: Sequence[Entry]) -> tuple[Entry, PlanCommand]:
    """The entry `text` names and the command its parser makes of it."""
    words = parse.words_of(text) or ["help"]
    head, rest = words[0], words[1:]
    first = {e.word: e for e in reversed(table) if not e.of_plan}
    if head in first:
        cmd = first[head].parse(None, head, rest, today)
    else:
        name = parse.plan_name(head)
        action, rest = (rest[0], rest[1:]) if rest else ("show", [])
        after = {e.word: e for e in reversed(table) if e.of_plan}
        if action not in after:
            raise parse.not_an_action(action, name, after)
        cmd = after[action].parse(name, action, rest, today)
    return next(e for e in table if e.name == cmd.action), cmd


def run(ctx: Context, text: str, asked: Asked) -> Json:
    """Parse, check the right, confirm the channel, act; refusals and bad
    input answered (anything else is the adapters' catch-all's)."""
    entry = None
    try:
        entry, cmd = route(text, asked.today, asked.table)
        # (a plan is reached only in its own channel or by an admin, see plan_of, so
        # this channel's right is the plan's too: an admin has it everywhere)
        refused = entry.needs and ctx.allows(entry.needs[0], asked.user, asked.channel,
                                             entry.needs[1])
        if refused:
            return views.reply(":lock: " + _("{refused} Nothing was changed.", refused=refused))
        if (entry.posts or (cmd.action == "actual" and cmd.args.get("slurm"))) \
                and ctx.channels.cached(asked.channel) is not Postable.YES:
            # Its messages go to this channel. Slack is asked after the reply, never
            # before it; if the bot may not post there, the outbox takes them to the
            # requester (this command's response_url, else a direct message) instead.
            ctx.channels.confirm(asked.channel)
        return entry.handle(ctx, cmd, asked)
    except PlanHidden as exc:
        return views.reply(":lock: " + (_("{refused} Nothing was changed.", refused=exc)
                                          if entry and entry.needs else str(exc)))
    except (PlanError, estimate.EstimateError) as exc:
        return views.error(str(exc))
    except Unwritable as exc:  # locked past the ack's budget, full, read-only
        return views.reply(":x: " + _("Nothing was stored: {why}.", why=unwritable_text(exc)))


def stored_plan(ctx: Context, name: str) -> Json:
    """A plan this command found or wrote (no command deletes a plan)."""
    plan = ctx.store.plan(name)
    assert plan is not None  # found or written above
    return plan


def help_lines(table: Sequence[Entry], **values: object) -> list[str]:
    """Each entry's lines in `/plan help`, in the table's order, in the language in use."""
    return [_(line, **values) for e in table for line in e.help]


def help_reply(table: Sequence[Entry], topic: str, **values: object) -> Json:
    """`/plan help`, or `/plan help WORD`: the table's lines that use one of its words."""
    lines = help_lines(table, **values)
    topics = list(dict.fromkeys(e.word for e in table if e.word != "help"))
    if topic in ("", "help"):
        return helpview.help_text(lines, topics)
    if topic not in topics and topic != "checklist":
        raise PlanError(sentences(
            _("`/plan help {topic}`: there is no such topic.", topic=topic),
            did_you_mean(topic, [*topics, "checklist"], "/plan help "),
            _("Topics: {topics}", topics=", ".join(topics))))
    return helpview.topic_help(about(lines, "/plan", "set" if topic == "checklist" else topic),
                            topic)
