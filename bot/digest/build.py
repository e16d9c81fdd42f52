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
from bot.plans.digestparse import WEEKDAYS
from bot.states import JobStatus, Json, Outcome
from worker import i18n
from worker.i18n import N_, _

COMPONENTS = ("runs", "prep", "data", "retries", "idle")
# the components' words in the text, shown as _(word) (the chart keeps them English)
COMPONENT_WORDS = {"runs": N_("runs"), "prep": N_("prep"), "data": N_("data"),
                   "retries": N_("retries"), "idle": N_("idle")}
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
    year, week = fire.date().isocalendar()[:2]
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
    failed = [{"status": Outcome.FAILED, "seconds": row["failed_seconds"] or 0.0}]
    return review.actual_of_job(job, failed, max(1, row["gpu_count"] or 0))


def measure(trials: list[dict], idle: list[dict], start: dt.datetime, tz) -> dict:
    """Sums over the week's trials and idle rows, apart for GPU and CPU-only
    work (a CPU box's hours are no GPU-hours), per component, per local day
    and per GPU kind."""
    # Local dates the week touches: 8 when it starts mid-day (first and last partly).
    last = (start + dt.timedelta(days=7) - dt.timedelta(microseconds=1)).date()
    days = [start.date() + dt.timedelta(days=i) for i in range((last - start.date()).days + 1)]
    out: Json = {"trials": len(trials), "ok": 0, "failed": 0, "cancelled": 0, "retried": 0,
           "failed_tries": 0,
           "days": days, "idle_workers": {}, "by_gpu": {},
           **{kind: {"seconds": dict.fromkeys(COMPONENTS, 0.0),
                     "per_day": {d: dict.fromkeys(COMPONENTS, 0.0) for d in days}}
              for kind in ("gpu", "cpu")}}
    tally = {JobStatus.DONE: "ok", JobStatus.CANCELLED: "cancelled"}  # the rest: failed
    for row in trials:
        out[tally.get(row["status"], "failed")] += 1
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
    total = estimate.total([e for _block, e, _why in ests])
    # n/a, not 0, when every block was measured off the target (none is a target hour)
    out = {"name": plan["name"], "gpu": plan["facts"].get("gpu"),
           "estimate": total["hours"] if len(total["left_out"]) < len(ests) else None,
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
    return i18n.stamp(d, "%Y-%m-%d %H:%M")


def _split(seconds: dict, unit: str) -> tuple[str, Decimal]:
    """"4.20 = runs 3.00 + ...": each figure rounded on its own (bot/figures.py),
    the total from the unrounded parts."""
    total = estimate.hours(sum(seconds.values()))
    return (f"{figures.number(total)} {unit} = " + " + ".join(
        f"{_(COMPONENT_WORDS[c])} {figures.number(estimate.hours(seconds[c]))}"
        for c in COMPONENTS), total)


def cost_lines(by_gpu: dict, price_list: list[dict], today: dt.date) -> list[str]:
    out = []
    for name, seconds in sorted(by_gpu.items()):
        h = estimate.hours(seconds)
        rent = rent_for(name, price_list)
        if rent is None:
            out.append(_("• {gpu}: {hours} GPU-h, cost unconfirmed (no confirmed price; "
                         "`/plan price GPU RATE/h source=... date=YYYY-MM-DD`)", gpu=name,
                         hours=figures.number(h)))
        else:
            out.append(f"• {name}: {figures.number(h)} GPU-h × {prices.cited(rent, today)} = "
                       f"{prices.money(prices.cost(h, rent), rent['currency'])}")
    return out


def plan_line(s: dict) -> str:
    if s.get("error"):
        return _("• *{plan}*: cannot be estimated now — {error}", plan=s["name"],
                 error=s["error"])
    if not s["blocks"]:
        return _("• *{plan}*: no blocks yet", plan=s["name"])
    line = _("• *{plan}* ({gpu}): estimate {estimate} GPU-h, cost {cost}", plan=s["name"],
             gpu=s["gpu"] or _("no target GPU"), estimate=figures.gpu_hours(s["estimate"]),
             cost=s["cost"])
    if s["actual"] is None:
        return line + _("; no actuals yet")
    est = s["actual_estimate"]
    rel = figures.change(est, s["actual"])
    actual = dict(actual=figures.gpu_hours(s["actual"]),
                  blocks=", ".join(r["kind"] for r in s["rows"]),
                  estimate=figures.gpu_hours(est))
    line += (_("; actual so far {actual} GPU-h on {blocks} against {estimate} estimated "
               "({change})", change=rel, **actual) if rel else
             _("; actual so far {actual} GPU-h on {blocks} against {estimate} estimated",
               **actual))
    b = s["biggest"]
    name, value, why = b["cause"]
    return line + _("; biggest variance {block} {delta} GPU-h, mostly {cause} {value} GPU-h "
                    "({why})", block=b["kind"], delta=figures.signed(b["delta"]), cause=name,
                    value=figures.signed(value), why=why)


def _capped(lines: list[str], what, heading: str) -> tuple[list[str], list[str]]:
    """The first MAX_LINES for the digest, and the rest as replies in its
    thread, MAX_LINES to a reply. `what(n)` says how many more there are."""
    if len(lines) <= MAX_LINES:
        return lines, []
    more = [_("*{heading}* (continued: {first}–{last} of {total}):", heading=heading,
              first=i + 1, last=min(i + MAX_LINES, len(lines)), total=len(lines))
            + "\n" + "\n".join(lines[i:i + MAX_LINES])
            for i in range(MAX_LINES, len(lines), MAX_LINES)]
    return lines[:MAX_LINES] + [what(len(lines) - MAX_LINES)], more


def text(start: dt.datetime, end: dt.datetime, week: str | None, m: dict,
         plans: list[dict], price_list: list[dict], today: dt.date,
         late: str | None = None) -> tuple[str, list[str]]:
    """The digest's text, and the texts of the replies that continue its
    longer lists in its thread."""
    zone = str(end.tzinfo)
    head = (_("*Weekly budget digest* {week} — {start} → {end} {zone}", week=week,
              start=_hm(start), end=_hm(end), zone=zone) if week else
            _("*Weekly budget digest* — {start} → {end} {zone}", start=_hm(start), end=_hm(end),
              zone=zone))
    lines = [head] + ([f"_{late}_"] if late else [])
    lines += _week_lines(start, m)
    lines.append(_("*Cost* (confirmed prices only):"))
    lines += cost_lines(m["by_gpu"], price_list, today) or [_("• no GPU-hours this week")]
    plan_lines, more = _plan_lines(start, plans, price_list, today)
    return "\n".join(lines + plan_lines), more


def _week_lines(start: dt.datetime, m: dict) -> list[str]:
    """The week's trials, GPU- and CPU-hours (with how they are counted) and worker idle."""
    counts = dict(trials=m["trials"], ok=m["ok"], failed=m["failed"],
                  cancelled=m["cancelled"], retried=m["retried"], tries=m["failed_tries"])
    lines = [_("*Trials*: {trials} ended ({ok} ok, {failed} failed, {cancelled} cancelled); "
               "{retried} retried, {tries} failed attempts in all", **counts)
             if m["cancelled"] else
             _("*Trials*: {trials} ended ({ok} ok, {failed} failed); {retried} retried, "
               "{tries} failed attempts in all", **counts)]
    gpu, gpu_total = _split(m["gpu"]["seconds"], "GPU-h")
    lines.append(_("*GPU-hours measured*: {split}", split=gpu))
    cpu_s = m["cpu"]["seconds"]
    if any(cpu_s.values()):
        cpu = _split(cpu_s, "h")[0]
        lines.append(_("*CPU-only work* (no GPU-hours): {split}", split=cpu))
    lines.append(_("_How: trial wall time × the trial's GPUs, split by its reported phases "
                   "(prep = setup + weights + warmup + teardown, data, runs = the rest); "
                   "retries = failed attempts' and cancelled trials' seconds; idle = the "
                   "workers' reported idle × their GPUs._"))
    first, last = idle_days(start)
    if m["idle_workers"]:
        idle = ", ".join(f"{w} {v['seconds'] / 3600:.2f} h ("
                         + (f"{len(v['gpus'])} GPU" if v["gpus"] else "CPU") + ")"
                         for w, v in sorted(m["idle_workers"].items()))
        lines.append(_("*Worker idle* (ready, nothing to run; UTC days {first} to {last}): "
                       "{idle}", first=first, last=last, idle=idle))
    else:
        lines.append(_("*Worker idle*: none reported for UTC days {first} to {last}",
                       first=first, last=last))
    return lines


def _plan_lines(start: dt.datetime, plans: list[dict], price_list: list[dict],
                today: dt.date) -> tuple[list[str], list[str]]:
    """The plans (biggest miss first), stale prices and open checklist items;
    and the replies that continue the lists cut short."""
    ordered = sorted(plans, key=lambda s: (-abs(s["biggest"]["delta"]) if s.get("biggest")
                                           else 0, s["name"]))
    lines = [_("*Plans* ({n} in this channel; estimate against actuals so far):",
               n=len(plans))]
    shown, more = _capped([plan_line(s) for s in ordered], _plans_more, _("Plans"))
    lines += shown or [_("• none: `/plan new NAME` starts one")]
    stale = [p for p in price_list if prices.is_stale(p, today)]
    if stale:
        went = start.date()
        lines.append(_("*Stale prices* (confirmed over 30 days ago; reconfirm with "
                       "`/plan price`):"))
        lines += [_("• {price} — went stale this week", price=prices.cited(p, today))
                  if prices.age_days(p, went) <= prices.STALE_DAYS else
                  f"• {prices.cited(p, today)}" for p in stale]
    blocked = [f"• *{s['name']}*: {', '.join(s['open'])}" for s in plans if s.get("open")]
    if blocked:
        heading = _("Open checklist items blocking a plan")
        lines.append(f"*{heading}*:")
        shown, open_more = _capped(blocked, _open_more, heading)
        lines += shown
        more += open_more
    return lines, more


def _plans_more(n: int) -> str:
    return _("• … and {n} more plans, continued in the thread", n=n)


def _open_more(n: int) -> str:
    return _("• … and {n} more plans with open items, continued in the thread", n=n)


def message(channel: str, body: str) -> dict:
    blocks = [section(part) for part in chunks(body)][:48]
    blocks.append(context(_("GPU-hours are measured wall time × GPUs; the chart (GPU-hours "
                             "by component per day, planned vs actual per block) is in the "
                             "thread.")))
    return {"channel": channel, "kind": "digest", "text": body, "blocks": blocks}


def thread_message(channel: str, body: str) -> dict:
    """A reply continuing the digest (MAX_LINES lines: a few sections, far under
    Slack's 50 blocks and 40,000 characters)."""
    return {"channel": channel, "kind": "digest-more", "text": body,
            "blocks": [section(part) for part in chunks(body)]}


def chart_message(channel: str, label: str, png: bytes) -> dict:
    return {"channel": channel, "kind": "digest-chart",
            "text": _("Digest chart: GPU-hours by component per day, planned vs actual per "
                      "block"),
            "file": f"digest-{label}.png", "content": png}


def schedule_text(s: dict) -> str:
    time = f"{s['hour']:02d}:{s['minute']:02d}"
    # "mon" → "Mon", one of i18n.WEEKDAYS: the reader's weekday
    return _("every {weekday} at {time} {zone}", weekday=_(s["weekday"].capitalize()), time=time,
             zone=s["tz"])
