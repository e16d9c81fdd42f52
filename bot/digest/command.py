"""`/plan digest ...` (its entries in /plan's table, ENTRIES) and the posting
of a digest: a week posted once per channel (a `digests_sent` row in the
transaction that stores its messages, so a double fire or a restart never
posts a week twice), a week missed while the bot was down posted at start,
marked late.
"""
from __future__ import annotations

import datetime as dt
import logging
from zoneinfo import ZoneInfo

from bot.blocks import reply
from bot.context import Context
from bot.digest import build as digest
from bot.digest import chart
from bot.plans import estimate, service, views
from bot.plans.entry import Asked, Entry
from bot.plans.grammar import PlanError
from bot.plans.parse import parse_digest_words
from worker import i18n
from worker.i18n import N_, _

log = logging.getLogger("trialbot.digest")

LATE = dt.timedelta(minutes=10)  # posted later than this after its time: the digest says so


def collect(ctx: Context, channel: str, start: dt.datetime, end: dt.datetime,
            today: dt.date) -> tuple[dict, list[dict], list[dict]]:
    """The store's rows for one digest: the week's measured figures, each plan
    of the channel summarised, and the confirmed prices."""
    store = ctx.store
    trials = store.digest_trials(channel, start.timestamp(), end.timestamp())
    idle = store.idle_by_worker(*digest.idle_days(start))
    m = digest.measure(trials, idle, start, end.tzinfo)
    price_list = store.prices()
    summaries = []
    for plan in store.plans(channel):
        try:
            ests = service.estimates(ctx, plan)
            costs = views.costs(plan, ests, price_list, today)
            summaries.append(digest.plan_summary(plan, ests, service.review_rows(ctx, plan, ests),
                                                 costs))
        except (PlanError, estimate.EstimateError) as exc:
            summaries.append({"name": plan["name"], "error": str(exc),
                              "open": views.open_items(plan)})
        except Exception as exc:  # noqa: BLE001 - one odd plan must not lose the digest
            log.exception("digest: plan %s could not be summarised", plan["name"])
            summaries.append({"name": plan["name"],
                              "error": _("could not be summarised ({error}; in the bot's log)",
                                         error=type(exc).__name__),
                              "open": views.open_items(plan)})
    return m, summaries, price_list


def build(ctx: Context, channel: str, end: dt.datetime, week: str | None,
          late: str | None = None, user: str | None = None,
          response_url: str | None = None) -> list[dict]:
    """The digest message, then its chart and the replies that continue its
    longer lists (for its thread). `user` (and `response_url`) is told if the
    channel refuses them: who scheduled it, or who asked for it now."""
    start, end = digest.window(end)
    today = end.date()
    m, summaries, price_list = collect(ctx, channel, start, end, today)
    body, more = digest.text(start, end, week, m, summaries, price_list, today, late)
    # the chart's title and labels stay English: matplotlib has no Korean font here
    png = chart.png(m, summaries, f"#{channel} digest {week or ''} — "
                                  f"{start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M} {end.tzinfo}")
    whom = {k: v for k, v in (("user", user), ("response_url", response_url)) if v}
    return [dict(msg, **whom) for msg in (
        digest.message(channel, body),
        digest.chart_message(channel, week or f"{end:%Y-%m-%d-%H%M}", png),
        *(digest.thread_message(channel, part) for part in more))]


def post_scheduled(ctx: Context, schedule: dict, now: dt.datetime) -> bool:
    """Post the digest of the most recent scheduled time, unless that week was
    posted already. True when posted."""
    fire = digest.last_fire(schedule, now)
    week = digest.week_key(fire)
    if ctx.store.digest_sent(schedule["channel"], week):
        return False
    # a scheduled post runs on the scheduler's thread: the channel's language is set here
    with i18n.using(ctx.store.channel_lang(schedule["channel"])):
        late = None
        if now - fire > LATE:
            late = _("Posted {when}, late: the bot was not running at the scheduled "
                     "{schedule}.", when=i18n.stamp(now.astimezone(fire.tzinfo), "%H:%M"),
                     schedule=digest.schedule_text(schedule))
        messages = build(ctx, schedule["channel"], fire, week, late, schedule.get("user"))
    posted = ctx.store.post_digest(schedule["channel"], week, messages)
    if posted:
        ctx.notify()
    return posted


def catch_up(ctx: Context, now: dt.datetime) -> list[str]:
    """At start: a week whose time passed while the bot was down (after the
    schedule was made) and was not posted is posted now. The channels posted."""
    out = []
    for schedule in ctx.store.digests():
        fire = digest.last_fire(schedule, now)
        if fire.timestamp() >= schedule["created"] and post_scheduled(ctx, schedule, now):
            out.append(schedule["channel"])
    return out


def _weekly(ctx: Context, cmd, asked: Asked) -> dict:
    schedule = dict(cmd.args, channel=asked.channel, user=asked.user)
    old = ctx.store.set_digest(schedule)
    _resync(ctx)
    nxt = digest.trigger(schedule).get_next_fire_time(None, asked.now)
    values = dict(schedule=digest.schedule_text(schedule),
                  next=i18n.stamp(nxt, "%Y-%m-%d %H:%M %Z"))
    return reply(_("Budget digest scheduled in this channel {schedule}; next {next}. It "
                   "replaces {old}. `/plan digest now` posts one now; `/plan digest off` stops "
                   "it.", old=digest.schedule_text(old), **values) if old else
                 _("Budget digest scheduled in this channel {schedule}; next {next}. "
                   "`/plan digest now` posts one now; `/plan digest off` stops it.", **values))


def _off(ctx: Context, cmd, asked: Asked) -> dict:
    current = ctx.store.digest(asked.channel)
    if current is None or not ctx.store.delete_digest(asked.channel):
        raise PlanError(_("No digest is scheduled in this channel; nothing to stop"))
    _resync(ctx)
    return reply(_("Budget digest stopped in this channel (it was {schedule}).",
                   schedule=digest.schedule_text(current)))


def _now(ctx: Context, cmd, asked: Asked) -> dict:
    current = ctx.store.digest(asked.channel)
    tz = ZoneInfo(current["tz"]) if current else dt.timezone.utc
    end = asked.now.astimezone(tz)
    ctx.store.post_digest(asked.channel, None, build(ctx, asked.channel, end, None,
                                                     user=asked.user,
                                                     response_url=asked.response_url))
    ctx.notify()
    return reply(_("Posting the budget digest of the last 7 days in this channel (the "
                   "chart follows in its thread)."))


def _show(ctx: Context, cmd, asked: Asked) -> dict:
    current = ctx.store.digest(asked.channel)
    if current is None:
        return reply(_("No digest is scheduled in this channel. `/plan digest weekly mon 09:00 "
                       "Asia/Seoul` schedules one (any weekday, time and IANA timezone); "
                       "`/plan digest now` posts one now."))
    nxt = digest.trigger(current).get_next_fire_time(None, asked.now)
    return reply(_("Budget digest in this channel {schedule}; next {next}. `/plan digest off` "
                   "stops it.", schedule=digest.schedule_text(current),
                   next=i18n.stamp(nxt, "%Y-%m-%d %H:%M %Z")))


def _resync(ctx: Context) -> None:
    if ctx.digests is not None:  # the running schedule, when one runs
        ctx.digests.sync()


# `/plan digest ...`: the entries bot/commands.py adds to /plan's table.
ENTRIES = (
    Entry("digest", "digest", parse_digest_words, _show, help=(N_(
        "• `/plan digest weekly mon 09:00 Asia/Seoul` (any weekday, time, IANA timezone) · "
        "`/plan digest now` · `/plan digest off`: the weekly budget digest in this channel"),)),
    Entry("digest-now", "digest", parse_digest_words, _now, posts=True,
          needs=("run", N_("post in this channel"))),
    Entry("digest-weekly", "digest", parse_digest_words, _weekly, posts=True,
          needs=("admin", N_("schedule the digest"))),
    Entry("digest-off", "digest", parse_digest_words, _off,
          needs=("admin", N_("stop the digest"))),
)
