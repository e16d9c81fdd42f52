"""A job is one trial request in the queue; these are the words for its life."""
from __future__ import annotations

ENDED = ("done", "failed", "cancelled")  # a job's status once nothing more will happen
# ... and before: held for the channel check, queued, or leased to a worker
WAITING = ("held", "queued", "running")
