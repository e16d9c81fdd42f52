"""Replies to the corrections of a plan (facts unset, blocks corrected or
deleted, actuals recorded or deleted, prices corrected or deleted) and its
history. Pure: rows in, Slack payloads out."""
from __future__ import annotations

import datetime as dt

from bot import figures
from bot.blocks import reply
from bot.plans import prices

HISTORY_SHOWN = 20


def day(stamp: float | None) -> str:
    return (dt.datetime.fromtimestamp(stamp, dt.timezone.utc).date().isoformat()
            if stamp else "?")


def value_text(value) -> str:
    """A stored value as one short phrase."""
    if value is None:
        return "(not set)"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={field_text(k, v)}" for k, v in value.items()
                         if v not in (None, {}, [], ""))
    if isinstance(value, list):  # job ids, or the rows an action removed
        glue = "; " if any(isinstance(v, dict) for v in value) else ", "
        return glue.join(value_text(v) for v in value)
    return str(value)


_PERIODS = ((365.25, "year"), (30.44, "month"), (7, "week"))


def fact_value(key: str, value) -> str:
    """A stored fact as people read it: `period` in days with the unit it was
    likely typed in ("3 weeks (21 days)"), `handoff` in hours, `utilization` a share."""
    if value is None or not isinstance(value, (int, float)):
        return value_text(value)
    if key == "period":
        days = f"{value:g}" if value == int(value) else figures.number(value)
        for size, unit in _PERIODS:
            n = value / size
            if n >= 1 and abs(n - round(n)) < 1e-9:
                return f"{round(n)} {unit}{'s' * (round(n) != 1)} ({days} days)"
        return f"{days} days"
    if key == "handoff":
        return f"{figures.number(value)} h"
    if key == "utilization":
        return f"{value:.0%}"
    return value_text(value)


def field_text(key: str, value) -> str:
    """A block's trials are named as users name them (T12)."""
    if key == "trials" and isinstance(value, list):
        return ",".join(f"T{i}" for i in value) or "(none)"
    if key == "sweep" and value:
        return f"S{value}"
    return value_text(value)


def changed_fields(old: dict | None, new: dict | None) -> str:
    """`runs 10 → 30, note (not set) → x`: the fields that differ."""
    old, new = old or {}, new or {}
    keys = [k for k in {**old, **new} if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {field_text(k, old.get(k))} → {field_text(k, new.get(k))}"
                     for k in keys)


def facts_set(plan: dict, facts: dict, old: dict, left: list[str]) -> dict:
    done = []
    for key, value in facts.items():
        if value is None:
            done.append(f"unset {key} (was {value_text(old.get(key))})")
        elif old.get(key) is not None and old[key] != value:
            done.append(f"set {key}={fact_value(key, value)} (was {fact_value(key, old[key])})")
        else:
            done.append(f"set {key}={fact_value(key, value)}")
    return reply(f"Plan *{plan['name']}*: {'; '.join(done)}.\nOpen checklist items: "
                 f"{', '.join(left) if left else 'none — the checklist is complete'}.")


def block_deleted(plan: dict, old: dict, actuals: int, tagged: int) -> dict:
    kept = ""
    if actuals or tagged:
        kept = (f" Its {actuals} recorded actual(s) and {tagged} tagged trial(s) are kept: they "
                f"count again if a {old['kind']} block is added.")
    return reply(f"Plan *{plan['name']}*: the {old['kind']} block is deleted (it was "
                 f"{value_text({k: old.get(k) for k in ('runs', 'configs', 'gpus')})}).{kept} "
                 f"`/plan {plan['name']} history` keeps what it was.")


def actual_line(a: dict) -> str:
    """One recorded actual with its number, hours and source."""
    source = (f"Slurm jobs {', '.join(a['slurm'])}" if a.get("slurm")
              else "manual" + (f": {a['note']}" if a.get("note") else ""))
    return (f"#{a['id']} {a['hours']:g} GPU-h ({source}; by <@{a['user']}> on "
            f"{day(a.get('recorded'))})")


def actuals_now(plan: dict, kind: str, rows: list[dict], counted: list[dict],
                tagged: list[str]) -> str:
    """The block's running total: each recorded actual, and its tagged trials."""
    if not rows:
        text = f"The {kind} block has no recorded actuals now."
    else:
        total = sum(a["hours"] for a in counted)
        text = (f"The {kind} block now has {len(rows)} recorded actual(s), {total:g} GPU-h in all"
                + (" (a Slurm request asked again counts once)" if len(counted) < len(rows)
                   else "") + ":\n" + "\n".join(f"• {actual_line(a)}" for a in rows))
    if tagged:
        text += (f"\nIts tagged trials ({', '.join(tagged)}) add their measured time in "
                 f"`/plan {plan['name']} review`.")
    return text


def actual_recorded(plan: dict, kind: str, hours: float, replaced: int | None,
                    now: str) -> dict:
    fixed = f", replacing {replaced} earlier one(s)" if replaced else ""
    return reply(f"Recorded for *{plan['name']}* {kind}: {hours:g} GPU-h actual{fixed}. {now}\n"
                 f"`/plan {plan['name']} review` compares it with the estimate; "
                 f"`/plan {plan['name']} actual {kind} delete #N` removes one.")


def actuals_deleted(plan: dict, kind: str, gone: int, now: str) -> dict:
    return reply(f"Deleted {gone} recorded {kind} actual(s) of *{plan['name']}*: the review "
                 f"and the calibration no longer count them. {now}")


def price_recorded(price: dict, pid: int, today: dt.date) -> dict:
    return reply(f"Recorded P{pid}: {prices.cited(price, today)}. Plans use it where every price "
                 "they need is confirmed; the figure confirmed latest applies. "
                 f"`/plan price correct P{pid} ...` or `/plan price delete P{pid}` changes it.")


def price_changed(old: dict, new: dict | None, applies: dict | None, today: dt.date) -> dict:
    what = (f"P{old['id']} corrected: {prices.cited(new, today)} (was "
            f"{prices.cited(old, today)})" if new else
            f"P{old['id']} deleted (it was {prices.cited(old, today)})")
    item = "electricity" if old["kind"] == "electricity" else f"{old['item']} {old['kind']}"
    now = (f"The {item} figure that applies now: P{applies['id']}, "
           f"{prices.cited(applies, today)}." if applies else
           f"No {item} figure is confirmed now.")
    return reply(f"{what}. {now}")


def price_list(rows: list[dict], today: dt.date, every: bool) -> dict:
    """`/plan prices` (the figure that applies per item) or `prices all`."""
    if not rows:
        return reply("No confirmed prices. trialbot has no built-in price list: record one with "
                     "`/plan price H100 RATE/h source=URL date=YYYY-MM-DD`.")
    head = ("Every recorded price, the one that applies (confirmed latest) marked ✓:" if every
            else "Confirmed prices (per item, the one confirmed latest; `/plan prices all` "
                 "lists older ones):")
    return reply(head + "\n" + "\n".join(
        f"• P{p['id']} {'✓ ' if every and p['applies'] else ''}{prices.cited(p, today)}"
        for p in rows))


ACTIONS = {"new": "started", "set": "set", "unset": "unset", "add": "added",
           "replace": "replaced", "correct": "corrected", "delete": "deleted",
           "lock": "locked", "unlock": "unlocked"}


def history_line(row: dict) -> str:
    when = dt.datetime.fromtimestamp(row["at"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    what = row["what"] + (" (shared price list)" if row["plan"] is None else "")
    verb = ACTIONS.get(row["action"], row["action"])
    if row["action"] in ("lock", "unlock", "new"):
        change = ""
    elif row["action"] in ("set", "unset"):  # "fact period": worded as `set` echoes it
        key = row["what"].split()[-1]
        change = f": {fact_value(key, row['old'])} → {fact_value(key, row['new'])}"
    elif row["old"] is not None and row["new"] is not None:
        change = (": " + changed_fields(row["old"], row["new"])
                  if isinstance(row["old"], dict) and isinstance(row["new"], dict)
                  else f": {value_text(row['old'])} → {value_text(row['new'])}")
    else:
        change = f": {value_text(row['new'] if row['old'] is None else row['old'])}"
    return f"{when} UTC <@{row['user']}> {verb} {what}{change}"


def history(plan: dict, rows: list[dict], total: int) -> dict:
    """`/plan NAME history`: newest first, at most HISTORY_SHOWN lines."""
    if not rows:
        return reply(f"Plan *{plan['name']}* has no recorded changes (changes are recorded "
                     "since this version of trialbot).")
    lines = [f"*Plan {plan['name']}*: its changes and those of the prices it reads, newest "
             "first"] + [f"• {history_line(r)}" for r in rows]
    if total > len(rows):
        lines.append(f"… {total - len(rows)} older (all of them are in "
                     f"`/plan {plan['name']} export`)")
    return reply("\n".join(lines))
