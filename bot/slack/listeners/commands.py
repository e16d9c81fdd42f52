"""Slash commands. `/trial` answers within Slack's 3 seconds: it stores the job
and acks; the trial itself runs on a worker and its report arrives later.
Nothing here calls Slack's Web API before the ack, and the database's writes
wait at most ACK_WRITE_SECONDS (bot/slack/later.py). Each runs inside the
catch-all (bot/commands.py): a failure is answered too, with an error id."""
from __future__ import annotations

import datetime as dt
import functools

from bot import commands
from bot.slack.later import ACK_WRITE_SECONDS


def trial_callback(ack, command, context) -> None:
    _guarded(_trial, ack, command, context["trialbot"], "/trial")


def plan_callback(ack, command, context) -> None:
    _guarded(_plan, ack, command, context["trialbot"], "/plan")


def _guarded(handler, ack, command: dict, ctx, name: str) -> None:
    """The handler inside the catch-all, whose answer is the ack too."""
    commands.guarded(functools.partial(handler, ack, command, ctx), lambda reply: ack(**reply),
                     f"{name} {command.get('text', '')!r}",
                     functools.partial(ctx.store.channel_lang, command.get("channel_id")))


def _trial(ack, command: dict, ctx) -> None:
    with ctx.store.budget(ACK_WRITE_SECONDS):
        # trigger_id is the same on Slack's retries (HTTP and Socket Mode): the dedupe key.
        reply, _ = commands.trial(ctx, command.get("text", ""), command["user_id"],
                                  command["channel_id"], command.get("trigger_id"),
                                  command.get("response_url"))
    ack(**reply)


def _plan(ack, command: dict, ctx) -> None:
    with ctx.store.budget(ACK_WRITE_SECONDS):
        reply = commands.plan(ctx, command.get("text", ""), command["user_id"],
                              command["channel_id"], dt.datetime.now(dt.timezone.utc).date(),
                              request=command.get("trigger_id"),
                              response_url=command.get("response_url"))
    ack(**reply)


def register(app) -> None:
    app.command("/trial")(trial_callback)
    app.command("/plan")(plan_callback)
