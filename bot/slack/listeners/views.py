"""Modal submissions: the "Add to plan…" choice. A bad choice (or a database
that cannot be written) is answered in the modal itself (response_action=
errors), so nothing is tagged by mistake; the confirmation is posted after
the ack (bot/slack/later.py). It runs inside the catch-all (bot/commands.py):
a failure is answered in the modal, with an error id."""
from __future__ import annotations

import functools
from concurrent.futures import Future

from bot import commands
from bot.context import unwritable_text
from bot.slack.later import ACK_WRITE_SECONDS, later
from bot.store import Unwritable
from bot.trials import card, tags
from worker import i18n
from worker.i18n import _


def plan_modal_callback(ack, body, view, client, context) -> Future | None:
    ctx = context["trialbot"]
    return commands.guarded(
        functools.partial(_plan_modal, ack, body, view, client, ctx),
        functools.partial(_in_modal, ack), "Add to plan (modal)",
        functools.partial(_lang, ctx, view))


def _in_modal(ack, reply: dict) -> None:
    """The catch-all's answer, where the user is looking (Slack shows 150 characters)."""
    ack(response_action="errors", errors={"block": reply["text"][:150]})


def _lang(ctx, view) -> str | None:
    job = ctx.store.job(int(view["private_metadata"]))
    return ctx.store.channel_lang(job["channel"] if job else None)


def _plan_modal(ack, body, view, client, ctx) -> Future | None:
    user = body["user"]["id"]
    job_id = int(view["private_metadata"])
    chosen = (view["state"]["values"].get("block", {}).get("choice", {})
              .get("selected_option") or {}).get("value", "")
    plan, _bar, block = chosen.partition("|")
    job = ctx.store.job(job_id)
    with i18n.using(ctx.store.channel_lang(job["channel"] if job else None)), \
            ctx.store.budget(ACK_WRITE_SECONDS):
        try:
            text = tags.add(ctx, job_id, plan, block, user)
        except tags.TagError as exc:
            ack(response_action="errors", errors={"block": exc.message[:150]})
            return None
        except Unwritable as exc:  # Slack shows 150 characters: the reason, then why later
            ack(response_action="errors", errors={"block": _(
                "Nothing was changed: the bot's database cannot be written now ({reason}). "
                "Try again in a minute.", reason=exc.reason.value)[:150]})
            return later(client.chat_postEphemeral, channel=job["channel"], user=user,
                         text=_(":x: Nothing was changed: {why}.", why=unwritable_text(exc)))
    ack()
    return later(client.chat_postEphemeral, channel=job["channel"], user=user, text=text)


def register(app) -> None:
    app.view(card.PLAN_MODAL)(plan_modal_callback)
