"""Schema version 1, the baseline. Frozen: a change to the schema is a new
step in bot/store/migrations.py, never an edit here."""
from __future__ import annotations

import sqlite_utils


def baseline(db: sqlite_utils.Database) -> None:
    """Create the version-1 tables; with transform=True an older file's tables
    are brought up to them, rows kept."""
    _jobs(db)
    _around_jobs(db)
    _plans(db)
    _digests(db)
    db["jobs"].create_index(["channel", "finished"], if_not_exists=True)
    db["jobs"].create_index(["plan"], if_not_exists=True)  # a plan's actuals


def _jobs(db: sqlite_utils.Database) -> None:
    db["jobs"].create({
        "id": int, "workload": str, "spec": str, "words": str, "user": str,
        "channel": str, "status": str, "worker": str, "lease": str,
        "lease_expires": float, "attempts": int, "created": float, "started": float,
        "finished": float, "report": str, "error_class": str, "started_msg": int,
        "timeline": str,  # apart from `report`: status and list stay light
        "sweep": int,  # the first job's id, for every job of one `/trial sweep`
        "plan": str, "block": str,  # `/trial ... plan=NAME block=KIND`: an actual
        "ladder": int, "budget": float,  # `/trial ladder`: first job's id, memory budget
        "group_kind": str,  # "ladder" or "ab": what the `ladder` group's message is
        "progress": str,  # the worker's last heartbeat: phase and attempt
        "cancel": float, "cancelled_by": str,  # a cancel asked for, and by whom
    }, pk="id", not_null={"workload", "spec", "status"},
        defaults={"attempts": 0}, transform=True)
    db["jobs"].create_index(["status"], if_not_exists=True)
    db["jobs"].create_index(["user", "started"], if_not_exists=True)  # fair leasing


def _around_jobs(db: sqlite_utils.Database) -> None:
    """Requests, workers, the outbox, attempts and idle: what a job's life touches."""
    # A Slack request that queued jobs, by its trigger_id: a retried or
    # doubled request finds its key taken and queues nothing.
    db["requests"].create({"key": str, "jobs": str, "created": float}, pk="key",
                          transform=True)
    db["workers"].create({"name": str, "info": str, "registered": float,
                          "last_seen": float, "job": int},
                         pk="name", transform=True)
    db["outbox"].create({
        "id": int, "channel": str, "thread_of": int, "job": int, "kind": str,
        "text": str, "blocks": str, "created": float, "sent": float, "ts": str,
        "tries": int, "last_error": str, "given_up": float, "file": str,
        "content": str,  # a file's text (an export); a chart is drawn at send time
        "update_of": int,  # chat.update of that message instead of a new post
        "version": int,  # bumped when a pending update's text is replaced
    }, pk="id", defaults={"tries": 0, "version": 0}, transform=True)
    db["outbox"].create_index(["sent"], if_not_exists=True)
    # Every try of a job: the worker's own retries and leases that expired.
    db["attempts"].create({
        "id": int, "job": int, "n": int, "worker": str, "status": str, "error_class": str,
        "message": str, "seconds": float, "changed": str, "next": str, "recorded": float,
    }, pk="id", transform=True)
    db["attempts"].create_index(["job"], if_not_exists=True)
    db["worker_idle"].create({"worker": str, "day": str, "seconds": float},
                             pk=("worker", "day"), transform=True)


def _plans(db: sqlite_utils.Database) -> None:
    # Plans: `facts` holds the checklist and the planning settings, `locked` the
    # config and code version each block's trials had when the plan was locked.
    db["plans"].create({"name": str, "channel": str, "user": str, "created": float,
                        "facts": str, "locked": str}, pk="name", transform=True)
    db["blocks"].create({"plan": str, "kind": str, "runs": int, "configs": int,
                         "gpus": int, "trials": str, "sweep": int, "predict": str,
                         "handoff": float, "note": str, "user": str, "created": float},
                        pk=("plan", "kind"), transform=True)
    db["prices"].create({"id": int, "item": str, "kind": str, "value": float,
                         "unit": str, "currency": str, "source": str, "date": str,
                         "user": str, "recorded": float}, pk="id", transform=True)
    db["actuals"].create({"id": int, "plan": str, "block": str, "hours": float,
                          "parts": str, "runs": int, "note": str, "user": str,
                          "recorded": float},
                         pk="id", transform=True)


def _digests(db: sqlite_utils.Database) -> None:
    # The weekly digest: one schedule per channel, and one row per channel and
    # week posted (its key makes a second post of a week impossible).
    db["digests"].create({"channel": str, "weekday": str, "hour": int, "minute": int,
                          "tz": str, "user": str, "created": float},
                         pk="channel", transform=True)
    db["digests_sent"].create({"channel": str, "week": str, "posted": float,
                               "message": int}, pk=("channel", "week"), transform=True)
