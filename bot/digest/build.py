"""The weekly budget digest: which week, its figures and its text. Pure: the
schedule, the store's rows and `now` are passed in.

Every figure is a sum of measurements and says which: trial wall time split
by the reports' phases (the planner's own split), failed attempts' and
cancelled trials' seconds, the workers' reported idle seconds, and money only
from confirmed prices.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

from bot import figures
from bot.blocks import chunks, context, section
from bot.fits import gpus
from bot.plans import estimate, prices, review, views
from bot.plans.parse import WEEKDAYS

COMPONENTS = ("runs", "prep", "data", "retries", "idle")
MAX_LINES = 15  # plans listed in one message (it has to stay readable); the rest in replies


# the week ----------------------------------------------------------------

def trigger(schedule: dict):
    """The schedule as an APScheduler cron trigger in its own timezone."""
    from apscheduler.triggers.cron import CronTrigger
    return CronTrigger(day_of_week=schedule["weekday"], hour=schedule["hour"],
                       minute=schedule["minute"], timezone=ZoneInfo(schedule["tz"]))


def _at(day: dt.date, schedule: dict, tz: ZoneInfo) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(schedule["hour"], schedule["minute"]), tzinfo=tz)


def last_fire(schedule: dict, now: dt.datetime) -> dt.datetime:
    """The most recent scheduled time at or before `now`, in the schedule's zone."""
    tz = ZoneInfo(schedule["tz"])
    local = now.astimezone(tz)
    day = local.date() - dt.timedelta(days=(local.weekday()
                                            - WEEKDAYS.index(schedule["weekday"])) % 7)
    fire = _at(day, schedule, tz)
    return fire if fire <= now else _at(day - dt.timedelta(days=7), schedule, tz)


def week_key(fire: dt.datetime) -> str:
    """The ISO week of the fire's local date: one digest per channel and week."""
    year, week, _ = fire.date().isocalendar()
    return f"{year}-W{week:02d}"


def window(end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The 7 days before `end`, in local wall-clock time (a DST week is 167 or 169 h)."""
    start = dt.datetime.combine(end.date() - dt.timedelta(days=7), end.timetz())
    return start, end


def idle_days(start: dt.datetime) -> tuple[str, str]:
    """The 7 UTC days whose idle counts for the week: workers report idle per
    UTC day, so the week is taken as the 7 UTC days from the one it starts on."""
    first = start.astimezone(dt.timezone.utc).date()
    return first.isoformat(), (first + dt.timedelta(days=6)).isoformat()


# the figures -------------------------------------------------------------

def trial_parts(row: dict) -> dict:
    """One trial's GPU-seconds (or CPU seconds) split as the planner splits an
    actual: prep, data and runs from its phases, retries from its failed attempts."""
    job = {"report": {"status": row["report_status"], "seconds": row["seconds"] or 0.0,
                      "phases": row["phases"], "latency": {"count": row["count"]}}}
    failed = [{"status": "failed", "seconds": row["failed_seconds"] or 0.0}]
    return review.actual_of_job(job, failed, max(1, row["gpu_count"] or 0))


def measure(trials: list[dict], idle: list[dict], start: dt.datetime, tz) -> dict:
    """Sums over the week's trials and idle rows, apart for GPU and CPU-only
    work (a CPU box's hours are no GPU-hours), per component, per local day
    and per GPU kind."""
    # Local dates the week touches: 8 when it starts mid-day (first and last partly).
    last = (start + dt.timedelta(days=7) - dt.timedelta(microseconds=1)).date()
    days = [start.date() + dt.timedelta(days=i) for i in range((last - start.date()).days + 1)]
    out = {"trials": len(trials), "ok": 0, "failed": 0, "cancelled": 0, "retried": 0,
           "failed_tries": 0,
           "days": days, "idle_workers": {}, "by_gpu": {},
           **{kind: {"seconds": dict.fromkeys(COMPONENTS, 0.0),
                     "per_day": {d: dict.fromkeys(COMPONENTS, 0.0) for d in days}}
              for kind in ("gpu", "cpu")}}
    for row in trials:
        out[{"done": "ok", "cancelled": "cancelled"}.get(row["status"], "failed")] += 1
        out["retried"] += (row["tries"] or 0) > 1
        out["failed_tries"] += row["failed_tries"] or 0
        kind = "gpu" if row["gpu_count"] else "cpu"
        day = dt.datetime.fromtimestamp(row["finished"], tz).date()
        parts = trial_parts(row)
        for c in COMPONENTS[:-1]:
            out[kind]["seconds"][c] += parts[c]
            if day in out[kind]["per_day"]:
                out[kind]["per_day"][day][c] += parts[c]
        if kind == "gpu":
            name = row["gpu_name"] or "unnamed GPU"
            out["by_gpu"][name] = out["by_gpu"].get(name, 0.0) + sum(
                parts[c] for c in COMPONENTS[:-1])
    for row in idle:
        gpus = row["gpus"] or []
        w = out["idle_workers"].setdefault(row["worker"], {"seconds": 0.0, "gpus": gpus})
        w["seconds"] += row["seconds"]
        kind = "gpu" if gpus else "cpu"
        s = row["seconds"] * max(1, len(gpus))  # every GPU of an idle box sits idle
        out[kind]["seconds"]["idle"] += s
        day = dt.date.fromisoformat(row["day"])
        if day in out[kind]["per_day"]:
            out[kind]["per_day"][day]["idle"] += s
        for name in gpus:
            out["by_gpu"][name] = out["by_gpu"].get(name, 0.0) + row["seconds"]
    return out


def rent_for(gpu_name: str, price_list: list[dict]) -> dict | None:
    """The confirmed rental rate whose item names this GPU (`H100` for
    "NVIDIA H100 80GB HBM3"); the most specific name wins."""
    env = {"env": {"gpu_count": 1, "gpu_name": gpu_name}}
    found = [p for p in price_list if p["kind"] == "rent" and gpus.matches_gpu(env, p["item"])]
    return max(found, key=lambda p: len(p["item"]), default=None)


def plan_summary(plan: dict, ests: list, reviewed: list[dict], costs: list[str]) -> dict:
    """A plan's estimate, its actuals so far and the biggest variance with the
    review's cause for it."""
    done = [r for r in reviewed if r.get("actual") is not None]
    out = {"name": plan["name"], "gpu": plan["facts"].get("gpu"),
           "estimate": estimate.total([e for _, e, _ in ests])["hours"] if ests else None,
           "blocks": len(ests), "cost": costs[-1] if ests else None,
           "open": views.open_items(plan), "actual": None, "biggest": None,
           "rows": done}
    if done:
        out["actual"] = sum(r["actual"] for r in done)
        out["actual_estimate"] = sum(r["estimate"] for r in done)
        big = max(done, key=lambda r: abs(r["actual"] - r["estimate"]))
        cause = max(big["why"], key=lambda w: abs(w[1]))
        out["biggest"] = {"kind": big["kind"], "delta": big["actual"] - big["estimate"],
                          "estimate": big["estimate"], "cause": cause}
    return out


# the text ----------------------------------------------------------------

def _hm(d: dt.datetime) -> str:
    return d.strftime("%a %Y-%m-%d %H:%M")


def _split(seconds: dict, unit: str) -> tuple[str, Decimal]:
    """"4.20 = runs 3.00 + ...": each figure rounded on its own (bot/figures.py),
    the total from the unrounded parts."""
    total = estimate.hours(sum(seconds.values()))
    return (f"{figures.number(total)} {unit} = " + " + ".join(
        f"{c} {figures.number(estimate.hours(seconds[c]))}" for c in COMPONENTS), total)


def cost_lines(by_gpu: dict, price_list: list[dict], today: dt.date) -> list[str]:
    out = []
    for name, seconds in sorted(by_gpu.items()):
        h = estimate.hours(seconds)
        rent = rent_for(name, price_list)
        if rent is None:
            out.append(f"• {name}: {figures.number(h)} GPU-h, cost unconfirmed (no confirmed "
                       "price; `/plan price GPU RATE/h source=... date=YYYY-MM-DD`)")
        else:
            out.append(f"• {name}: {figures.number(h)} GPU-h × {prices.cited(rent, today)} = "
                       f"{prices.money(prices.cost(h, rent), rent['currency'])}")
    return out


def plan_line(s: dict) -> str:
    if s.get("error"):
        return f"• *{s['name']}*: cannot be estimated now — {s['error']}"
    if not s["blocks"]:
        return f"• *{s['name']}*: no blocks yet"
    line = (f"• *{s['name']}* ({s['gpu'] or 'no target GPU'}): estimate "
            f"{figures.gpu_hours(s['estimate'])} GPU-h, cost {s['cost']}")
    if s["actual"] is None:
        return line + "; no actuals yet"
    est = s["actual_estimate"]
    rel = figures.change(est, s["actual"])
    rel = f" ({rel})" if rel else ""
    line += (f"; actual so far {figures.gpu_hours(s['actual'])} GPU-h on "
             f"{', '.join(r['kind'] for r in s['rows'])} against {figures.gpu_hours(est)} "
             f"estimated{rel}")
    b = s["biggest"]
    name, value, why = b["cause"]
    return line + (f"; biggest variance {b['kind']} {figures.signed(b['delta'])} GPU-h, mostly "
                   f"{name} {figures.signed(value)} GPU-h ({why})")


def _capped(lines: list[str], what: str, heading: str) -> tuple[list[str], list[str]]:
    """The first MAX_LINES for the digest, and the rest as replies in its
    thread, MAX_LINES to a reply."""
    if len(lines) <= MAX_LINES:
        return lines, []
    more = [f"*{heading}* (continued: {i + 1}–{min(i + MAX_LINES, len(lines))} of "
            f"{len(lines)}):\n" + "\n".join(lines[i:i + MAX_LINES])
            for i in range(MAX_LINES, len(lines), MAX_LINES)]
    return (lines[:MAX_LINES]
            + [f"• … and {len(lines) - MAX_LINES} more {what}, continued in the thread"], more)


def text(start: dt.datetime, end: dt.datetime, week: str | None, m: dict,
         plans: list[dict], price_list: list[dict], today: dt.date,
         late: str | None = None) -> tuple[str, list[str]]:
    """The digest's text, and the texts of the replies that continue its
    longer lists in its thread."""
    zone = str(end.tzinfo)
    head = (f"*Weekly budget digest*{f' {week}' if week else ''} — {_hm(start)} → {_hm(end)} "
            f"{zone}")
    lines = [head] + ([f"_{late}_"] if late else [])
    cancelled = f", {m['cancelled']} cancelled" if m["cancelled"] else ""
    lines.append(f"*Trials*: {m['trials']} ended ({m['ok']} ok, {m['failed']} failed"
                 f"{cancelled}); "
                 f"{m['retried']} retried, {m['failed_tries']} failed attempts in all")
    gpu, gpu_total = _split(m["gpu"]["seconds"], "GPU-h")
    lines.append(f"*GPU-hours measured*: {gpu}")
    cpu_s = m["cpu"]["seconds"]
    if any(cpu_s.values()):
        cpu, _ = _split(cpu_s, "h")
        lines.append(f"*CPU-only work* (no GPU-hours): {cpu}")
    lines.append("_How: trial wall time × the trial's GPUs, split by its reported phases "
                 "(prep = setup + weights + warmup + teardown, data, runs = the rest); "
                 "retries = failed attempts' and cancelled trials' seconds; idle = the "
                 "workers' reported idle × their GPUs._")
    first, last = idle_days(start)
    if m["idle_workers"]:
        idle = ", ".join(f"{w} {v['seconds'] / 3600:.2f} h ("
                         + (f"{len(v['gpus'])} GPU" if v["gpus"] else "CPU") + ")"
                         for w, v in sorted(m["idle_workers"].items()))
        lines.append(f"*Worker idle* (ready, nothing to run; UTC days {first} to {last}): "
                     f"{idle}")
    else:
        lines.append(f"*Worker idle*: none reported for UTC days {first} to {last}")
    lines.append("*Cost* (confirmed prices only):")
    lines += cost_lines(m["by_gpu"], price_list, today) or ["• no GPU-hours this week"]
    ordered = sorted(plans, key=lambda s: (-abs(s["biggest"]["delta"]) if s.get("biggest")
                                           else 0, s["name"]))
    lines.append(f"*Plans* ({len(plans)} in this channel; estimate against actuals so far):")
    shown, more = _capped([plan_line(s) for s in ordered], "plans", "Plans")
    lines += shown or ["• none: `/plan new NAME` starts one"]
    stale = [p for p in price_list if prices.is_stale(p, today)]
    if stale:
        went = start.date()
        lines.append("*Stale prices* (confirmed over 30 days ago; reconfirm with `/plan price`):")
        lines += [f"• {prices.cited(p, today)}"
                  + (" — went stale this week" if prices.age_days(p, went) <= prices.STALE_DAYS
                     else "") for p in stale]
    blocked = [f"• *{s['name']}*: {', '.join(s['open'])}" for s in plans if s.get("open")]
    if blocked:
        heading = "Open checklist items blocking a plan"
        lines.append(f"*{heading}*:")
        shown, open_more = _capped(blocked, "plans with open items", heading)
        lines += shown
        more += open_more
    return "\n".join(lines), more


def message(channel: str, body: str) -> dict:
    blocks = [section(part) for part in chunks(body)][:48]
    blocks.append(context("GPU-hours are measured wall time × GPUs; the chart (GPU-hours "
                           "by component per day, planned vs actual per block) is in the "
                           "thread."))
    return {"channel": channel, "kind": "digest", "text": body, "blocks": blocks}


def thread_message(channel: str, body: str) -> dict:
    """A reply continuing the digest (MAX_LINES lines: a few sections, far under
    Slack's 50 blocks and 40,000 characters)."""
    return {"channel": channel, "kind": "digest-more", "text": body,
            "blocks": [section(part) for part in chunks(body)]}


def chart_message(channel: str, label: str, png: bytes) -> dict:
    return {"channel": channel, "kind": "digest-chart",
            "text": "Digest chart: GPU-hours by component per day, planned vs actual per block",
            "file": f"digest-{label}.png", "content": png}


def schedule_text(s: dict) -> str:
    return f"every {s['weekday'].capitalize()} at {s['hour']:02d}:{s['minute']:02d} {s['tz']}"
