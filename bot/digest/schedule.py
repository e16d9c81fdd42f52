"""The weekly digest's schedule and posting: `/plan digest ...`, an APScheduler 3
cron job per channel in the channel's timezone, and the catch-up at start.

A row per channel and ISO week (`digests_sent`) is written in the transaction
that stores the digest's messages, so a double fire or a restart never posts a
week twice, and a week missed while the bot was down is posted when it starts.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
from zoneinfo import ZoneInfo

from bot.plans.plancmd import PlanError
from bot.trials.queue import JobQueue
from bot.plans import plan_command, planner, planview
from bot.digest import digest_build, digestchart
from bot.blocks import reply

log = logging.getLogger("trialbot.digest")

# A fire delayed up to this (a suspended VM, a busy host) still posts; the
# catch-up at start covers longer gaps.
MISFIRE_GRACE = 6 * 3600
LATE = dt.timedelta(minutes=10)  # posted later than this after its time: the digest says so


def trigger(schedule: dict):
    from apscheduler.triggers.cron import CronTrigger
    return CronTrigger(day_of_week=schedule["weekday"], hour=schedule["hour"],
                       minute=schedule["minute"], timezone=ZoneInfo(schedule["tz"]))


def collect(queue: JobQueue, channel: str, start: dt.datetime, end: dt.datetime,
            today: dt.date) -> tuple[dict, list[dict], list[dict]]:
    """The store's rows for one digest: the week's measured figures, each plan
    of the channel summarised, and the confirmed prices."""
    store = queue.store
    trials = store.digest_trials(channel, start.timestamp(), end.timestamp())
    idle = store.idle_by_worker(*digest_build.idle_days(start))
    m = digest_build.measure(trials, idle, start, end.tzinfo)
    price_list = store.prices()
    summaries = []
    for plan in store.plans(channel):
        try:
            ests = plan_command.estimates(queue, plan)
            costs = planview.costs(plan, ests, price_list, today)
            summaries.append(digest_build.plan_summary(plan, ests, plan_command.review_rows(queue, plan, ests),
                                                 costs))
        except (PlanError, planner.EstimateError) as exc:
            summaries.append({"name": plan["name"], "error": str(exc),
                              "open": planview.open_items(plan)})
        except Exception as exc:  # noqa: BLE001 - one odd plan must not lose the digest
            log.exception("digest: plan %s could not be summarised", plan["name"])
            summaries.append({"name": plan["name"], "error": f"could not be summarised "
                              f"({type(exc).__name__}; in the bot's log)",
                              "open": planview.open_items(plan)})
    return m, summaries, price_list


def build(queue: JobQueue, channel: str, end: dt.datetime, week: str | None,
          late: str | None = None, user: str | None = None,
          response_url: str | None = None) -> list[dict]:
    """The digest message, then its chart and the replies that continue its
    longer lists (for its thread). `user` (and `response_url`) is told if the
    channel refuses them: who scheduled it, or who asked for it now."""
    start, end = digest_build.window(end)
    today = end.date()
    m, summaries, price_list = collect(queue, channel, start, end, today)
    body, more = digest_build.text(start, end, week, m, summaries, price_list, today, late)
    chart = digestchart.png(m, summaries, f"#{channel} digest {week or ''} — "
                                          f"{start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M} "
                                          f"{end.tzinfo}")
    whom = {k: v for k, v in (("user", user), ("response_url", response_url)) if v}
    return [dict(m, **whom) for m in (
        digest_build.message(channel, body),
        digest_build.chart_message(channel, week or f"{end:%Y-%m-%d-%H%M}", chart),
        *(digest_build.thread_message(channel, part) for part in more))]


def post_scheduled(queue: JobQueue, schedule: dict, now: dt.datetime) -> bool:
    """Post the digest of the most recent scheduled time, unless that week was
    posted already. True when posted."""
    fire = digest_build.last_fire(schedule, now)
    week = digest_build.week_key(fire)
    if queue.store.digest_sent(schedule["channel"], week):
        return False
    late = None
    if now - fire > LATE:
        late = (f"Posted {now.astimezone(fire.tzinfo):%a %H:%M}, late: the bot was not running "
                f"at the scheduled {digest_build.schedule_text(schedule)}.")
    posted = queue.store.post_digest(schedule["channel"], week,
                                     build(queue, schedule["channel"], fire, week, late,
                                           schedule.get("user")))
    if posted:
        queue.on_message()
    return posted


def catch_up(queue: JobQueue, now: dt.datetime) -> list[str]:
    """At start: a week whose time passed while the bot was down (after the
    schedule was made) and was not posted is posted now. The channels posted."""
    out = []
    for schedule in queue.store.digests():
        fire = digest_build.last_fire(schedule, now)
        if fire.timestamp() >= schedule["created"] and post_scheduled(queue, schedule, now):
            out.append(schedule["channel"])
    return out


# `/plan digest ...` ----------------------------------------------------------

def command(queue: JobQueue, cmd, user: str, channel: str, now: dt.datetime,
            response_url: str | None = None) -> dict:
    store = queue.store
    current = store.digest(channel)
    if cmd.action == "digest-weekly":
        schedule = dict(cmd.args, channel=channel, user=user)
        old = store.set_digest(schedule)
        _resync(queue)
        nxt = trigger(schedule).get_next_fire_time(None, now)
        text = (f"Budget digest scheduled in this channel {digest_build.schedule_text(schedule)}; "
                f"next {nxt:%a %Y-%m-%d %H:%M %Z}."
                + (f" It replaces {digest_build.schedule_text(old)}." if old else "")
                + " `/plan digest now` posts one now; `/plan digest off` stops it.")
        return reply(text)
    if cmd.action == "digest-off":
        if not store.delete_digest(channel):
            raise PlanError("No digest is scheduled in this channel; nothing to stop")
        _resync(queue)
        return reply(f"Budget digest stopped in this channel (it was "
                     f"{digest_build.schedule_text(current)}).")
    if cmd.action == "digest-now":
        tz = ZoneInfo(current["tz"]) if current else dt.timezone.utc
        end = now.astimezone(tz)
        store.post_digest(channel, None, build(queue, channel, end, None, user=user,
                                               response_url=response_url))
        queue.on_message()
        return reply("Posting the budget digest of the last 7 days in this channel (the chart "
                     "follows in its thread).")
    if current is None:
        return reply("No digest is scheduled in this channel. `/plan digest weekly mon 09:00 "
                     "Asia/Seoul` schedules one (any weekday, time and IANA timezone); "
                     "`/plan digest now` posts one now.")
    nxt = trigger(current).get_next_fire_time(None, now)
    return reply(f"Budget digest in this channel {digest_build.schedule_text(current)}; next "
                 f"{nxt:%a %Y-%m-%d %H:%M %Z}. `/plan digest off` stops it.")


def _resync(queue: JobQueue) -> None:
    scheduler = getattr(queue, "digests", None)  # set by the runtime when one runs
    if scheduler is not None:
        scheduler.sync()


class Digests:
    """The running schedule: one cron job per stored schedule, re-read from the
    store whenever a `/plan digest` changes it."""

    def __init__(self, queue: JobQueue, clock=lambda: dt.datetime.now(dt.timezone.utc)):
        self.queue, self.clock = queue, clock
        self.scheduler = None

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
        wanted = {f"digest:{s['channel']}": s for s in self.queue.store.digests()}
        for job in self.scheduler.get_jobs():
            if job.id.startswith("digest:") and job.id not in wanted:
                job.remove()
        for job_id, s in wanted.items():
            self.scheduler.add_job(self.fire, trigger(s), args=[s["channel"]], id=job_id,
                                   replace_existing=True)

    def fire(self, channel: str) -> None:
        schedule = self.queue.store.digest(channel)
        if schedule is None:
            return
        try:
            post_scheduled(self.queue, schedule, self.clock())
        except Exception:  # noqa: BLE001 - the next fire or restart tries again
            log.exception("digest for %s failed", channel)

    def catch_up(self) -> None:
        try:
            posted = catch_up(self.queue, self.clock())
            if posted:
                log.info("digest: posted missed weeks for %s", ", ".join(posted))
        except Exception:  # noqa: BLE001 - logged; the schedule still runs
            log.exception("digest catch-up failed")
