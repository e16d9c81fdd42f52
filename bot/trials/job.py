"""A job is one trial request in the queue; these are the words for its life
(bot/states.py holds them, so the store below can set them too)."""
from __future__ import annotations

from bot.states import ENDED, WAITING, JobStatus

__all__ = ["ENDED", "WAITING", "JobStatus"]
