"""The job queue: submit, lease (long-poll), heartbeat, finish, cancel.

State is in the store; this adds the waiting. A lease request waits on a
condition that `submit` notifies, and re-checks the store every second so
expired leases and jobs added by another process are seen too. What an ending
trial posts is bot/trials/outcome.py's; which worker may run what,
bot/trials/workers.py's.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from bot.blocks import message
from bot.ports import QueueStore
from bot.states import WAITING, ActualStatus, CheckStatus, JobStatus, Json
from bot.trials import card, chart, outcome, views, workers
from worker import i18n
from worker.api import Report, compat, reports, specs
from worker.i18n import _

COMPAT_SCHEMA = compat.report.SCHEMA  # a worker that registers it answers checks
LEASE_SECONDS = 60      # a lease without a heartbeat for this long is re-queued
MAX_LEASES = 2          # leases lost to a silent worker before the trial fails (as Buildkite)
CHECK_LEASE_SECONDS = 600  # a check's fetch stops at 300 s (worker/compatcheck.py): no heartbeat
MAX_LEFT = 1000  # long polls left by stopping workers, remembered (each is over in 30 s)


def _dicts(specs: Sequence[specs.TrialSpec], route: Json | None) -> list[Json]:
    """Specs as stored: the route (where it may run) travels with the spec."""
    return [dict(s.to_dict(), route=route) if route else s.to_dict() for s in specs]


def unrun_report(job: Json, why: str) -> Report:
    """The report of a held trial that will not run: cancelled, with why."""
    report = reports.fail(reports.new_report(job["workload"], job["spec"]["params"]),
                          "cancelled", _("not run: {why}", why=why), None)
    report["trial"] = job["trial"]
    return report


def _needs(specs: list[Json]) -> list[str]:
    """Each spec's needs class, as the store keeps it for leasing."""
    return [workers.needs_key(s) for s in specs]


class LeaseLost(Exception):
    """The job is no longer held by this worker and lease."""


class JobQueue:
    def __init__(self, store: QueueStore, on_message: Callable[[], None] = lambda: None,
                 lease_seconds: float = LEASE_SECONDS, max_leases: int = MAX_LEASES):
        self.store = store
        self.lease_seconds, self.max_leases = lease_seconds, max_leases
        # Workers heartbeat several times per lease, so one lost beat loses nothing.
        self.heartbeat_seconds = min(10.0, lease_seconds / 4)
        self.on_message = on_message  # wakes the outbox sender
        self.changed = threading.Condition()
        # (worker, lease request key) of long polls their worker left -> why it stopped
        self.left: dict[tuple[str, str | None], str] = {}
        self.left_lock = threading.Lock()
        # Serialises "is this the sweep's last job?" with ending the job, so two
        # workers ending a sweep's last two jobs at once post its fit exactly once.
        self.sweep_lock = threading.Lock()

    def submit(self, spec: specs.TrialSpec, words: str, user: str, channel: str,
               tags: Json | None = None,
               request: str | list[tuple[str | None, float | None]] | None = None,
               route: Json | None = None,
               response_url: str | None = None, held: bool = False) -> Json:
        """Queue one trial; `held`, it waits for release_held (bot/trials/command.settle)."""
        specs = _dicts([spec], route)
        job = self.store.add_jobs(specs, [words], user, channel, tags=tags, request=request,
                                  response_url=response_url, needs=_needs(specs), held=held)[0]
        self._wake()
        return job

    def submit_sweep(self, specs: Sequence[specs.TrialSpec], words: Sequence[str], user: str,
                     channel: str, tags: Json | None = None, request: str | None = None,
                     route: Json | None = None, response_url: str | None = None,
                     held: bool = False) -> list[Json]:
        """Queue a sweep's trials in one transaction; they share the first one's id."""
        rows = _dicts(specs, route)
        jobs = self.store.add_jobs(rows, list(words), user, channel, sweep=True, tags=tags,
                                   request=request, response_url=response_url,
                                   needs=_needs(rows), held=held)
        self._wake()
        return jobs

    def submit_group(self, kind: str, specs: Sequence[specs.TrialSpec], words: Sequence[str],
                     user: str, channel: str,
                     budget: int | None = None, tags: Json | None = None,
                     request: str | None = None, route: Json | None = None,
                     response_url: str | None = None, held: bool = False) -> list[Json]:
        """A ladder or an A/B: trials whose last to end posts one comparison."""
        rows = _dicts(specs, route)
        jobs = self.store.add_jobs(rows, list(words), user, channel, group=kind, budget=budget,
                                   tags=tags, request=request, response_url=response_url,
                                   needs=_needs(rows), held=held)
        self._wake()
        return jobs

    def release_held(self, channel: str) -> int:
        """The bot may post in `channel`: its held trials join the queue."""
        released = self.store.release_held(channel)
        if released:
            self._wake()
        return released

    def refuse_held(self, jobs: list[Json], refusal: str) -> int:
        """The bot may not post in their channel: held trials end unrun, and each
        command's requester is told why (its response_url, else a direct message)."""
        reports: dict[int, Report] = {}
        asked: dict[tuple[str, str | None], list[str]] = {}
        for job in jobs:
            report = unrun_report(job, refusal)
            reports[job["id"]] = report
            asked.setdefault((job["user"], job["response_url"]), []).append(job["trial"])
        notes = [{"channel": jobs[0]["channel"], "kind": "notice", "via": "requester",
                  "user": user, "response_url": url,
                  "text": _(":x: {trials} will not run: {refusal}; then run the command again.",
                            trials=", ".join(trials), refusal=refusal)}
                 for (user, url), trials in asked.items()]
        ended = self.store.end_held(reports, notes)
        if ended:
            self.on_message()
        return ended

    def submit_slurm_actual(self, row: Json, request: str | None = None) -> Json:
        req = self.store.add_slurm_actual(row, request)
        self._wake()
        return req

    def submit_check(self, row: Json, request: str | None = None) -> Json:
        """A compatibility check (`/plan NAME check`), for any worker that reads
        repositories (it registers the compat schema)."""
        check = self.store.add_check(row, request)
        self._wake()
        return check

    def _wake(self) -> None:
        """Lease requests waiting in lease() look again: the queue changed."""
        with self.changed:
            self.changed.notify_all()

    def speaking(self, channel: str | None) -> AbstractContextManager[None]:
        """What is written for a trial speaks its channel's language."""
        return i18n.using(self.store.channel_lang(channel))

    def lease(self, worker: str, wait: float, key: str | None = None) -> Json | None:
        """A trial job for `worker`; for a Slurm worker, first any Slurm accounting
        request (seconds of sacct), as a dict with kind "slurm-accounting". The
        lease is kept with the request's `key` (see held)."""
        deadline = time.monotonic() + wait
        self.store.seen_worker(worker)
        info: Json = next((w["info"] for w in self.store.workers() if w["name"] == worker), {})

        while True:
            if self.stopped(worker, key) is not None:  # its worker left: answer nothing now
                return None
            self.reap()
            if info.get("executor") == "slurm":
                req = self.store.lease_slurm_actual(worker, self.lease_seconds, self.max_leases,
                                                    key)
                if req:
                    return dict(req, kind="slurm-accounting")
            if info.get("compat") == COMPAT_SCHEMA:  # a check takes seconds: before trials
                check = self.store.lease_check(worker, CHECK_LEASE_SECONDS, self.max_leases,
                                               key)
                if check:
                    return dict(check, kind="compat-check")
            job = self.store.lease_next(worker, self.lease_seconds, self.runnable(info), key)
            if job:
                with self.speaking(job["channel"]):
                    self.store.set_started_message(job["id"], card.started(job, worker))
                self.on_message()
                return self.store.job(job["id"])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with self.changed:
                self.changed.wait(min(left, 1.0))

    def leave(self, worker: str, key: str, reason: str) -> None:
        """The worker stops and left its long poll `key` open: the poll answers
        nothing at once, and a trial it got meanwhile goes back (stopped())."""
        with self.left_lock:
            while len(self.left) >= MAX_LEFT:  # the oldest: long over
                del self.left[next(iter(self.left))]
            self.left[(worker, key)] = reason
        self._wake()

    def stopped(self, worker: str, key: str | None) -> str | None:
        """Why the worker left this long poll (leave()), or None."""
        with self.left_lock:
            return self.left.get((worker, key))

    def runnable(self, info: Json) -> list[int]:
        """The needs classes with queued trials that a worker with `info` can
        run: can_run asked once per class (and cached), not once per trial."""
        while unclassified := self.store.unclassified():
            self.store.classify({i: workers.needs_key(spec) for i, spec in unclassified})
        mine = workers.info_key(info)
        return [c.id for c in self.store.queued_needs() if workers.runs(mine, c.key)]

    def unsent(self, worker: str, job_id: int, lease: str) -> bool:
        """A leased trial whose answer could not be written to its worker: queued
        again at once for the next worker, rather than held until its lease expires;
        one cancelled meanwhile ends cancelled."""
        job = self.store.job(job_id)
        if job is None:
            return False
        try:
            self._give_back(job, worker, lease, "hung up", card.requeued)
        except LeaseLost:
            return False
        return True

    def release(self, job_id: int, worker: str, lease: str, reason: str,
                key: str | None = None) -> Json | None:
        """A worker that stops (SIGTERM, docker stop) hands back the trial it ran:
        queued again at once, as an unsent lease is, with no attempt counted, and
        its card says why. A trial cancelled meanwhile ends cancelled instead of
        running again. Raises LeaseLost when this lease no longer holds the job."""
        job = self.store.job(job_id)
        if job is None:
            raise LeaseLost(f"there is no job T{job_id}")
        return self._give_back(job, worker, lease, reason,
                               lambda j, w: card.returned(j, w, reason), key)

    def _give_back(self, job: Json, worker: str, lease: str, reason: str,
                   drawn: Callable[[Json, str], Json],
                   key: str | None = None) -> Json | None:
        """Queue again a trial its worker did not run to the end, its card edited
        with `drawn(job, worker)`; or end it cancelled when someone cancelled it,
        before or while it is handed back (the store refuses to queue a cancelled
        trial, so the two cannot cross)."""
        if not job["cancel"]:
            edit = None
            if job["started_msg"]:  # its card said "started on {worker}"
                with self.speaking(job["channel"]):
                    edit = dict(drawn(job, worker), update_of=job["started_msg"])
            if self.store.release_lease(job["id"], worker, lease, edit, key):
                self.on_message()
                self._wake()
                return self.store.job(job["id"])
            now = self.store.job(job["id"])
            if now is None or not now["cancel"]:  # not this lease's any more
                raise LeaseLost(f"{job['trial']} is not leased to {worker} under this lease")
            job = now
        with self.speaking(job["channel"]):
            said = _("cancelled by <@{user}>; {worker} stopped ({reason}) before it ended",
                     user=job["cancelled_by"], worker=worker, reason=reason)
        report = reports.fail(reports.new_report(job["workload"], job["spec"]["params"]),
                              "cancelled", said, None)
        return self.finish(job["id"], worker, lease, report, key)

    def held(self, worker: str, key: str) -> Json | None:
        """The lease a lease request with this key got, while `worker` still
        holds it: the request came again because its answer was lost, and the
        same lease is given again (renewed) rather than left to expire."""
        first = self.store.worker_request(worker, key)
        if not first or first["kind"] != "lease" or not first["lease"]:
            return None
        if first["job"]:
            if self.store.extend_lease(first["job"], worker, first["lease"], self.lease_seconds):
                return self.store.job(first["job"])
            return None
        # A Slurm request or a check: the lease (a fresh uuid) says which.
        for kind, req in (("slurm-accounting", self.store.slurm_actual(first["request"])),
                          ("compat-check", self.store.check(first["request"]))):
            if req and (req["status"], req["worker"], req["lease"]) == ("running", worker,
                                                                         first["lease"]):
                return dict(req, kind=kind)
        return None

    def reap(self) -> None:
        """Expired leases: a trial with leases left is queued again, one without
        fails (fail_exhausted)."""
        for job in self.store.lapsed_jobs(self.max_leases):
            edit = None
            if job["started_msg"]:  # its card said "started on {worker}"
                with self.speaking(job["channel"]):
                    edit = dict(card.lapsed(job, job["worker"]), update_of=job["started_msg"])
            if self.store.requeue_lapsed(job, edit):
                self.on_message()
                self._wake()
        self.fail_exhausted()

    def fail_exhausted(self) -> None:
        """A trial whose workers keep dying (it may be what kills them) fails
        with the reason instead of being re-queued for ever; so does a Slurm
        accounting request."""
        for req in self.store.expired_slurm_actuals(self.max_leases):
            with self.speaking(req["channel"]):
                self._fail_slurm(req)
        for check in self.store.expired_checks(self.max_leases):
            with self.speaking(check["channel"]):
                self._fail_check(check)
        for job in self.store.expired_jobs(self.max_leases):
            with self.speaking(job["channel"]):
                self._fail_expired(job)

    def _fail_check(self, check: Json) -> None:
        why = _("lease expired {n} times: the workers asked ({worker} last) stopped answering",
                n=check["attempts"], worker=check["worker"])
        text = _(":x: Compatibility check C{id} of *{plan}* ({repo}): {why}. Nothing was read "
                 "(asked by <@{user}>); ask again with `/plan {plan} check` when a worker runs.",
                 id=check["id"], plan=check["plan"], repo=check["repo"], why=why,
                 user=check["user"])
        said = dict(message(check["channel"], text), user=check["user"])
        if self.store.finish_check(check, CheckStatus.FAILED,
                                   {"error": {"why": "expired", "message": why}}, {},
                                   lambda _filled: said, expired=True) is not None:
            self.on_message()

    def _fail_slurm(self, req: Json) -> None:
        why = _("lease expired {n} times: the Slurm workers asked ({worker} last) stopped "
                "answering", n=req["attempts"], worker=req["worker"])
        text = _(":x: Slurm accounting for *{plan}* {block} (jobs {jobs}): {why}. Nothing was "
                 "recorded (asked by <@{user}>); ask again when a Slurm worker runs.",
                 plan=req["plan"], block=req["block"], jobs=", ".join(req["jobs"]), why=why,
                 user=req["user"])
        if self.store.finish_slurm_actual(req, ActualStatus.FAILED, {"error": why}, text, None,
                                          [dict(message(req["channel"], text),
                                                user=req["user"])],
                                          expired=True):
            self.on_message()

    def _fail_expired(self, job: Json) -> None:
        report = reports.new_report(job["workload"], job["spec"]["params"])
        if job["cancel"]:  # cancelled, then its worker went silent: never run again
            reports.fail(report, "cancelled", _("cancelled by <@{user}>; {worker} stopped "
                                                "heartbeating before it could kill it",
                                                user=job["cancelled_by"], worker=job["worker"]),
                         None)
        else:
            reports.fail(report, "killed", _("lease expired {n} times: the workers running "
                                             "it ({worker} last) stopped heartbeating — died, "
                                             "were killed, or lost the network mid-trial; not "
                                             "retried", n=job["attempts"], worker=job["worker"]),
                         None)
        report["trial"], report["worker"] = job["trial"], job["worker"]
        with self.sweep_lock:
            group = outcome.group_messages(self.store, job, report)
            if not self.store.fail_expired(job, report, outcome.ended(self.store, job, report)):
                return
            if group:  # fail_expired takes one message: the fit (and chart) follow it
                self.store.add_messages(group)
        self.on_message()

    def heartbeat(self, job_id: int, worker: str, lease: str, progress: Json | None = None) -> bool:
        """Extend the lease; show new progress on the trial's card. True when the
        trial was cancelled: the worker then kills it."""
        if not self.store.extend_lease(job_id, worker, lease, self.lease_seconds):
            raise LeaseLost(f"T{job_id} is not leased to {worker} under this lease")
        job = self.store.job(job_id)
        if job is None:  # the lease was just extended: the job is there
            raise LeaseLost(f"there is no job T{job_id}")
        if progress and progress != job.get("progress") and job.get("started_msg"):
            with self.speaking(job["channel"]):
                messages = [dict(card.started(job, worker, progress),
                                 update_of=job["started_msg"])]
                messages += card.failed_tries(job, (job.get("progress") or {}).get("failed"),
                                              progress)
            if self.store.set_progress(job_id, lease, progress, messages):
                self.on_message()
        return bool(job.get("cancel"))

    def cancel(self, job_id: int, user: str) -> str:
        """Cancel a queued trial now, or ask the worker running it to kill it
        (who may: bot/trials/command.py). Returns what happened; raises
        ValueError naming why it cannot."""
        job = self.store.job(job_id)
        with self.speaking(job["channel"] if job else None):
            return self._cancel(job_id, job, user)

    def _cancel(self, job_id: int, job: Json | None, user: str) -> str:
        if job is None:
            raise ValueError(_("there is no trial T{id}; `/trial list` shows recent ones",
                               id=job_id))
        if job["status"] not in WAITING:
            raise ValueError(_("{trial} already ended ({status}); nothing to cancel",
                               trial=job["trial"], status=views.status_word(job["status"])))
        if job["cancel"]:
            return _("{trial} is already being cancelled", trial=job["trial"])
        if job["status"] in (JobStatus.HELD, JobStatus.QUEUED):
            said = _("cancelled by <@{user}> before it started", user=user)
            report = reports.fail(reports.new_report(job["workload"], job["spec"]["params"]),
                                  "cancelled", said, None)
            report["trial"] = job["trial"]
            note = message(job["channel"], _(":no_entry_sign: *{trial}* cancelled by <@{user}> "
                                             "before it started: `{words}`", trial=job["trial"],
                                             user=user, words=job["words"]))
            # a card exists when the trial was queued again after a lease (unsent)
            edit = outcome.card_edit(dict(job, cancelled_by=user), report)
            with self.sweep_lock:  # the last of a sweep or ladder to end posts its message
                group = outcome.group_messages(self.store, job, report)
                cancelled = self.store.cancel_queued(job_id, user, report,
                                                     edit + [note] + group)
            if cancelled:
                self.on_message()
                return _("{trial} was queued and is cancelled; it will not run",
                         trial=job["trial"])
            return self.cancel(job_id, user)  # a worker leased it meanwhile: ask it
        drawn = card.started(dict(job, cancel=1), job["worker"], job.get("progress"))
        redrawn = dict(drawn, update_of=job["started_msg"]) if job["started_msg"] else None
        if not self.store.request_cancel(job_id, user, redrawn):
            return self.cancel(job_id, user)  # it ended meanwhile: say so
        self.on_message()
        return _("{trial} is running on {worker}: the worker kills it at its next heartbeat "
                 "and the report will say cancelled", trial=job["trial"], worker=job["worker"])

    def finish(self, job_id: int, worker: str, lease: str, report: Report,
               key: str | None = None) -> Json | None:
        job = self.store.job(job_id)
        if job is None:
            raise LeaseLost(f"there is no job T{job_id}")
        report["trial"], report["worker"] = job["trial"], worker
        with self.speaking(job["channel"]):
            messages = outcome.ended(self.store, job, report)
            if chart.has_timeline(report):
                messages.append(views.chart(job, report))
            with self.sweep_lock:
                group = outcome.group_messages(self.store, job, report)
                if not self.store.finish_job(job_id, worker, lease, report, messages + group,
                                             key):
                    raise LeaseLost(f"T{job_id} is not leased to {worker} under this lease")
        self.on_message()
        self._wake()
        return self.store.job(job_id)

