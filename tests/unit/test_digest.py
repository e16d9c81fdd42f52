"""The weekly budget digest: `/plan digest ...` through its handler on a real
SQLite store, the figures from trials finished as a worker finishes them, the
week's sent-row, the catch-up and the cron trigger. No sleeping: every "now"
is passed in."""
import dataclasses
import datetime as dt
import json
from zoneinfo import ZoneInfo

import pytest

from bot import commands
from bot.app.runtime import context
from bot.digest import build as digest_build
from bot.digest import command as schedule
from bot.digest import scheduler
from bot.store import Store
from test_planner import report
from test_plans import finish

UTC = dt.timezone.utc
SEOUL = {"weekday": "mon", "hour": 9, "minute": 0, "tz": "Asia/Seoul"}


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "d.db")), admins=frozenset({"U1"}))


def say(ctx, text, now=None, channel="C1"):
    now = now or dt.datetime.now(UTC)
    return commands.plan(ctx, text, "U1", channel, now.date(), now)["text"]


def digests_posted(ctx):
    return [r for r in ctx.store.db["outbox"].rows if r["kind"] == "digest"]


@pytest.mark.parametrize("text, says", [
    ("digest weekly mnd 09:00 Asia/Seoul", "`mnd` is not a weekday: write mon, tue"),
    ("digest weekly mon 25:00 Asia/Seoul", "`25:00`: hours go from 00 to 23"),
    ("digest weekly mon 09:75 Asia/Seoul", "minutes go from 00 to 59"),
    ("digest weekly mon 9am Asia/Seoul", "write 24-hour HH:MM"),
    ("digest weekly mon 09:00 Asia/Seol", "`Asia/Seol` is not an IANA timezone: did you mean "
                                          "Asia/Seoul?"),
    ("digest weekly mon 09:00 Mars/Olympus", "not an IANA timezone: write Area/City"),
    ("digest weekly mon 09:00", "needs a weekday, a time and a timezone"),
    ("digest monthly", "the digest takes weekly, now or off"),
    ("digest off", "No digest is scheduled in this channel"),
])
def test_a_bad_digest_spec_is_answered_and_schedules_nothing(ctx, text, says):
    out = say(ctx, text)
    assert out.startswith(":x:") and says in out and "Nothing was stored" in out
    assert ctx.store.digests() == [] and ctx.store.db["outbox"].count == 0


def test_schedule_show_and_off(ctx):
    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    out = say(ctx, "digest weekly Monday 9:00 asia/seoul", now)
    assert "every Mon at 09:00 Asia/Seoul; next Mon 2026-12-07 09:00 KST" in out
    assert ctx.store.digest("C1")["tz"] == "Asia/Seoul"
    out = say(ctx, "digest weekly fri 17:30 Europe/Berlin", now)
    assert "It replaces every Mon at 09:00 Asia/Seoul" in out
    assert "every Fri at 17:30 Europe/Berlin; next Fri 2026-12-04 17:30 CET" in say(
        ctx, "digest", now)
    assert "stopped" in say(ctx, "digest off", now)
    assert ctx.store.digests() == [] and "No digest is scheduled" in say(ctx, "digest", now)


def test_the_cron_trigger_fires_in_the_channels_timezone():
    t = digest_build.trigger(SEOUL)
    nxt = t.get_next_fire_time(None, dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    assert nxt == dt.datetime(2026, 12, 7, 0, 0, tzinfo=UTC)  # Mon 09:00 KST
    # Across a DST change the wall-clock time holds: 09:00 CET, then 09:00 CEST.
    berlin = {"weekday": "fri", "hour": 9, "minute": 0, "tz": "Europe/Berlin"}
    t = digest_build.trigger(berlin)
    first = t.get_next_fire_time(None, dt.datetime(2027, 3, 22, tzinfo=UTC))
    second = t.get_next_fire_time(first, first + dt.timedelta(seconds=1))
    assert first == dt.datetime(2027, 3, 26, 8, 0, tzinfo=UTC)
    assert second == dt.datetime(2027, 4, 2, 7, 0, tzinfo=UTC)
    # The week a fire belongs to agrees with the trigger, at any "now".
    for s in (SEOUL, berlin):
        t = digest_build.trigger(s)
        for hours in range(0, 24 * 21, 7):
            now = dt.datetime(2027, 3, 15, tzinfo=UTC) + dt.timedelta(hours=hours)
            last, nxt = digest_build.last_fire(s, now), t.get_next_fire_time(None, now)
            assert last <= now <= nxt and nxt - last <= dt.timedelta(days=7, hours=1)
            assert t.get_next_fire_time(None, last) == last
            assert digest_build.last_fire(s, nxt) == nxt
    assert digest_build.week_key(dt.datetime(2026, 12, 7, 9, 0, tzinfo=ZoneInfo("Asia/Seoul"))) \
        == "2026-W50"


def build_week(ctx, now):
    """A small week: an ok trial, a failed one, a tagged actual, idle and a price."""
    ctx.store.upsert_worker("w1", {"gpus": ["NVIDIA H100 80GB HBM3"]})
    t = finish(ctx, report())  # 30 + 60 + 5 prep, 120 data, 10 × 2 s runs
    finish(ctx, dict(report(), status="failed",
                       error={"class": "oom", "message": "CUDA out of memory", "phase": "run"}))
    say(ctx, "new repro gpu=H100 platform=cuda", now)
    say(ctx, f"repro block baseline runs=10 trial={t}", now)
    finish(ctx, report(mean=3.0), tags=("repro", "baseline"))  # 10 × 3 s: slower runs
    ctx.store.add_idle("w1", {(now - dt.timedelta(days=1)).date().isoformat(): 1800})
    say(ctx, f"price H100 $2.50/h source=https://x.example/q date={now.date()}", now)
    say(ctx, f"price electricity 0.12/kWh source=bill date={now.date() - dt.timedelta(days=35)}",
        now)


def test_digest_now_posts_the_measured_figures_and_a_chart_in_its_thread(ctx):
    now = dt.datetime.now(UTC)
    build_week(ctx, now)
    assert "Posting the budget digest" in say(ctx, "digest now")
    rows = list(ctx.store.db["outbox"].rows)
    post, chart = rows[-2], rows[-1]
    text = post["text"]
    assert "*Trials*: 3 ended (2 ok, 1 failed)" in text
    # GPU-seconds: runs 20 + 30, prep 95 + 95, data 120 + 120, retries 235 (the failed
    # trial's attempt), idle 1800 → 2515 s: each figure to 3 significant digits, the
    # total from the unrounded parts (0.69861 h).
    assert ("*GPU-hours measured*: 0.699 GPU-h = runs 0.0139 + prep 0.0528 + data 0.0667 + "
            "retries 0.0653 + idle 0.500") in text
    assert "w1 0.50 h (1 GPU)" in text
    # 0.69861 GPU-h (the per-GPU sum, unrounded) × $2.50 = $1.7465 → $1.75
    assert "NVIDIA H100 80GB HBM3: 0.699 GPU-h × H100-80GB rent $2.5 per GPU-hour" in text
    assert "= $1.75" in text
    assert "*repro* (H100-80GB): estimate 0.0653 GPU-h, cost $0.16" in text
    assert "biggest variance baseline +0.00278 GPU-h, mostly slower runs" in text
    assert "electricity electricity" not in text and "electricity 0.12 per kWh" in text
    assert "STALE: 35 days old" in text and "went stale this week" in text
    assert "*repro*: paper, baseline" in text
    assert chart["kind"] == "digest-chart" and chart["thread_of"] == post["id"]
    assert chart["content"][:8] == b"\x89PNG\r\n\x1a\n"
    # `now` records no week: the scheduled digest still posts.
    assert ctx.store.db["digests_sent"].count == 0


def test_no_price_says_unconfirmed(ctx):
    finish(ctx, report())
    say(ctx, "digest now")
    text = digests_posted(ctx)[-1]["text"]
    assert "NVIDIA H100 80GB HBM3: 0.0653 GPU-h, cost unconfirmed (no confirmed price" in text
    assert "$" not in text


def test_a_double_fire_posts_the_week_once(ctx):
    now = dt.datetime.now(UTC)
    finish(ctx, report())
    say(ctx, "digest weekly mon 09:00 Asia/Seoul", now)
    s = ctx.store.digest("C1")
    fire = digest_build.trigger(s).get_next_fire_time(None, now)
    assert schedule.post_scheduled(ctx, s, fire + dt.timedelta(seconds=2))
    assert not schedule.post_scheduled(ctx, s, fire + dt.timedelta(seconds=3))
    week = digest_build.week_key(fire)
    assert not ctx.store.post_digest("C1", week, [{"channel": "C1", "text": "again"}])
    posted = digests_posted(ctx)
    assert len(posted) == 1 and f"*Weekly budget digest* {week}" in posted[0]["text"]
    assert "late" not in posted[0]["text"]
    charts = [r for r in ctx.store.db["outbox"].rows if r["kind"] == "digest-chart"]
    assert len(charts) == 1  # the digest and its chart, once
    # The next week posts again.
    assert schedule.post_scheduled(ctx, s, fire + dt.timedelta(days=7, seconds=2))
    assert len(digests_posted(ctx)) == 2


def test_a_week_missed_while_down_is_posted_at_start_and_only_once(ctx):
    now = dt.datetime.now(UTC)
    say(ctx, "digest weekly mon 09:00 Asia/Seoul", now)
    yesterday = (now - dt.timedelta(days=1)).astimezone(ZoneInfo("Asia/Seoul"))
    say(ctx, f"digest weekly {digest_build.WEEKDAYS[yesterday.weekday()]} "
               f"{yesterday:%H:%M} Asia/Seoul", now, channel="C2")
    # C2's last time was before it was scheduled: nothing to catch up.
    assert schedule.catch_up(ctx, now) == []
    # The bot was down over C1's next fire; it starts 3 hours later.
    fire = digest_build.trigger(ctx.store.digest("C1")).get_next_fire_time(None, now)
    later = fire + dt.timedelta(hours=3)
    assert "C1" in schedule.catch_up(ctx, later)
    posted = [r for r in digests_posted(ctx) if r["channel"] == "C1"]
    assert len(posted) == 1 and "late: the bot was not running at the scheduled" in \
        posted[0]["text"]
    assert schedule.catch_up(ctx, later + dt.timedelta(minutes=5)) in ([], ["C2"])
    assert len([r for r in digests_posted(ctx) if r["channel"] == "C1"]) == 1


def test_the_running_scheduler_follows_digest_commands(ctx):
    d = scheduler.Digests(ctx)
    ctx = dataclasses.replace(ctx, digests=d)
    d.start()
    try:
        say(ctx, "digest weekly mon 09:00 Asia/Seoul")
        job = d.scheduler.get_job("digest:C1")
        assert job is not None and str(job.trigger.timezone) == "Asia/Seoul"
        assert job.misfire_grace_time == scheduler.MISFIRE_GRACE and job.coalesce
        assert job.next_run_time.astimezone(ZoneInfo("Asia/Seoul")).strftime("%a %H:%M") \
            == "Mon 09:00"
        say(ctx, "digest off")
        assert d.scheduler.get_job("digest:C1") is None
    finally:
        d.stop()


def test_a_cancelled_trials_time_is_counted_as_retries(ctx):
    from test_plans import cancel_running
    ctx.store.upsert_worker("w1", {"gpus": ["NVIDIA H100 80GB HBM3"]})
    finish(ctx, report())  # 235 s: runs 20, prep 95, data 120
    cancel_running(ctx, seconds=360.0)  # killed after 6 minutes on the GPU
    say(ctx, "digest now")
    text = digests_posted(ctx)[-1]["text"]
    assert "*Trials*: 2 ended (1 ok, 0 failed, 1 cancelled)" in text
    # 595 s = 0.165 GPU-h: the cancelled trial's 360 s are retries
    assert "0.165 GPU-h = runs 0.00556 + prep 0.0264 + data 0.0333 + retries 0.100" in text
    assert "retries = failed attempts' and cancelled trials' seconds" in text


def test_plans_past_the_cap_continue_in_the_digests_thread(ctx):
    for i in range(1, 41):  # 40 plans, each with open checklist items
        say(ctx, f"new p{i:02d} gpu=H100")
    say(ctx, "new elsewhere", channel="C2")
    say(ctx, "digest now")
    rows = [r for r in ctx.store.db["outbox"].rows if r["channel"] == "C1"]
    parent, chart, *more = rows
    assert parent["kind"] == "digest" and chart["kind"] == "digest-chart"
    assert "• … and 25 more plans, continued in the thread" in parent["text"]
    assert "• … and 25 more plans with open items, continued in the thread" in parent["text"]
    assert [m["thread_of"] for m in more] == [parent["id"]] * 4
    assert [m["text"].splitlines()[0] for m in more] == [
        "*Plans* (continued: 16–30 of 40):", "*Plans* (continued: 31–40 of 40):",
        "*Open checklist items blocking a plan* (continued: 16–30 of 40):",
        "*Open checklist items blocking a plan* (continued: 31–40 of 40):"]
    everything = "\n".join(r["text"] for r in rows)
    for i in range(1, 41):  # every plan in each list once, none dropped
        assert everything.count(f"*p{i:02d}*: no blocks yet") == 1
        assert everything.count(f"*p{i:02d}*: paper, ") == 1
    assert "elsewhere" not in everything
    for r in [parent, *more]:  # each within Slack's limits
        blocks = json.loads(r["blocks"])
        assert len(r["text"]) < 40000 and len(blocks) <= 50
        assert all(len(b.get("text", {}).get("text", "")) <= 3000 for b in blocks)
