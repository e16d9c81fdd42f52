"""Replies to the corrections of a plan (facts unset, blocks corrected or
deleted, actuals recorded or deleted, prices corrected or deleted) and its
history. Pure: rows in, Slack payloads out."""
from __future__ import annotations

import datetime as dt

from bot import figures
from bot.blocks import reply
from bot.fits import gpus
from bot.plans import fitson, prices
from bot.states import Json
from worker.i18n import N_, _, ngettext

HISTORY_SHOWN = 20


def day(stamp: float | None) -> str:
    return (dt.datetime.fromtimestamp(stamp, dt.timezone.utc).date().isoformat()
            if stamp else "?")


def value_text(value: object) -> str:
    """A stored value as one short phrase."""
    if value is None:
        return _("(not set)")
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


def _period_text(n: int, unit: str, days: str) -> str:
    if unit == "year":
        return ngettext("{n} year ({days} days)", "{n} years ({days} days)", n, days=days)
    if unit == "month":
        return ngettext("{n} month ({days} days)", "{n} months ({days} days)", n, days=days)
    return ngettext("{n} week ({days} days)", "{n} weeks ({days} days)", n, days=days)


def fact_value(key: str, value: object) -> str:
    """A stored fact as people read it: `period` in days with the unit it was
    likely typed in ("3 weeks (21 days)"), `handoff` in hours, `utilization` a share."""
    if value is None or not isinstance(value, (int, float)):
        return value_text(value)
    if key == "period":
        days = f"{value:g}" if value == int(value) else figures.number(value)
        for size, unit in _PERIODS:
            n = value / size
            if n >= 1 and abs(n - round(n)) < 1e-9:
                return _period_text(round(n), unit, days)
        return _("{days} days", days=days)
    if key == "handoff":
        return f"{figures.number(value)} h"
    if key == "utilization":
        return f"{value:.0%}"
    return value_text(value)


def field_text(key: str, value: object) -> str:
    """A block's trials are named as users name them (T12)."""
    if key == "trials" and isinstance(value, list):
        return ",".join(f"T{i}" for i in value) or _("(none)")
    if key == "sweep" and value:
        return f"S{value}"
    if key == "unit" and value in prices.UNITS:  # a price's, stored in English
        return _(str(value))
    return value_text(value)


def changed_fields(old: Json | None, new: Json | None) -> str:
    """`runs 10 → 30, note (not set) → x`: the fields that differ."""
    old, new = old or {}, new or {}
    keys = [k for k in {**old, **new} if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {field_text(k, old.get(k))} → {field_text(k, new.get(k))}"
                     for k in keys)


def facts_set(plan: Json, facts: Json, old: Json, left: list[str]) -> Json:
    done = []
    for key, value in facts.items():
        if value is None:
            done.append(_("unset {key} (was {old})", key=key, old=value_text(old.get(key))))
        elif old.get(key) is not None and old[key] != value:
            done.append(_("set {key}={value} (was {old})", key=key,
                          value=fact_value(key, value), old=fact_value(key, old[key])))
        else:
            done.append(_("set {key}={value}", key=key, value=fact_value(key, value)))
    items = ", ".join(left) if left else _("none — the checklist is complete")
    note = gpus.unlisted_note(facts.get("gpu"))
    return reply(_("Plan *{plan}*: {changes}.", plan=plan["name"], changes="; ".join(done))
                 + (f"\n{note}." if note else "") + _inputs_note(plan["name"], facts)
                 + "\n" + _("Open checklist items: {items}.", items=items))


def _inputs_note(plan: str, facts: Json) -> str:
    """How `show` will read the inputs just set: where fits on is evaluated."""
    if not facts.get("inputs"):
        return ""
    read = fitson.read_inputs(facts["inputs"])
    if read["problem"]:
        return "\n" + _("{problem}. Until then `/plan {plan} show` gives fits on at each "
                         "block's own shape.", problem=read["problem"], plan=plan)
    return "\n" + _("Inputs read as {shape}: `/plan {plan} show` gives fits on there, beside "
                     "each block's own shape.", shape=fitson.shape_text(read["given"]), plan=plan)


def block_deleted(plan: Json, old: Json, actuals: int, tagged: int) -> Json:
    kept = ""
    if actuals or tagged:
        kept = " " + _("Its {actuals} recorded actual(s) and {tagged} tagged trial(s) are kept: "
                       "they count again if a {kind} block is added.", actuals=actuals,
                       tagged=tagged, kind=old["kind"])
    was = value_text({k: old.get(k) for k in ("runs", "configs", "gpus")})
    return reply(_("Plan *{plan}*: the {kind} block is deleted (it was {was}).",
                   plan=plan["name"], kind=old["kind"], was=was) + kept + " "
                 + _("`/plan {plan} history` keeps what it was.", plan=plan["name"]))


def actual_line(a: Json) -> str:
    """One recorded actual with its number, hours and source."""
    source = (_("Slurm jobs {jobs}", jobs=", ".join(a["slurm"])) if a.get("slurm") else
              _("manual: {note}", note=a["note"]) if a.get("note") else _("manual"))
    values = dict(id=a["id"], hours=f"{a['hours']:g}", source=source, user=f"<@{a['user']}>",
                  day=day(a.get("recorded")))
    if a.get("runs"):
        return _("#{id} {hours} GPU-h, {runs} runs ({source}; by {user} on {day})",
                 runs=a["runs"], **values)
    return _("#{id} {hours} GPU-h ({source}; by {user} on {day})", **values)


def actuals_now(plan: Json, kind: str, rows: list[Json], counted: list[Json],
                tagged: list[str]) -> str:
    """The block's running total: each recorded actual, and its tagged trials."""
    if not rows:
        text = _("The {kind} block has no recorded actuals now.", kind=kind)
    else:
        values = dict(kind=kind, n=len(rows), total=f"{sum(a['hours'] for a in counted):g}")
        text = (_("The {kind} block now has {n} recorded actual(s), {total} GPU-h in all (a "
                  "Slurm request asked again counts once):", **values)
                if len(counted) < len(rows) else
                _("The {kind} block now has {n} recorded actual(s), {total} GPU-h in all:",
                  **values))
        text += "\n" + "\n".join(f"• {actual_line(a)}" for a in rows)
    if tagged:
        text += "\n" + _("Its tagged trials ({trials}) add their measured time in "
                         "`/plan {plan} review`.", trials=", ".join(tagged), plan=plan["name"])
    return text


def actual_recorded(plan: Json, kind: str, hours: float, now: str) -> Json:
    values = dict(plan=plan["name"], kind=kind, hours=f"{hours:g}")
    head = _("Recorded for *{plan}* {kind}: {hours} GPU-h actual.", **values)
    return reply(f"{head} {now}\n"
                 + _("`/plan {plan} review` compares it with the estimate; `/plan {plan} actual "
                     "{kind} delete #N` removes one.", **values))


def actual_values(a: Json) -> Json:
    """An actual's fields as a correction names them: hours, its parts, runs, note."""
    return {"hours": a.get("hours"), **(a.get("parts") or {}), "runs": a.get("runs"),
            "note": a.get("note")}


def actual_corrected(plan: Json, kind: str, old: Json, new: Json, now: str) -> Json:
    """What changed, old → new, and what the correction kept."""
    was, now_values = actual_values(old), actual_values(new)
    kept = {k: v for k, v in now_values.items() if k != "hours" and v is not None
            and was.get(k) == v}
    head = _("Corrected {kind} actual #{id} of *{plan}*: {fields}.", kind=kind, id=old["id"],
             plan=plan["name"], fields=changed_fields(was, now_values))
    if kept:
        head += " " + _("Kept: {fields}.", fields=value_text(kept))
    return reply(f"{head} {now}\n" + _("`/plan {plan} history` keeps what it was.",
                                         plan=plan["name"]))


def actuals_deleted(plan: Json, kind: str, gone: int, now: str) -> Json:
    return reply(_("Deleted {n} recorded {kind} actual(s) of *{plan}*: the review and the "
                   "calibration no longer count them.", n=gone, kind=kind, plan=plan["name"])
                 + f" {now}")


def read_as(currency: str) -> str:
    return _("No currency was written: read as {code}, this channel's currency "
             "(`/plan settings currency=`).", code=currency)


def price_recorded(price: Json, pid: int, today: dt.date, assumed: bool = False) -> Json:
    """`assumed`: no currency was written, so the channel's (or none) was used."""
    note = "" if price["kind"] == "electricity" else gpus.unlisted_note(price["item"])
    said = _("Recorded P{id}: {price}. Plans use it where every price they need is "
             "confirmed; the figure confirmed latest applies. `/plan price correct P{id} "
             "...` or `/plan price delete P{id}` changes it.", id=pid,
             price=prices.cited(price, today))
    if assumed and price["currency"]:
        said += " " + read_as(price["currency"])
    elif assumed:
        said += " " + _("No currency was written and this channel has none set, so none is "
                        "kept; `/plan settings currency=USD` (or KRW, EUR...) sets one.")
    return reply(said + (f"\n{note}." if note else ""))


def price_changed(old: Json, new: Json | None, applies: Json | None, today: dt.date) -> Json:
    what = (_("P{id} corrected: {price} (was {old}).", id=old["id"],
              price=prices.cited(new, today), old=prices.cited(old, today)) if new else
            _("P{id} deleted (it was {old}).", id=old["id"], old=prices.cited(old, today)))
    item = (prices.kind_name("electricity") if old["kind"] == "electricity"
            else f"{old['item']} {prices.kind_name(old['kind'])}")
    now = (_("The {item} figure that applies now: P{id}, {price}.", item=item, id=applies["id"],
             price=prices.cited(applies, today)) if applies else
           _("No {item} figure is confirmed now.", item=item))
    return reply(f"{what} {now}")


def price_list(rows: list[Json], today: dt.date, every: bool) -> Json:
    """`/plan prices` (the figure that applies per item) or `prices all`."""
    if not rows:
        return reply(_("No confirmed prices. trialbot has no built-in price list: record one "
                       "with `/plan price H100 RATE/h source=URL date=YYYY-MM-DD`."))
    head = (_("Every recorded price, the one that applies (confirmed latest) marked ✓:")
            if every else
            _("Confirmed prices (per item, the one confirmed latest; `/plan prices all` lists "
              "older ones):"))
    return reply(head + "\n" + "\n".join(
        f"• P{p['id']} {'✓ ' if every and p['applies'] else ''}{prices.cited(p, today)}"
        for p in rows))


ACTIONS = {"new": N_("started"), "set": N_("set"), "unset": N_("unset"), "add": N_("added"),
           "replace": N_("replaced"), "correct": N_("corrected"), "delete": N_("deleted"),
           "lock": N_("locked"), "unlock": N_("unlocked")}


# A history row's subject, stored in English ("fact period", "block verify", "price P7",
# "actual baseline #3", "plan"), read in the reader's language.
SUBJECTS = {"plan": N_("plan"), "fact": N_("fact {rest}"), "block": N_("block {rest}"),
            "price": N_("price {rest}"), "actual": N_("actual {rest}")}


def subject(what: str) -> str:
    head, _sep, rest = what.partition(" ")
    return _(SUBJECTS[head], rest=rest) if head in SUBJECTS else what


def history_line(row: Json) -> str:
    when = dt.datetime.fromtimestamp(row["at"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    what = (_("{what} (shared price list)", what=subject(row["what"])) if row["plan"] is None
            else subject(row["what"]))
    verb = _(ACTIONS[row["action"]]) if row["action"] in ACTIONS else row["action"]
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
    return _("{when} UTC {user} {verb} {what}{change}", when=when, user=f"<@{row['user']}>",
             verb=verb, what=what, change=change)


def history(plan: Json, rows: list[Json], total: int) -> Json:
    """`/plan NAME history`: newest first, at most HISTORY_SHOWN lines."""
    if not rows:
        return reply(_("Plan *{plan}* has no recorded changes (changes are recorded since "
                       "this version of trialbot).", plan=plan["name"]))
    lines = [_("*Plan {plan}*: its changes and those of the prices it reads, newest first",
               plan=plan["name"])] + [f"• {history_line(r)}" for r in rows]
    if total > len(rows):
        lines.append(_("… {n} older (all of them are in `/plan {plan} export`)",
                       n=total - len(rows), plan=plan["name"]))
    return reply("\n".join(lines))
