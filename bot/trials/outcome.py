"""What an ending trial posts: its card's final state and the report in its
thread; and, when it is the last of a sweep, ladder or A/B to end, the
group's fit and its chart, or its table. Reads the group's other jobs from the
store; never raises for a failing fit, chart or table: that becomes a message
saying so, or (a chart) is left out and logged."""
from __future__ import annotations

from bot.blocks import message
from bot.fits import sweepview
from bot.fits.sweep import fit_sweep
from bot.ports import QueueStore
from bot.states import ENDED, JobStatus, Json, Outcome
from bot.trials import ab, card, ladder, views
from worker.api import Report
from worker.i18n import _


def ended(store: QueueStore, job: Json, report: Report) -> list[Json]:
    """The card's final state (an edit, when the trial has a card) and the report."""
    out = [views.report(job, report)]
    if job.get("started_msg"):
        job = store.job(job["id"]) or job  # who cancelled, if anyone
    return card_edit(job, report) + out


def card_edit(job: Json, report: Report) -> list[Json]:
    """The card's final state as an edit of it; none while the trial has no card."""
    return ([dict(card.final(job, report), update_of=job["started_msg"])]
            if job.get("started_msg") else [])


def group_messages(store: QueueStore, job: Json, report: Report) -> list[Json]:
    """When `job` (ending now with `report`) is the last of its group to end:
    the sweep's fit and its chart, or the ladder's (A/B's) table; else none."""
    if job.get("ladder"):
        jobs = store.ladder_jobs(job["ladder"])
        if any(j["status"] not in ENDED for j in jobs if j["id"] != job["id"]):
            return []
        reports: list[Json | None] = [dict(report) if j["id"] == job["id"] else j["report"]
                                      for j in jobs]
        try:
            if job.get("group_kind") == "ab":
                return [ab.message(jobs, reports)]
            return [ladder.message(jobs, reports, job.get("budget"))]
        except Exception as exc:  # noqa: BLE001 - the trial's report matters more
            return [message(jobs[0]["channel"], _(":x: Ladder L{id} ended, but its table "
                                                  "failed: {error}", id=job["ladder"],
                                                  error=repr(exc)))]
    if not job.get("sweep"):
        return []
    jobs = store.sweep_jobs(job["sweep"])
    if any(j["status"] not in ENDED for j in jobs if j["id"] != job["id"]):
        return []
    jobs = [dict(j, report=report, status=JobStatus.DONE if report["status"] == Outcome.OK.value
                 else JobStatus.FAILED)
            if j["id"] == job["id"] else j for j in jobs]
    try:
        fit = fit_sweep([j["report"] for j in jobs])
        posted = sweepview.sweep_fit(job["sweep"], jobs, fit)
    except Exception as exc:  # noqa: BLE001 - the report matters more than the fit
        return [sweepview.sweep_fit_failed(job["sweep"], jobs, exc)]
    drawn = sweepview.sweep_chart(job["sweep"], posted["channel"], fit)
    return [posted, drawn] if drawn else [posted]
