"""Tries of one trial. Every try is kept — error class, message tail, seconds
lost, what changed for the next — and with `on_oom=halve-batch` an OOM is
retried at half the batch, up to `attempts` tries. A retried trial reports the
config it actually ran and the one requested, never one as the other."""
from __future__ import annotations

import dataclasses
import threading

from worker import launcher
from worker import report as reports
from worker.report import Attempt, Report
from worker.spec import TrialSpec


def run(spec: TrialSpec, cancel: threading.Event | None = None, recipes=None,
        progress: dict | None = None, user=None) -> Report:
    """`progress`, when given, is kept current for the heartbeat: the attempt,
    the phase running now, and the error class of each failed try. `user`
    (worker.trialuser.TrialUser) runs the trial's processes as that user."""
    cancel = cancel or threading.Event()
    progress = {} if progress is None else progress
    requested = dict(spec.params)
    tries: list[Attempt] = []
    current = spec
    while True:
        progress.update(attempt=len(tries) + 1, phase="setup")
        report = launcher.run_trial(current, cancel, recipes, progress=progress, user=user)
        entry = reports.attempt(len(tries) + 1, report, {
            k: v for k, v in current.params.items() if requested.get(k) != v})
        tries.append(entry)
        if report["status"] != "ok":
            progress["failed"] = [*progress.get("failed", []), entry["error_class"] or "failed"]
        batch = current.params.get("batch")
        if (report["status"] == "ok" or entry["error_class"] != "oom" or cancel.is_set()
                or current.params.get("on_oom") != "halve-batch" or not isinstance(batch, int)
                or batch <= 1 or len(tries) >= current.params.get("attempts", 1)):
            break
        entry["next"] = f"batch {batch} → {batch // 2} (on_oom=halve-batch)"
        current = dataclasses.replace(current, params={**current.params, "batch": batch // 2})
    report["requested"] = requested
    report["attempts"] = tries
    report["seconds_lost"] = sum(t["seconds"] or 0 for t in tries[:-1])
    return report
