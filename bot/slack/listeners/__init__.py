"""Slack listeners, split by kind as in Bolt's starter template. Each is thin:
ack, call the core, render."""
from __future__ import annotations

from bot.slack.listeners import actions, commands, views


def register(app, queue) -> None:
    commands.register(app, queue)
    actions.register(app, queue)
    views.register(app, queue)
