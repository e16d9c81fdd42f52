"""A plan as files: CSV (one row per block, then the total) and markdown
(the table, the interval note, the open checklist items), uploaded to the
plan's channel by `/plan NAME export`. Pure."""
from __future__ import annotations

import csv
import datetime as dt
import io

from bot.plans import estimate, parse
from bot.plans.views import cost_view, costs, hours_text, plain, table_rows


def csv_text(plan: dict, ests: list, price_list: list[dict], today: dt.date) -> str:
    _, cost_line = cost_view(plan, price_list, today)
    cost = costs(plan, ests, price_list, today)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["plan", "block", "runs", "configs", "gpus", "component", "gpu_hours",
                "interval_low", "interval_high", "cost", "source"])
    for (_, e, _), c in zip(ests, cost):
        lo, hi = e["interval"] or (None, None)
        for comp in e["components"]:
            w.writerow([plan["name"], e["kind"], e["runs"], e["configs"], e["gpus"],
                        comp["name"], plain(comp["hours"]), "", "", "", comp["source"]])
        w.writerow([plan["name"], e["kind"], e["runs"], e["configs"], e["gpus"], "total",
                    plain(e["hours"]), plain(lo), plain(hi), c, e["interval_note"]
                    + (f"; predicted from a partial-depth trial ({e['partial']})"
                       if e.get("partial") else "")])
    tot = estimate.total([e for _, e, _ in ests])
    lo, hi = tot["interval"] or (None, None)
    w.writerow([plan["name"], "total", "", "", "", "total", plain(tot["hours"]),
                plain(lo), plain(hi), cost[-1], cost_line])
    return buf.getvalue()


def markdown(plan: dict, ests: list, price_list: list[dict], today: dt.date) -> str:
    _, cost_line = cost_view(plan, price_list, today)
    rows = table_rows(plan, ests, price_list, today)
    lines = [f"# Plan {plan['name']}", "",
             f"Exported {today.isoformat()}. Target {plan['facts'].get('gpu') or 'not set'}. "
             f"{cost_line}.", "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows[1:]]
    for _, e, _ in ests:
        lines += ["", f"## {e['kind']}", "", f"From {', '.join(e['trials'])} on {e['env']}; "
                  f"{e['interval_note']}.", ""]
        lines += [f"- {c['name']}: {hours_text(c['hours'])} GPU-h — {c['source']}"
                  for c in e["components"]]
        if e.get("partial"):
            lines.append(f"- predicted from a partial-depth trial ({e['partial']}) until a "
                         "full-depth trial on the target replaces it")
        if e.get("note"):
            lines.append(f"- open variable: {e['note']}")
    lines += ["", "## Checklist", ""]
    lines += [f"- [{'x' if plan['facts'].get(k) else ' '}] {label}: "
              f"{plan['facts'].get(k) or '(open)'}" for k, label in parse.CHECKLIST.items()]
    return "\n".join(lines) + "\n"


def file(plan: dict, channel: str, ext: str, content: str) -> dict:
    return {"channel": channel, "kind": "export", "file": f"{plan['name']}-plan.{ext}",
            "content": content, "text": f"Plan {plan['name']} ({ext.upper()} export)"}
