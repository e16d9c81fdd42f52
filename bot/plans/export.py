"""A plan as files, complete enough for a supervisor or a grant report: every
block with its estimate and its actuals and where each came from, the review,
the lock, the checklist and settings, and the prices used. `data` gathers it
once; JSON, CSV and Markdown are renderings of it, uploaded to the plan's
channel by `/plan NAME export` (docs/plans-and-advice.md, "Export"). Pure."""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Sequence
from decimal import Decimal

from bot import figures
from bot.plans import changes, estimate, measured, parse, prices
from bot.plans.changes import fact_value
from bot.plans.views import (
    calibrated_interval,
    calibrated_total,
    cost_view,
    costs,
    grouped_warnings,
    table_rows,
)
from bot.states import Json
from worker.i18n import N_, _

SCHEMA = 1
FIGURES = N_("GPU-hours to {digits} significant digits as shown (`shown`) and unrounded "
             "(`exact`); totals are sums of the unrounded parts")
PRICE_FIELDS = ("item", "kind", "value", "currency", "unit", "source", "date")


def _figure(x: Decimal | float | None) -> Json | None:
    """A GPU-hour figure as shown (3 significant digits) and unrounded."""
    return None if x is None else {"shown": figures.gpu_hours(x), "exact": float(x)}


def _pair(iv: tuple[Decimal, Decimal] | None) -> Json | None:
    return None if not iv else {"low": _figure(iv[0]), "high": _figure(iv[1]),
                                "shown": figures.interval(*iv)}


def _actual(row: Json | None, calib_used: str | None) -> Json | None:
    if not row or row.get("actual") is None:
        return None
    return {"gpu_hours": _figure(row["actual"]), "estimate_compared": _figure(row["estimate"]),
            "change": figures.change(row["estimate"], row["actual"]) or None,
            "idle_compared": row["idle_compared"], "sources": row["sources"],
            "runs_done": row["runs_done"],
            "why": [{"cause": name, "gpu_hours": figures.signed(v), "exact": v, "how": why}
                    for name, v, why in row["why"]],
            "config_changes": row["config_changes"], "not_comparable": row["not_comparable"],
            "held": calib_used}


def _recorded(a: Json) -> Json:
    """One actual as it was recorded: by hand or from Slurm, by whom and when."""
    return {"id": a["id"], "gpu_hours": a["hours"], "parts": a["parts"], "runs": a["runs"],
            "note": a["note"], "slurm_jobs": a["slurm"], "by": a["user"],
            "recorded": dt.datetime.fromtimestamp(a["recorded"], dt.timezone.utc)
            .strftime("%Y-%m-%d %H:%M UTC")}


def data(plan: Json, ests: list[estimate.Estimated], reviewed: list[Json], price_list: list[Json],
         today: dt.date, calib: list[Json] | None = None,
         held: Sequence[str | None] | None = None, history: list[Json] | None = None,
         recorded: list[Json] | None = None) -> Json:
    """Everything the export says, as one dict. `reviewed` is the review's row
    per block (bot/plans/service.review_rows); `held`, per block, whether its
    actual fell inside the interval shown (reviewview.held_text); `history`, the
    plan's changes, newest first (all of them: a report is complete); `recorded`,
    the plan's recorded actuals (Store.actuals), each listed under its block."""
    rent, cost_line = cost_view(plan, price_list, today)
    cost = costs(plan, ests, price_list, today)
    # A None per block where a list is not given
    none: list[None] = [None] * len(ests)
    calibs: Sequence[Json | None] = calib or none
    helds: Sequence[str | None] = held or none
    rows: Sequence[Json | None] = reviewed or none
    warnings = grouped_warnings(plan, ests)
    blocks = []
    for (_block, e, _trials), c, k, row, h in zip(ests, cost, calibs, rows, helds):
        blocks.append({
            "kind": e["kind"], "runs": e["runs"], "configs": e["configs"], "gpus": e["gpus"],
            "trials": e["trials"], "env": e["env"], "config": e["config"], "code": e["code"],
            "predicted": e["predicted"], "partial": e.get("partial"), "note": e.get("note"),
            "estimate": {"gpu_hours": _figure(e["hours"]), "interval": _pair(e["interval"]),
                         "interval_note": e["interval_note"],
                         "components": [{"name": x["name"], "gpu_hours": _figure(x["hours"]),
                                         "source": x["source"]} for x in e["components"]]},
            "cost": c,
            "calibration": ({"text": k["text"], "interval": _pair(calibrated_interval(e, k))}
                            if k else None),
            "actual": _actual(row, h),
            "recorded_actuals": [_recorded(a) for a in recorded or []
                                 if a["block"] == e["kind"]],
            # tagged trials off the target or the lock: evidence, not in the actual
            "kept_apart": (row or {}).get("apart") or []})
    tot = estimate.total([e for _block, e, _trials in ests])
    done = [r for r in reviewed or [] if r.get("actual") is not None]
    return {
        "schema": SCHEMA, "plan": plan["name"], "exported": today.isoformat(),
        "figures": _(FIGURES, digits=figures.DIGITS),
        "target": plan["facts"].get("gpu"),
        "checklist": {k: plan["facts"].get(k) for k in parse.CHECKLIST},
        "settings": {k: fact_value(k, plan["facts"][k]) for k in parse.SETTINGS
                     if plan["facts"].get(k) is not None},
        "lock": plan.get("locked") or None,
        "prices": {"used": dict({k: rent.get(k) for k in PRICE_FIELDS},
                                cited=prices.cited(rent, today)) if rent else None,
                   "line": cost_line},
        "blocks": blocks,
        "total": {"gpu_hours": _figure(tot["hours"]) if ests else None,
                  "interval": _pair(tot["interval"]), "cost": cost[-1] if ests else None,
                  "calibrated": _pair(calibrated_total(ests, calib)
                                      if calib and all(calib) else None),
                  "actual": _figure(sum(r["actual"] for r in done)) if done else None,
                  "actual_blocks": [r["kind"] for r in done]},
        "warnings": warnings,
        "history": [dict(r, line=changes.history_line(r)) for r in history or []],
    }


def json_text(d: Json) -> str:
    return json.dumps(d, indent=2, ensure_ascii=False, default=str) + "\n"


def _shown(f: Json | None) -> str:
    return "" if f is None else f["shown"].replace(",", "")


def csv_text(d: Json) -> str:
    """One row per component, then each block's total (with its actual), then the plan's."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["plan", "block", "runs", "configs", "gpus", "component", "gpu_hours",
                "interval_low", "interval_high", "cost", "source", "calibrated_low",
                "calibrated_high", "calibration", "actual_gpu_hours", "actual_sources"])
    for b in d["blocks"]:
        est, cal, act = b["estimate"], b["calibration"] or {}, b["actual"] or {}
        head = [d["plan"], b["kind"], b["runs"], b["configs"], b["gpus"]]
        for comp in est["components"]:
            w.writerow(head + [comp["name"], _shown(comp["gpu_hours"]), "", "", "",
                               comp["source"], "", "", "", "", ""])
        iv, civ = est["interval"] or {}, cal.get("interval") or {}
        w.writerow(head + ["total", _shown(est["gpu_hours"]), _shown(iv.get("low")),
                           _shown(iv.get("high")), b["cost"], est["interval_note"]
                           + (f"; predicted from a partial-depth trial ({b['partial']})"
                              if b["partial"] else ""),
                           _shown(civ.get("low")), _shown(civ.get("high")), cal.get("text", ""),
                           _shown(act.get("gpu_hours")), "; ".join(act.get("sources") or [])])
    t = d["total"]
    iv, civ = t["interval"] or {}, t["calibrated"] or {}
    w.writerow([d["plan"], "total", "", "", "", "total", _shown(t["gpu_hours"]),
                _shown(iv.get("low")), _shown(iv.get("high")), t["cost"] or "",
                d["prices"]["line"], _shown(civ.get("low")), _shown(civ.get("high")),
                "sum of the blocks' calibrated bounds" if civ else "",
                _shown(t["actual"]), ", ".join(t["actual_blocks"])])
    return buf.getvalue()


def _review_lines(d: Json) -> list[str]:
    out = []
    for b in d["blocks"]:
        a = b["actual"]
        apart = ["    - " + _("kept apart, {why}", why=x) for x in b["kept_apart"]]
        if a is None:
            out += ["- " + _("{kind}: no actual yet", kind=b["kind"])] + apart
            continue
        change = f" ({a['change']})" if a["change"] else ""
        idle = "" if a["idle_compared"] else " " + _("(idle left out on both sides)")
        out.append("- " + _("{kind}: estimated {estimated}, actual {actual} GPU-h{change}, from "
                            "{sources}", kind=b["kind"],
                            estimated=a["estimate_compared"]["shown"],
                            actual=a["gpu_hours"]["shown"], change=change + idle,
                            sources=", ".join(a["sources"])))
        if a["held"]:
            out.append(f"    - {a['held']}")
        out += [f"    - {w['cause']}: {w['gpu_hours']} GPU-h ({w['how']})" for w in a["why"]]
        out += ["    - " + _("config changed: {change}", change=c) for c in a["config_changes"]]
        out += apart
    return out


def _recorded_lines(d: Json) -> list[str]:
    """Every recorded actual, as it was given: the figures behind the review."""
    out = []
    for b in d["blocks"]:
        for a in b["recorded_actuals"]:
            how = (_("from Slurm jobs {jobs}", jobs=", ".join(a["slurm_jobs"]))
                   if a["slurm_jobs"] else _("by hand"))
            out.append("- " + _("{kind} #{id}: {hours} GPU-h, {how}, by <@{user}> on {at}",
                                kind=b["kind"], id=a["id"], hours=figures.number(a["gpu_hours"]),
                                how=how, user=a["by"], at=a["recorded"])
                       + (f" — {a['note']}" if a["note"] else ""))
    return out


def markdown(d: Json, rows: list[list[str]]) -> str:
    """`rows`: the plan's table as `show` prints it (views.table_rows)."""
    lines = ["# " + _("Plan {plan}", plan=d["plan"]), "",
             _("Exported {day}. Target {gpu}. {prices}. Figures: {figures}.", day=d["exported"],
               gpu=d["target"] or _("not set"), prices=d["prices"]["line"],
               figures=d["figures"]), "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows[1:]]
    for b in d["blocks"]:
        est = b["estimate"]
        lines += ["", f"## {b['kind']}", "",
                  _("From {trials} on {env}; {note}.", trials=", ".join(b["trials"]),
                    env=b["env"], note=est["interval_note"]), ""]
        lines += [f"- {c['name']}: {c['gpu_hours']['shown']} GPU-h — {c['source']}"
                  for c in est["components"]]
        if b["calibration"]:
            lines.append(f"- {b['calibration']['text']}")
        if b["partial"]:
            lines.append("- " + _("predicted from a partial-depth trial ({trial}) until a "
                                  "full-depth trial on the target replaces it",
                                  trial=b["partial"]))
        if b["note"]:
            lines.append("- " + _("open variable: {note}", note=b["note"]))
    lines += ["", "## " + _("Review: estimate against actual"), ""] + _review_lines(d)
    if d["total"]["actual"]:
        lines.append("- " + _("actual so far: {hours} GPU-h on {blocks}",
                              hours=d["total"]["actual"]["shown"],
                              blocks=", ".join(d["total"]["actual_blocks"])))
    recorded = _recorded_lines(d)
    if recorded:
        lines += ["", "## " + _("Recorded actuals"), ""] + recorded
    if d["warnings"]:
        lines += ["", "## " + _("Warnings"), ""] + [f"- {w[2:]}" for w in d["warnings"]]
    lines += ["", "## " + _("Lock"), ""]
    lock = d["lock"]
    if not lock:
        lines.append(_("Not locked: later trials are not checked against a fixed config."))
    else:
        lines.append(_("Locked on {at}.", at=lock["at"]))
        for kind, v in lock.items():
            if kind != "at":
                cfg = " ".join(f"{k}={x}" for k, x in v["config"].items())
                lines.append("- " + _("{kind}: `{config}`, code {code} (from {trials})",
                                      kind=kind, config=cfg, code=measured.code_text(v["code"]),
                                      trials=", ".join(v["trials"])))
    lines += ["", "## " + _("Checklist"), ""]
    still_open = _("(open)")
    lines += [f"- [{'x' if d['checklist'][k] else ' '}] {_(label)}: "
              f"{d['checklist'][k] or still_open}" for k, label in parse.CHECKLIST.items()]
    lines += ["", "## " + _("Settings"), ""]
    lines += ([f"- {k}: {v}" for k, v in d["settings"].items()]
              or ["- " + _("none set (defaults: rental per-block, idle not counted)")])
    lines += ["", "## " + _("Prices used"), ""]
    used = d["prices"]["used"]
    lines.append(f"- {used['cited']}" if used else
                 "- " + _("none: {line}", line=d["prices"]["line"]))
    if d["history"]:
        lines += ["", "## " + _("History"), ""] + [f"- {r['line']}" for r in d["history"]]
    return "\n".join(lines) + "\n"


def files(plan: Json, ests: list[estimate.Estimated], reviewed: list[Json], price_list: list[Json],
          today: dt.date, calib: list[Json] | None = None,
          held: Sequence[str | None] | None = None, history: list[Json] | None = None,
          recorded: list[Json] | None = None) -> list[tuple[str, str]]:
    """(extension, content) of each file the export uploads."""
    d = data(plan, ests, reviewed, price_list, today, calib, held, history, recorded)
    rows = table_rows(plan, ests, price_list, today, calib)
    return [("csv", csv_text(d)), ("md", markdown(d, rows)), ("json", json_text(d))]


def file(plan: Json, channel: str, ext: str, content: str) -> Json:
    return {"channel": channel, "kind": "export", "file": f"{plan['name']}-plan.{ext}",
            "content": content, "text": _("Plan {plan} ({format} export)", plan=plan["name"],
                                          format=ext.upper())}
