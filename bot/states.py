"""The words for a job's life, a try's outcome and a Slurm accounting
request's, as enums whose values are the text SQLite, the JSON API and the
reports hold: a member equals its text ("done" == JobStatus.DONE), so rows
read back as plain strings compare as before; and whether the bot may post
in a channel (Postable). The lowest layer: the store sets these, the
domains, views and seams read them."""
from __future__ import annotations

import enum
from typing import Any

# A JSON object as the domains pass it around: a job as stored, a fit, a payload.
Json = dict[str, Any]


class TextEnum(str, enum.Enum):
    """A str-valued enum that formats as its value (3.11's StrEnum; the
    project still runs on 3.10), so f-strings and SQL text get "done", never
    "JobStatus.DONE"."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return str(self.value).__format__(spec)


class JobStatus(TextEnum):
    """A job's `status` column."""
    HELD = "held"            # waits for Slack to say the bot may post in its channel
    QUEUED = "queued"
    RUNNING = "running"      # leased to a worker
    DONE = "done"            # its report says ok
    FAILED = "failed"
    CANCELLED = "cancelled"


class Outcome(TextEnum):
    """A try's status (an `attempts` row, a report's `status` once it ended;
    worker/report.py types it as the Literal of these values)."""
    OK = "ok"
    FAILED = "failed"


class ActualStatus(TextEnum):
    """A Slurm accounting request's `status` (a `slurm_actuals` row): queued
    until a Slurm worker leases it, running while its sacct runs, then done
    (an actual recorded) or failed (why in its message)."""
    QUEUED = "queued"
    RUNNING = "running"        # leased to a Slurm worker
    DONE = "done"
    FAILED = "failed"


class CheckStatus(TextEnum):
    """A compatibility check's `status` (a `compat_checks` row): queued until
    a worker leases it, running while it fetches and reads the repository,
    then done (a report read) or failed (why in its message)."""
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Postable(enum.Enum):
    """May the bot post in a channel, as known without asking Slack?"""
    YES = "yes"          # Slack said so within the cache's time
    STALE = "stale"      # Slack said so longer ago: used, and asked again after the ack
    UNKNOWN = "unknown"  # not asked yet: a trial there is held until Slack answers


# A job's status once nothing more will happen; and before: held for the
# channel check, queued, or leased to a worker.
ENDED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)
WAITING = (JobStatus.HELD, JobStatus.QUEUED, JobStatus.RUNNING)
