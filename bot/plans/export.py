"""A plan as files: CSV (one row per block, then the total) and markdown
(the table, the interval note, the open checklist items), uploaded to the
plan's channel by `/plan NAME export`. Pure."""
from __future__ import annotations

import csv
import datetime as dt
import io

from bot.plans import changes, estimate, parse
from bot.plans.views import (
    calibrated_interval,
    calibrated_total,
    cost_view,
    costs,
    hours_text,
    plain,
    table_rows,
)


def csv_text(plan: dict, ests: list, price_list: list[dict], today: dt.date,
             calib: list[dict] | None = None) -> str:
    """`calib` (one calibration per block) fills the calibrated columns."""
    _, cost_line = cost_view(plan, price_list, today)
    cost = costs(plan, ests, price_list, today)
    calib = calib or [None] * len(ests)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["plan", "block", "runs", "configs", "gpus", "component", "gpu_hours",
                "interval_low", "interval_high", "cost", "source", "calibrated_low",
                "calibrated_high", "calibration"])
    for (_, e, _), c, k in zip(ests, cost, calib):
        lo, hi = e["interval"] or (None, None)
        clo, chi = calibrated_interval(e, k) or (None, None)
        for comp in e["components"]:
            w.writerow([plan["name"], e["kind"], e["runs"], e["configs"], e["gpus"],
                        comp["name"], plain(comp["hours"]), "", "", "", comp["source"],
                        "", "", ""])
        w.writerow([plan["name"], e["kind"], e["runs"], e["configs"], e["gpus"], "total",
                    plain(e["hours"]), plain(lo), plain(hi), c, e["interval_note"]
                    + (f"; predicted from a partial-depth trial ({e['partial']})"
                       if e.get("partial") else ""), plain(clo), plain(chi),
                    k["text"] if k else ""])
    tot = estimate.total([e for _, e, _ in ests])
    lo, hi = tot["interval"] or (None, None)
    clo, chi = (calibrated_total(ests, calib) if all(calib) else None) or (None, None)
    w.writerow([plan["name"], "total", "", "", "", "total", plain(tot["hours"]),
                plain(lo), plain(hi), cost[-1], cost_line, plain(clo), plain(chi),
                "sum of the blocks' calibrated bounds" if clo is not None else ""])
    return buf.getvalue()


def markdown(plan: dict, ests: list, price_list: list[dict], today: dt.date,
             calib: list[dict] | None = None, history: list[dict] | None = None) -> str:
    """`history`: the plan's changes, newest first (all of them: a report is complete)."""
    _, cost_line = cost_view(plan, price_list, today)
    rows = table_rows(plan, ests, price_list, today, calib)
    lines = [f"# Plan {plan['name']}", "",
             f"Exported {today.isoformat()}. Target {plan['facts'].get('gpu') or 'not set'}. "
             f"{cost_line}.", "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows[1:]]
    for i, (_, e, _) in enumerate(ests):
        lines += ["", f"## {e['kind']}", "", f"From {', '.join(e['trials'])} on {e['env']}; "
                  f"{e['interval_note']}.", ""]
        lines += [f"- {c['name']}: {hours_text(c['hours'])} GPU-h — {c['source']}"
                  for c in e["components"]]
        if calib:
            lines.append(f"- {calib[i]['text']}")
        if e.get("partial"):
            lines.append(f"- predicted from a partial-depth trial ({e['partial']}) until a "
                         "full-depth trial on the target replaces it")
        if e.get("note"):
            lines.append(f"- open variable: {e['note']}")
    lines += ["", "## Checklist", ""]
    lines += [f"- [{'x' if plan['facts'].get(k) else ' '}] {label}: "
              f"{plan['facts'].get(k) or '(open)'}" for k, label in parse.CHECKLIST.items()]
    if history:
        lines += ["", "## History", ""] + [f"- {changes.history_line(r)}" for r in history]
    return "\n".join(lines) + "\n"


def file(plan: dict, channel: str, ext: str, content: str) -> dict:
    return {"channel": channel, "kind": "export", "file": f"{plan['name']}-plan.{ext}",
            "content": content, "text": f"Plan {plan['name']} ({ext.upper()} export)"}
