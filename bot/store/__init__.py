"""All state, in one SQLite file (WAL), through sqlite-utils. The only package
with SQL in it: a mixin per table group (jobs.py, leasing.py, workers.py, outbox.py,
plans.py, slurm.py, checks.py, digests.py, channels.py) on base.py (connection,
transactions, request keys), the frozen baseline (schema.py) and the versioned
steps (migrations.py). `compat_checks`: the compatibility checks (#34).

Rows: `jobs` (a trial request and its lease), `needs` (the classes that
decide where a job may run, for leasing), `attempts` (every try of a job),
`workers`, `worker_idle` (seconds ready with nothing to run, per day),
`worker_requests` (the workers' idempotency keys, a day of them),
`outbox` (every message the bot will post, stored before it is sent),
`worker_tokens` (per-worker API tokens, hashed), the
plans' tables, and `digests` / `digests_sent` (the weekly digest's schedule
per channel, and each week posted), `channel_settings` (a channel's language and currency),
`backups` (each `trialbot backup` made; health.py reads them for `trialbot
doctor`, read-only).
"""
from __future__ import annotations

from bot.store.backup import backup
from bot.store.base import DuplicateRequest, Reason, Unwritable
from bot.store.channels import Channels
from bot.store.checks import Checks
from bot.store.digests import Digests
from bot.store.leasing import Leasing
from bot.store.outbox import RESPONSE_URL_SECONDS, RESPONSE_URL_USES
from bot.store.slurm import SlurmActuals

__all__ = ["RESPONSE_URL_SECONDS", "RESPONSE_URL_USES", "DuplicateRequest", "Reason", "Store",
           "Unwritable", "backup"]


class Store(Leasing, SlurmActuals, Checks, Digests, Channels):
    """One store over the file: a mixin per table group (each on Base and on the
    mixins whose helpers it calls: Leasing on Jobs, Jobs on Outbox and Workers,
    SlurmActuals on Plans, Outbox and Workers), all on one connection per
    thread, so a transaction (Base.tx) may span them (a report and its outbox
    messages are one commit)."""
