"""A job is one trial request in the queue; these are the words for its life."""
from __future__ import annotations

ENDED = ("done", "failed", "cancelled")  # a job's status once nothing more will happen
