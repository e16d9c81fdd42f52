"""The job queue: submit, lease (long-poll), heartbeat, finish.

State is in the store; this adds the waiting. A lease request waits on a
condition that `submit` notifies, and re-checks the store every second so
expired leases and jobs added by another process are seen too.
"""
from __future__ import annotations

import threading
import time

from bot import access
from bot.store import Store
from bot.trials.job import ENDED
from worker import report as reports
from worker.spec import Workload
from bot.trials import trialcard, routing, chart
from bot.plans import slurmactual
from bot.delivery import refusals
from bot.blocks import message
from bot.fits import sweepview
from bot.trials import ab
from bot.trials import ladder
from bot.trials import views
from bot.fits.sweep import fit_sweep

LEASE_SECONDS = 60      # a lease without a heartbeat for this long is re-queued
ONLINE_SECONDS = 90     # a worker seen within this is "online"
MAX_LEASES = 2          # leases lost to a silent worker before the trial fails (as Buildkite)


def can_run(info: dict, spec: dict) -> bool:
    """A recipe goes only to a worker whose file has it, and a CUDA recipe only
    to a worker with an NVIDIA GPU (a cloud Mac is not a CUDA box); a training
    run of `world` ranks only to a worker with a GPU per rank (or, on CPU,
    a core per rank where the worker said how many it has); and any trial only
    where its route (`gpu=`, `min_mem=`, `label=`) matches."""
    if not routing.matches(info, spec.get("route")):
        return False
    if spec.get("recipe") is None:
        return fits_ranks(info, spec.get("params", {}))
    recipe = next((r for r in info.get("recipes", []) if r["name"] == spec["recipe"]), None)
    cuda = info.get("device") == "cuda" or (info.get("device") is None and bool(info.get("gpus")))
    return recipe is not None and (recipe.get("requires") != "cuda" or cuda)


def recipes_of(workers: list[dict]) -> dict[str, Workload]:
    """The recipes these workers declared from their recipe files, by name."""
    out = {}
    for w in workers:
        for d in w["info"].get("recipes", []):
            out.setdefault(d["name"], Workload.from_dict(d))
    return out


def _dicts(specs: list, route: dict | None) -> list[dict]:
    """Specs as stored: the route (where it may run) travels with the spec."""
    return [dict(s.to_dict(), route=route) if route else s.to_dict() for s in specs]


def fits_ranks(info: dict, params: dict) -> bool:
    world = params.get("world", 1)
    if world <= 1:
        return True
    gpus, cpus = len(info.get("gpus") or []), info.get("cpus")
    device = params.get("device", "auto")
    if device == "cuda" or (device == "auto" and gpus):
        return gpus >= world
    return cpus is None or cpus >= world


class LeaseLost(Exception):
    """The job is no longer held by this worker and lease."""


class JobQueue:
    def __init__(self, store: Store, on_message=lambda: None,
                 lease_seconds: float = LEASE_SECONDS, max_leases: int = MAX_LEASES,
                 admins: frozenset[str] = frozenset(), policy: access.Policy | None = None):
        self.store = store
        # Alone (tests, scripts) anyone may run; Runtime passes the configured policy.
        self.policy = policy or access.Policy(run_everyone=True, admins=admins)
        self.members = access.no_groups  # user group -> its users; the Slack app sets it
        self.channels = refusals.NoCheck()  # can the bot post there? The Slack app sets it
        self.lease_seconds, self.max_leases = lease_seconds, max_leases
        # Workers heartbeat several times per lease, so one lost beat loses nothing.
        self.heartbeat_seconds = min(10.0, lease_seconds / 4)
        self.on_message = on_message  # wakes the outbox sender
        self.changed = threading.Condition()
        # Serialises "is this the sweep's last job?" with ending the job, so two
        # workers ending a sweep's last two jobs at once post its fit exactly once.
        self.sweep_lock = threading.Lock()

    def submit(self, spec, words: str, user: str, channel: str, tags: dict | None = None,
               request: str | list | None = None, route: dict | None = None,
               response_url: str | None = None) -> dict:
        job = self.store.add_jobs(_dicts([spec], route), [words], user, channel, tags=tags,
                                  request=request, response_url=response_url)[0]
        with self.changed:
            self.changed.notify_all()
        return job

    def submit_sweep(self, specs: list, words: list[str], user: str, channel: str,
                     tags: dict | None = None, request: str | None = None,
                     route: dict | None = None, response_url: str | None = None) -> list[dict]:
        """Queue a sweep's trials in one transaction; they share the first one's id."""
        jobs = self.store.add_jobs(_dicts(specs, route), list(words), user, channel,
                                   sweep=True, tags=tags, request=request,
                                   response_url=response_url)
        with self.changed:
            self.changed.notify_all()
        return jobs

    def submit_group(self, kind: str, specs: list, words: list[str], user: str, channel: str,
                     budget: int | None = None, tags: dict | None = None,
                     request: str | None = None, route: dict | None = None,
                     response_url: str | None = None) -> list[dict]:
        """A ladder or an A/B: trials whose last to end posts one comparison."""
        jobs = self.store.add_jobs(_dicts(specs, route), list(words), user, channel,
                                   group=kind, budget=budget, tags=tags, request=request,
                                   response_url=response_url)
        with self.changed:
            self.changed.notify_all()
        return jobs

    def group_message(self, job: dict, report: dict) -> dict | None:
        """The sweep's fit or the ladder's table, when `job` is its group's last to end."""
        if job.get("ladder"):
            jobs = self.store.ladder_jobs(job["ladder"])
            if any(j["status"] not in ENDED for j in jobs if j["id"] != job["id"]):
                return None
            reports_ = [report if j["id"] == job["id"] else j["report"] for j in jobs]
            try:
                if job.get("group_kind") == "ab":
                    return ab.message(jobs, reports_)
                return ladder.message(jobs, reports_, job.get("budget"))
            except Exception as exc:  # noqa: BLE001 - the trial's report matters more
                return message(jobs[0]["channel"], f":x: Ladder L{job['ladder']} "
                                            f"ended, but its table failed: {exc!r}")
        return self.sweep_message(job, report)

    def sweep_message(self, job: dict, report: dict) -> dict | None:
        """The sweep's fit message when `job` (ending now with `report`) is the last
        of its sweep to end, else None. Never raises: a failing fit becomes a
        message that says so, and the trial's own report is kept either way."""
        if not job.get("sweep"):
            return None
        jobs = self.store.sweep_jobs(job["sweep"])
        if any(j["status"] not in ENDED for j in jobs if j["id"] != job["id"]):
            return None
        jobs = [dict(j, report=report, status="done" if report["status"] == "ok" else "failed")
                if j["id"] == job["id"] else j for j in jobs]
        try:
            fit = fit_sweep([j["report"] for j in jobs])
            return sweepview.sweep_fit(job["sweep"], jobs, fit)
        except Exception as exc:  # noqa: BLE001 - the report matters more than the fit
            return sweepview.sweep_fit_failed(job["sweep"], jobs, exc)

    def online_workers(self) -> list[str]:
        return [w["name"] for w in self.store.workers(seen_within=ONLINE_SECONDS)]

    def known(self, worker: str) -> bool:
        return any(w["name"] == worker for w in self.store.workers())

    def register(self, worker: str, info: dict) -> None:
        self.store.upsert_worker(worker, info)

    def recipes(self) -> dict[str, Workload]:
        """Recipes the workers declared from their recipe files, by name."""
        return recipes_of(self.store.workers())

    def online_for(self, spec: dict) -> list[str]:
        """Online workers that could run `spec`."""
        return [w["name"] for w in self.store.workers(seen_within=ONLINE_SECONDS)
                if can_run(w["info"], spec)]

    def slurm_workers(self) -> list[dict]:
        """Registered workers that submit to Slurm: they can run sacct for the bot."""
        return [w for w in self.store.workers() if w["info"].get("executor") == "slurm"]

    def submit_slurm_actual(self, row: dict, request: str | None = None) -> dict:
        req = self.store.add_slurm_actual(row, request)
        with self.changed:
            self.changed.notify_all()
        return req

    def finish_slurm_actual(self, req_id: int, worker: str, lease: str, result: dict,
                            key: str | None = None) -> dict:
        """A Slurm worker's sacct answer: the actual recorded (or why not) and
        posted in the plan's channel, in one transaction."""
        req = self.store.slurm_actual(req_id)
        if req is None:
            raise LeaseLost(f"there is no Slurm accounting request A{req_id}")
        if req["worker"] != worker or req["lease"] != lease:
            raise LeaseLost(f"A{req_id} is not leased to {worker} under this lease")
        actual, text = slurmactual.outcome(req, result)
        if not self.store.finish_slurm_actual(req, "done" if actual else "failed", result, text,
                                              actual, [dict(message(
                                                  req["channel"], text), user=req["user"])],
                                              key=key):
            raise LeaseLost(f"A{req_id} is not leased to {worker} under this lease")
        self.on_message()
        return self.store.slurm_actual(req_id)

    def lease(self, worker: str, wait: float, key: str | None = None) -> dict | None:
        """A trial job for `worker`; for a Slurm worker, first any Slurm accounting
        request (seconds of sacct), as a dict with kind "slurm-accounting". The
        lease is kept with the request's `key` (see held)."""
        deadline = time.monotonic() + wait
        self.store.seen_worker(worker)
        info = next((w["info"] for w in self.store.workers() if w["name"] == worker), {})

        while True:
            self.fail_exhausted()
            if info.get("executor") == "slurm":
                req = self.store.lease_slurm_actual(worker, self.lease_seconds, self.max_leases,
                                                    key)
                if req:
                    return dict(req, kind="slurm-accounting")
            job = self.store.lease_next(worker, self.lease_seconds,
                                        lambda spec: can_run(info, spec), self.max_leases, key)
            if job:
                self.store.set_started_message(job["id"], trialcard.started(job, worker))
                self.on_message()
                return self.store.job(job["id"])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with self.changed:
                self.changed.wait(min(left, 1.0))

    def held(self, worker: str, key: str) -> dict | None:
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
        req = self.store.slurm_actual(first["request"])
        if req and (req["status"], req["worker"], req["lease"]) == ("running", worker,
                                                                     first["lease"]):
            return dict(req, kind="slurm-accounting")
        return None

    def fail_exhausted(self) -> None:
        """A trial whose workers keep dying (it may be what kills them) fails
        with the reason instead of being re-queued for ever; so does a Slurm
        accounting request."""
        for req in self.store.expired_slurm_actuals(self.max_leases):
            why = (f"lease expired {req['attempts']} times: the Slurm workers asked "
                   f"({req['worker']} last) stopped answering")
            text = (f":x: Slurm accounting for *{req['plan']}* {req['block']} (jobs "
                    f"{', '.join(req['jobs'])}): {why}. Nothing was recorded (asked by "
                    f"<@{req['user']}>); ask again when a Slurm worker runs.")
            if self.store.finish_slurm_actual(req, "failed", {"error": why}, text, None,
                                              [dict(message(req["channel"], text),
                                                    user=req["user"])],
                                              expired=True):
                self.on_message()
        for job in self.store.expired_jobs(self.max_leases):
            report = reports.new_report(job["workload"], job["spec"]["params"])
            if job["cancel"]:  # cancelled, then its worker went silent: never run again
                reports.fail(report, "cancelled", f"cancelled by <@{job['cancelled_by']}>; "
                             f"{job['worker']} stopped heartbeating before it could kill it",
                             None)
            else:
                reports.fail(report, "killed", f"lease expired {job['attempts']} times: the "
                             f"workers running it ({job['worker']} last) stopped heartbeating — "
                             "died, were killed, or lost the network mid-trial; not retried",
                             None)
            report["trial"], report["worker"] = job["trial"], job["worker"]
            with self.sweep_lock:
                fit = self.group_message(job, report)
                if not self.store.fail_expired(job, report, self.ended(job, report)):
                    continue
                if fit:  # fail_expired takes one message: the fit follows it
                    self.store.add_messages([fit])
            self.on_message()

    def heartbeat(self, job_id: int, worker: str, lease: str, progress: dict | None = None) -> bool:
        """Extend the lease; show new progress on the trial's card. True when the
        trial was cancelled: the worker then kills it."""
        if not self.store.extend_lease(job_id, worker, lease, self.lease_seconds):
            raise LeaseLost(f"T{job_id} is not leased to {worker} under this lease")
        job = self.store.job(job_id)
        if progress and progress != job.get("progress") and job.get("started_msg"):
            messages = [dict(trialcard.started(job, worker, progress),
                             update_of=job["started_msg"])]
            messages += trialcard.failed_tries(job, (job.get("progress") or {}).get("failed"),
                                               progress)
            if self.store.set_progress(job_id, lease, progress, messages):
                self.on_message()
        return bool(job.get("cancel"))

    def allows(self, action: str, user: str, channel: str, what: str | None = None
               ) -> str | None:
        """None when allowed, else the refusal (bot.access)."""
        return access.allows(self.policy, action, user, channel, self.members, what)

    def hides(self, home: str, user: str, channel: str) -> bool:
        """A trial or a plan is read in its own channel (it may be a private
        one) or by an admin anywhere."""
        return home != channel and self.allows("admin", user, channel) is not None

    def cancel(self, job_id: int, user: str) -> str:
        """Cancel a queued trial now, or ask the worker running it to kill it.
        Returns what happened; raises ValueError naming why it cannot."""
        job = self.store.job(job_id)
        if job is None:
            raise ValueError(f"there is no trial T{job_id}; `/trial list` shows recent ones")
        if job["status"] not in ("queued", "running"):
            raise ValueError(f"{job['trial']} already ended ({job['status']}); nothing to cancel")
        if job["user"] != user:
            refused = self.allows("admin", user, job["channel"], "cancel someone else's trial")
            if refused:
                raise ValueError(f"{job['trial']} was started by <@{job['user']}>; only they or "
                                 f"an admin can cancel it. {refused.rstrip('.')}")
        if job["cancel"]:
            return f"{job['trial']} is already being cancelled"
        if job["status"] == "queued":
            said = f"cancelled by <@{user}> before it started"
            report = reports.fail(reports.new_report(job["workload"], job["spec"]["params"]),
                                  "cancelled", said, None)
            report["trial"] = job["trial"]
            note = message(job["channel"], f":no_entry_sign: *{job['trial']}* "
                                        f"{said}: `{job['words']}`")
            with self.sweep_lock:  # the last of a sweep or ladder to end posts its message
                group = self.group_message(job, report)
                cancelled = self.store.cancel_queued(job_id, user, report,
                                                     [note] + ([group] if group else []))
            if cancelled:
                self.on_message()
                return f"{job['trial']} was queued and is cancelled; it will not run"
            return self.cancel(job_id, user)  # a worker leased it meanwhile: ask it
        card = trialcard.started(dict(job, cancel=1), job["worker"], job.get("progress"))
        card = dict(card, update_of=job["started_msg"]) if job["started_msg"] else None
        if not self.store.request_cancel(job_id, user, card):
            return self.cancel(job_id, user)  # it ended meanwhile: say so
        self.on_message()
        return (f"{job['trial']} is running on {job['worker']}: the worker kills it at its next "
                "heartbeat and the report will say cancelled")

    def ended(self, job: dict, report: dict) -> list[dict]:
        """The messages of an ended trial: its card's final state, the report in
        the thread."""
        out = [views.report(job, report)]
        if job.get("started_msg"):
            job = self.store.job(job["id"]) or job  # who cancelled, if anyone
            out.insert(0, dict(trialcard.final(job, report), update_of=job["started_msg"]))
        return out

    def finish(self, job_id: int, worker: str, lease: str, report: dict,
               key: str | None = None) -> dict:
        job = self.store.job(job_id)
        if job is None:
            raise LeaseLost(f"there is no job T{job_id}")
        report["trial"], report["worker"] = job["trial"], worker
        messages = self.ended(job, report)
        if chart.has_timeline(report):
            messages.append(views.chart(job, report))
        with self.sweep_lock:
            fit = self.group_message(job, report)
            if not self.store.finish_job(job_id, worker, lease, report,
                                         messages + ([fit] if fit else []), key):
                raise LeaseLost(f"T{job_id} is not leased to {worker} under this lease")
        self.on_message()
        with self.changed:
            self.changed.notify_all()
        return self.store.job(job_id)

