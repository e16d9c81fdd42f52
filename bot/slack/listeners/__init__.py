"""Slack listeners, split by kind as in Bolt's starter template. Each is a
named callback, thin: ack, call the core with the Context, answer."""
from __future__ import annotations

from bot.slack.listeners import actions, commands, views


def register(app) -> None:
    commands.register(app)
    actions.register(app)
    views.register(app)
