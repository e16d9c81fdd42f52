"""The running digest schedule: an APScheduler 3 cron job per channel in the
channel's timezone, re-read from the store whenever `/plan digest` changes
it, and the catch-up at start."""
from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

from bot.digest import build as digest
from bot.digest import command
from bot.ports import Now

log = logging.getLogger("trialbot.digest")

# A fire delayed up to this (a suspended VM, a busy host) still posts; the
# catch-up at start covers longer gaps.
MISFIRE_GRACE = 6 * 3600


class Digests:
    """The running schedule: one cron job per stored schedule, re-read from the
    store whenever a `/plan digest` changes it."""

    def __init__(self, ctx, clock: Now = lambda: dt.datetime.now(dt.timezone.utc)):
        self.ctx, self.clock = ctx, clock
        self.scheduler: Any = None  # apscheduler's BackgroundScheduler (untyped), from start()

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        self.scheduler = BackgroundScheduler(
            timezone=dt.timezone.utc,
            job_defaults={"coalesce": True, "misfire_grace_time": MISFIRE_GRACE,
                          "max_instances": 1})
        self.scheduler.start()
        self.sync()
        # Now, off this thread (a plain thread: a one-off scheduler job raced shutdown).
        threading.Thread(target=self.catch_up, daemon=True, name="digest-catch-up").start()

    def stop(self) -> None:
        if self.scheduler is not None and self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def sync(self) -> None:
        if self.scheduler is None:
            return
        wanted = {f"digest:{s['channel']}": s for s in self.ctx.store.digests()}
        for job in self.scheduler.get_jobs():
            if job.id.startswith("digest:") and job.id not in wanted:
                job.remove()
        for job_id, s in wanted.items():
            self.scheduler.add_job(self.fire, digest.trigger(s), args=[s["channel"]], id=job_id,
                                   replace_existing=True)

    def fire(self, channel: str) -> None:
        schedule = self.ctx.store.digest(channel)
        if schedule is None:
            return
        try:
            command.post_scheduled(self.ctx, schedule, self.clock())
        except Exception:  # noqa: BLE001 - the next fire or restart tries again
            log.exception("digest for %s failed", channel)

    def catch_up(self) -> None:
        try:
            posted = command.catch_up(self.ctx, self.clock())
            if posted:
                log.info("digest: posted missed weeks for %s", ", ".join(posted))
        except Exception:  # noqa: BLE001 - logged; the schedule still runs
            log.exception("digest catch-up failed")
