"""The trial's card: the one channel message that follows a trial from "started"
to its final summary, edited in place (chat.update) as phases pass and tries
fail. Details, the chart and each failed try go into its thread. Pure."""
from __future__ import annotations

from bot.states import Json, Outcome
from worker.api import Report, summary
from worker.i18n import _

# action_id of each button; bot/slack/listeners/actions.py answers them.
CANCEL, RERUN, ADD_TO_PLAN = "trial_cancel", "trial_rerun", "trial_add_to_plan"


def _button(text: str, action: str, job: Json, style: str | None = None) -> Json:
    b = {"type": "button", "text": {"type": "plain_text", "text": text},
         "action_id": action, "value": str(job["id"])}
    return dict(b, style=style) if style else b


def _card(job: Json, text: str, buttons: list[Json], kind: str) -> Json:
    blocks: list[Json] = [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]
    if buttons:
        blocks.append({"type": "actions", "block_id": f"trial_{job['id']}",
                       "elements": buttons})
    return {"channel": job["channel"], "kind": kind, "text": text, "blocks": blocks}


def progress_line(progress: Json | None) -> str:
    """`phase warmup · try 2 (try 1: oom)` from a worker's heartbeat."""
    p = progress or {}
    parts = [_("phase `{phase}`", phase=p["phase"])] if p.get("phase") else []
    if p.get("attempt", 1) > 1 or p.get("failed"):
        failed = ", ".join(_("try {n}: {error}", n=i, error=c)
                           for i, c in enumerate(p.get("failed") or [], 1))
        parts.append(_("try {n} ({failed})", n=p.get("attempt", 1), failed=failed) if failed
                     else _("try {n}", n=p.get("attempt", 1)))
    return " · ".join(parts)


def failed_tries(job: Json, before: list[Json] | None, progress: Json) -> list[Json]:
    """A thread reply for each try that failed since the last heartbeat."""
    known, failed = len(before or []), progress.get("failed") or []
    return [{"channel": job["channel"], "kind": "attempt", "thread_of": job["started_msg"],
             "text": _(":warning: {trial} try {n} failed ({error}); try {next} started",
                       trial=job["trial"], n=n, error=cls, next=n + 1)
             if progress.get("attempt", 1) > n else
             _(":warning: {trial} try {n} failed ({error}); no try left",
               trial=job["trial"], n=n, error=cls)}
            for n, cls in enumerate(failed[known:], start=known + 1)]


def started(job: Json, worker: str, progress: Json | None = None) -> Json:
    """While the trial runs: who, where, what, and its progress; a Cancel button."""
    line = progress_line(progress)
    cancelling = " · " + _("*cancelling…*") if job.get("cancel") else ""
    text = (_(":hourglass_flowing_sand: *{trial}* started on *{worker}*: `{words}` "
              "(by <@{user}>)", trial=job["trial"], worker=worker, words=job["words"],
              user=job["user"])
            + (f"\n{line}" if line else "") + cancelling)
    buttons = [] if job.get("cancel") else [_button(_("Cancel"), CANCEL, job, "danger")]
    return _card(job, text, buttons, "progress" if progress or job.get("cancel") else "started")


def requeued(job: Json, worker: str) -> Json:
    """A lease its worker never received (it hung up): the trial waits again."""
    text = _(":hourglass: *{trial}* is queued again: *{worker}* hung up before it received "
             "the trial, so it did not run there: `{words}` (by <@{user}>)",
             trial=job["trial"], worker=worker, words=job["words"], user=job["user"])
    return _card(job, text, [_button(_("Cancel"), CANCEL, job, "danger")], "progress")


def lapsed(job: Json, worker: str) -> Json:
    """A lease whose worker stopped heartbeating: the trial waits again."""
    text = _(":hourglass: *{trial}* is queued again: *{worker}* stopped heartbeating (it "
             "died, was killed, or lost its network), so the trial runs again on the next "
             "free worker: `{words}` (by <@{user}>)", trial=job["trial"], worker=worker,
             words=job["words"], user=job["user"])
    return _card(job, text, [_button(_("Cancel"), CANCEL, job, "danger")], "progress")


def returned(job: Json, worker: str, reason: str) -> Json:
    """A worker that stopped (SIGTERM) handed the trial back before it ended."""
    text = _(":hourglass: *{trial}* returned to the queue: worker *{worker}* stopped "
             "({reason}) before the trial ended; it runs again on the next free worker: "
             "`{words}` (by <@{user}>)", trial=job["trial"], worker=worker, reason=reason,
             words=job["words"], user=job["user"])
    return _card(job, text, [_button(_("Cancel"), CANCEL, job, "danger")], "progress")


def final(job: Json, r: Report) -> Json:
    """The card once the trial ended: its one-line summary; the report is in the thread."""
    error = r.get("error")
    if error and error.get("class") == "cancelled":
        values = {"trial": job["trial"], "words": job["words"]}
        icon, line = ":no_entry_sign:", (
            _("*{trial}* cancelled by <@{user}>: `{words}`", user=job["cancelled_by"], **values)
            if job.get("cancelled_by") else _("*{trial}* cancelled: `{words}`", **values))
    else:
        icon = ":white_check_mark:" if r["status"] == Outcome.OK.value else ":x:"
        line = f"{summary.headline(r)}: `{job['words']}`"
        if summary.retry_line(r):
            line += f"\n:warning: {summary.retry_line(r)}"
        if summary.busy_line(r):
            line += f"\n:warning: {summary.busy_line(r)}"
    text = f"{icon} {line}\n" + _("Details in the thread.")
    return _card(job, text, [_button(_("Re-run"), RERUN, job),
                             _button(_("Add to plan…"), ADD_TO_PLAN, job)], "summary")


PLAN_MODAL = "trial_add_to_plan_modal"  # callback_id of the "Add to plan…" modal


def plan_modal(job: Json, choices: list[tuple[str, str]]) -> Json:
    """The modal that asks which plan and block the trial counts for."""
    options = [{"text": {"type": "plain_text", "text": f"{plan} · {kind}"[:75]},
                "value": f"{plan}|{kind}"} for plan, kind in choices[:100]]
    return {"type": "modal", "callback_id": PLAN_MODAL, "private_metadata": str(job["id"]),
            "title": {"type": "plain_text",
                      "text": _("Add {trial} to a plan", trial=job["trial"])[:24]},
            "submit": {"type": "plain_text", "text": _("Add")},
            "close": {"type": "plain_text", "text": _("Cancel")},
            "blocks": [{"type": "input", "block_id": "block",
                        "label": {"type": "plain_text", "text": _("Plan and block")},
                        "element": {"type": "static_select", "action_id": "choice",
                                    "options": options}}]}
