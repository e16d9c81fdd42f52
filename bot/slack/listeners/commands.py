"""Slash commands. `/trial` answers within Slack's 3 seconds: it stores the job
and acks; the trial itself runs on a worker and its report arrives later.
Nothing here calls Slack's Web API before the ack, and the database's writes
wait at most ACK_WRITE_SECONDS (bot/slack/later.py)."""
from __future__ import annotations

import datetime as dt

from bot.plans import command as plan_command
from bot.slack.later import ACK_WRITE_SECONDS
from bot.trials import command as trial_command


def trial_callback(ack, command, context) -> None:
    ctx = context["trialbot"]
    with ctx.store.budget(ACK_WRITE_SECONDS):
        # trigger_id is the same on Slack's retries (HTTP and Socket Mode): the dedupe key.
        reply, _ = trial_command.handle(ctx, command.get("text", ""), command["user_id"],
                                        command["channel_id"], command.get("trigger_id"),
                                        command.get("response_url"))
    ack(**reply)


def plan_callback(ack, command, context) -> None:
    ctx = context["trialbot"]
    with ctx.store.budget(ACK_WRITE_SECONDS):
        reply = plan_command.handle(ctx, command.get("text", ""), command["user_id"],
                                    command["channel_id"],
                                    dt.datetime.now(dt.timezone.utc).date(),
                                    request=command.get("trigger_id"),
                                    response_url=command.get("response_url"))
    ack(**reply)


def register(app) -> None:
    app.command("/trial")(trial_callback)
    app.command("/plan")(plan_callback)
