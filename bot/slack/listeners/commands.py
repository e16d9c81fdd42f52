"""Slash commands. `/trial` answers within Slack's 3 seconds: it stores the job
and acks; the trial itself runs on a worker and its report arrives later."""
from __future__ import annotations

import datetime as dt

from bot.trials import trial_command
from bot.plans import plan_command


def register(app, queue) -> None:
    @app.command("/trial")
    def trial(ack, command):
        # trigger_id is the same on Slack's retries (HTTP and Socket Mode): the dedupe key.
        reply, _ = trial_command.handle(queue, command.get("text", ""), command["user_id"],
                                 command["channel_id"], command.get("trigger_id"),
                                 command.get("response_url"))
        ack(**reply)

    @app.command("/plan")
    def plan(ack, command):
        ack(**plan_command.handle(queue, command.get("text", ""), command["user_id"],
                           command["channel_id"], dt.datetime.now(dt.timezone.utc).date(),
                           request=command.get("trigger_id"),
                           response_url=command.get("response_url")))
