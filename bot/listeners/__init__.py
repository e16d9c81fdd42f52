"""Slack listeners, split by kind as in Bolt's starter template. Each is thin:
ack, call the core, render."""
from __future__ import annotations

from bot.listeners import commands


def register(app, queue) -> None:
    commands.register(app, queue)
