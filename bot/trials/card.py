"""The trial's card: the one channel message that follows a trial from "started"
to its final summary, edited in place (chat.update) as phases pass and tries
fail. Details, the chart and each failed try go into its thread. Pure."""
from __future__ import annotations

from worker import summary
from worker.report import Report

# action_id of each button; bot/slack/listeners/actions.py answers them.
CANCEL, RERUN, ADD_TO_PLAN = "trial_cancel", "trial_rerun", "trial_add_to_plan"


def _button(text: str, action: str, job: dict, style: str | None = None) -> dict:
    b = {"type": "button", "text": {"type": "plain_text", "text": text},
         "action_id": action, "value": str(job["id"])}
    return dict(b, style=style) if style else b


def _card(job: dict, text: str, buttons: list[dict], kind: str) -> dict:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]
    if buttons:
        blocks.append({"type": "actions", "block_id": f"trial_{job['id']}",
                       "elements": buttons})
    return {"channel": job["channel"], "kind": kind, "text": text, "blocks": blocks}


def progress_line(progress: dict | None) -> str:
    """`phase warmup · try 2 (try 1: oom)` from a worker's heartbeat."""
    p = progress or {}
    parts = [f"phase `{p['phase']}`"] if p.get("phase") else []
    if p.get("attempt", 1) > 1 or p.get("failed"):
        failed = ", ".join(f"try {i}: {c}" for i, c in enumerate(p.get("failed") or [], 1))
        parts.append(f"try {p.get('attempt', 1)}" + (f" ({failed})" if failed else ""))
    return " · ".join(parts)


def failed_tries(job: dict, before: list | None, progress: dict) -> list[dict]:
    """A thread reply for each try that failed since the last heartbeat."""
    known, failed = len(before or []), progress.get("failed") or []
    return [{"channel": job["channel"], "kind": "attempt", "thread_of": job["started_msg"],
             "text": f":warning: {job['trial']} try {n} failed ({cls}); "
                     + (f"try {n + 1} started" if progress.get("attempt", 1) > n else
                        "no try left")}
            for n, cls in enumerate(failed[known:], start=known + 1)]


def started(job: dict, worker: str, progress: dict | None = None) -> dict:
    """While the trial runs: who, where, what, and its progress; a Cancel button."""
    line = progress_line(progress)
    cancelling = " · *cancelling…*" if job.get("cancel") else ""
    text = (f":hourglass_flowing_sand: *{job['trial']}* started on *{worker}*: "
            f"`{job['words']}` (by <@{job['user']}>)"
            + (f"\n{line}" if line else "") + cancelling)
    buttons = [] if job.get("cancel") else [_button("Cancel", CANCEL, job, "danger")]
    return _card(job, text, buttons, "progress" if progress or job.get("cancel") else "started")


def final(job: dict, r: Report) -> dict:
    """The card once the trial ended: its one-line summary; the report is in the thread."""
    if (r.get("error") or {}).get("class") == "cancelled":
        who = f" by <@{job['cancelled_by']}>" if job.get("cancelled_by") else ""
        icon, line = ":no_entry_sign:", f"*{job['trial']}* cancelled{who}: `{job['words']}`"
    else:
        icon = ":white_check_mark:" if r["status"] == "ok" else ":x:"
        line = f"{summary.headline(r)}: `{job['words']}`"
        if summary.retry_line(r):
            line += f"\n:warning: {summary.retry_line(r)}"
        if summary.busy_line(r):
            line += f"\n:warning: {summary.busy_line(r)}"
    text = f"{icon} {line}\nDetails in the thread."
    return _card(job, text, [_button("Re-run", RERUN, job),
                             _button("Add to plan…", ADD_TO_PLAN, job)], "summary")


PLAN_MODAL = "trial_add_to_plan_modal"  # callback_id of the "Add to plan…" modal


def plan_modal(job: dict, choices: list[tuple[str, str]]) -> dict:
    """The modal that asks which plan and block the trial counts for."""
    options = [{"text": {"type": "plain_text", "text": f"{plan} · {kind}"[:75]},
                "value": f"{plan}|{kind}"} for plan, kind in choices[:100]]
    return {"type": "modal", "callback_id": PLAN_MODAL, "private_metadata": str(job["id"]),
            "title": {"type": "plain_text", "text": f"Add {job['trial']} to a plan"[:24]},
            "submit": {"type": "plain_text", "text": "Add"},
            "close": {"type": "plain_text", "text": "Cancel"},
            "blocks": [{"type": "input", "block_id": "block",
                        "label": {"type": "plain_text", "text": "Plan and block"},
                        "element": {"type": "static_select", "action_id": "choice",
                                    "options": options}}]}
