"""The two slash commands whole, as the adapters (Slack's listeners, the
console) call them: `/trial` with a tagged trial's plan notes, and `/plan`
whose table gains the digest's entries. Composed here, above bot.plans and
bot.digest, so that no lower layer calls up into them. And the one
catch-all every handler runs in: an unexpected error is logged with its
traceback under a short id, and the user is told that id."""
from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Callable
from typing import TypeVar

from bot.blocks import reply
from bot.digest import command as digest_command
from bot.plans import command as plan_command
from bot.plans import kept_apart
from bot.trials import command as trial_command
from worker import i18n
from worker.i18n import _

log = logging.getLogger("trialbot.commands")
T = TypeVar("T")

PLAN_TABLE = (*plan_command.TABLE, *digest_command.ENTRIES)


def trial(ctx, text: str, user: str, channel: str, request: str | None = None,
          response_url: str | None = None) -> tuple[dict, dict | None]:
    """`/trial`: (the ephemeral reply, the queued job or None). A trial tagged
    to a plan block that will not count as its actual says why."""
    out = trial_command.answer(ctx, text, user, channel, request, response_url)
    if not out.tagged:
        return out.reply, out.job
    with i18n.using(ctx.store.channel_lang(channel)):
        notes = kept_apart.queue_notes(ctx, out.tagged, list(out.specs), out.route or {})
    return trial_command.also(out.reply, "\n".join(f":warning: {n}" for n in notes)), out.job


def plan(ctx, text: str, user: str, channel: str, today: dt.date,
         now: dt.datetime | None = None, request: str | None = None,
         response_url: str | None = None) -> dict:
    """`/plan`, digests included (bot/plans/command.py's handle, with the whole table)."""
    return plan_command.handle(ctx, text, user, channel, today, now, request, response_url,
                               table=PLAN_TABLE)


def guarded(call: Callable[[], T], answer: Callable[[dict], T], what: str,
            lang: Callable[[], str | None] = lambda: None) -> T:
    """The catch-all every handler runs in: call(), or, when it raises anything
    nothing else handled, the error logged at ERROR with its traceback under a
    new error id, and answer(an ephemeral reply naming that id) in the
    channel's language (`lang`) when it can still be read. Never silence,
    never a traceback to the user."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - the catch-all: logged under its id, and answered
        error_id = secrets.token_hex(4)
        log.error("%s failed (error id %s)", what, error_id, exc_info=True)
        try:
            language = lang()
        except Exception:  # noqa: BLE001 - the store may be what failed: the default then
            language = None
        with i18n.using(language):
            return answer(reply(":x: " + _("Something went wrong (error id {id}). Tell whoever "
                                           "runs the bot, with this id.", id=error_id)))
