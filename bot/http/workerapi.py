"""The worker API: JSON over HTTP, `Authorization: Bearer <token>`.

    POST /api/ping              {worker}                  -> 200 {worker, token, time, ...}
      (changes nothing: `trialbot-worker doctor` asks whether the token is accepted)
    POST /api/workers/register  {worker, info}            -> 200
    POST /api/lease             {worker, wait, idle, key} -> 200 {job...} | 204 (none yet)
    POST /api/jobs/<id>/heartbeat {worker, lease, progress} -> 200 {cancel} | 409 lease lost
    POST /api/jobs/<id>/report  {worker, lease, report, key} -> 200 | 400 bad report | 409
    POST /api/jobs/<id>/release {worker, lease, reason, key} -> 200 | 400 | 409 lease lost
      (a stopping worker hands its trial back: queued again at once, no attempt
      counted; a trial cancelled meanwhile ends cancelled)
    POST /api/workers/stopping  {worker, reason, poll}    -> 200
      (a stopping worker left its long poll open, `poll` being that lease
      request's key: a trial the poll would still get goes back to the queue
      instead of to a worker that is gone)
    POST /api/accounting/<id>/result {worker, lease, result, key} -> 200 | 400 | 409
      (a Slurm worker's sacct answer for `/plan NAME actual KIND slurm=JOBID`)
    POST /api/checks/<id>/result {worker, lease, result, key} -> 200 | 400 | 409
      (a compatibility check's answer for `/plan NAME check`: the trialbot.compat/1
      report read at a commit, or why not)
    (a job id the bot never had: 404; a body over `body_limit`: 413; a write the
    database refuses: 503 {error, reason}, which the worker retries)

`key` (optional) is the request's idempotency key, the same on each of its
retries: a request sent again because its answer was lost is applied once
(idle counted once, the same lease given again, a report, result or release
answered as the first was instead of a 409). Register, heartbeat and stopping
are idempotent.

The token is the shared TRIALBOT_WORKER_TOKEN (any worker name) or a
per-worker token (bot/http/tokens.py), which may act only as its own worker: 403
otherwise. Requests without a valid token get 401; every refused request
(4xx) changes nothing.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from bot.http import tokens
from bot.plans import checks, service
from bot.plans import slurm as slurmactual
from bot.store import Unwritable
from bot.trials import routing, workers
from bot.trials.queue import LeaseLost
from worker.api import MAX_BYTES, Workload, reports

log = logging.getLogger("trialbot.http")

MAX_WAIT = 30  # seconds a lease request may be held open
API_WRITE_WAIT = 10.0  # seconds each write waits for the database: well inside the client's 30
JOB_PATH = re.compile(r"/api/jobs/(\d{1,12})/(heartbeat|report)")
ACCOUNTING_PATH = re.compile(r"/api/accounting/(\d{1,12})/result")
CHECK_PATH = re.compile(r"/api/checks/(\d{1,12})/result")
RELEASE_PATH = re.compile(r"/api/jobs/(\d{1,12})/release")
# Why a worker stops, shown on the trial's card: a signal's name, a few words;
# nothing Slack would read as markup or a mention.
REASON = re.compile(r"[\w .,:;()/+-]{1,80}")
BAD_REASON = ("`reason` must say why the worker stops, e.g. SIGTERM (1-80 letters, digits, "
              "spaces or .,:;()/+-)")
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
# Body limits, checked before the body is read. A report carries its memory
# timeline (at most ~2000 points per part, a few hundred KB) and latency
# samples: 8 MiB is far above any real one and still bounded. Everything else
# is small; a registration lists recipes, so 1 MiB.
MAX_REPORT = 8 * 2**20
MAX_REQUEST = 2**20


def body_limit(path: str) -> int:
    # A Slurm accounting answer lists an array job task by task: as large as a report.
    return MAX_REPORT if path.endswith(("/report", "/result")) else MAX_REQUEST


def check_info(info: dict) -> str | None:
    """A registration the bot can use: GPU names, and recipes it can parse (one
    bad entry must not break /trial for everyone)."""
    gpus = info.get("gpus", [])
    if not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)):
        return "`info.gpus` must be a list of GPU names"
    memory = info.get("gpu_memory", [])
    if not (isinstance(memory, list) and len(memory) in (0, len(gpus)) and all(
            isinstance(m, int) and not isinstance(m, bool) and 0 <= m <= MAX_BYTES
            for m in memory)):
        return "`info.gpu_memory` must be a list of byte counts (up to 1 PiB), one per GPU"
    if info.get("device") not in (None, "cuda", "mps", "cpu"):
        return "`info.device` must be cuda, mps or cpu"
    labels = info.get("labels", {})
    if not (isinstance(labels, dict) and len(labels) <= 50 and all(
            isinstance(k, str) and isinstance(v, str) and routing.LABEL.fullmatch(k)
            and routing.LABEL.fullmatch(v) for k, v in labels.items())):
        return "`info.labels` must map label names to values (letters, digits, _.-)"
    cpus = info.get("cpus")
    if cpus is not None and not (isinstance(cpus, int) and not isinstance(cpus, bool)
                                 and cpus > 0):
        return "`info.cpus` must be a positive whole number"
    hf = info.get("hf", {})
    if not (isinstance(hf, dict) and all(isinstance(hf.get(k), (str, type(None)))
                                         for k in ("transformers", "flash_attn"))
            and isinstance(hf.get("hub", False), bool)
            and isinstance(hf.get("models", {}), dict)
            and all(isinstance(k, str) and isinstance(v, dict) and _layers_ok(v.get("layers"))
                    and _attn_ok(v.get("attn")) for k, v in hf.get("models", {}).items())):
        return ("`info.hf` must be {transformers, flash_attn: version or null, hub: bool, "
                "models: {name: {layers (1-100000), attn: [names], ...} or {error}}}")
    recipes = info.get("recipes", [])
    if not isinstance(recipes, list):
        return "`info.recipes` must be a list"
    for d in recipes:
        try:
            Workload.from_dict(d)
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            return f"`info.recipes` entry {str(d)[:80]!r} is not a recipe description: {exc!r}"
    return None


def _attn_ok(attn) -> bool:
    """The attn= choices a worker says a model supports: routing compares them."""
    return attn is None or (isinstance(attn, list) and 0 < len(attn) <= 10
                            and all(isinstance(a, str) and len(a) <= 40 for a in attn))


def _layers_ok(layers) -> bool:
    """A model config's depth as a worker registers it: routing compares it."""
    return layers is None or (isinstance(layers, int) and not isinstance(layers, bool)
                              and 1 <= layers <= 100_000)


def check_progress(progress) -> str | None:
    """A heartbeat's progress: {phase: name, attempt: n, failed: [error classes]}."""
    if not isinstance(progress, dict) or set(progress) - {"phase", "attempt", "failed"}:
        return "`progress` must be an object with phase, attempt and failed only"
    phase, attempt, failed = progress.get("phase"), progress.get("attempt", 1), \
        progress.get("failed", [])
    if phase is not None and not (isinstance(phase, str) and 0 < len(phase) <= 40):
        return "`progress.phase` must be a phase name (1-40 characters)"
    if not (isinstance(attempt, int) and not isinstance(attempt, bool) and 1 <= attempt <= 100):
        return "`progress.attempt` must be a whole number from 1 to 100"
    if not (isinstance(failed, list) and len(failed) <= 100 and all(
            isinstance(c, str) and len(c) <= 20 for c in failed)):
        return "`progress.failed` must be a list of error classes"
    return None


def _refusal(who, body) -> tuple[int, dict] | None:
    """The answer to a request that no endpoint takes: no valid token, no
    worker name, another worker's token, or a malformed key; else None."""
    if who is None:
        return 401, {"error": "missing, invalid or revoked worker token: send "
                              "`Authorization: Bearer <token>` (TRIALBOT_WORKER_TOKEN or "
                              "one from `trialbot worker-token create NAME`)"}
    if not isinstance(body, dict):
        return 400, {"error": "the request body must be a JSON object"}
    worker = body.get("worker")
    if not isinstance(worker, str) or not worker.strip() or len(worker) > 100:
        return 400, {"error": "`worker` must be the worker's name (1-100 characters)"}
    if who is not tokens.SHARED and worker != who:
        return 403, {"error": f"this token belongs to worker {who!r}, but the request "
                              f"names worker {worker!r}; a worker token acts only as "
                              "its own worker"}
    key = body.get("key")
    if key is not None and not (isinstance(key, str) and 0 < len(key) <= 100):
        return 400, {"error": "`key` must be the request's idempotency key (1-100 "
                              "characters, the same on each retry of one request)"}
    return None


class WorkerApi:
    def __init__(self, ctx, token: str):
        self.ctx, self.token = ctx, token

    body_limit = staticmethod(body_limit)

    def handle(self, path: str, auth: str | None, body) -> tuple[int, dict | None]:
        """(status, reply). A write the database refuses (locked past
        API_WRITE_WAIT, full, read-only) is a 503 that names why: the worker
        retries a 5xx, with the same idempotency key."""
        with self.ctx.store.write_wait(API_WRITE_WAIT):
            try:
                return self._handle(path, auth, body)
            except Unwritable as exc:
                log.warning("worker API %s: the database refused a write (%s)", path, exc)
                return 503, {"error": f"the bot's database cannot be written now ({exc}); the "
                                      "request was not completed: retry it later",
                             "reason": exc.reason.value}

    def _handle(self, path: str, auth: str | None, body) -> tuple[int, dict | None]:
        # Read per request: a token revoked by `trialbot worker-token revoke`
        # (another process) is refused from the next request on.
        who = tokens.caller(auth, self.token, self.ctx.store.active_token_hashes())
        refused = _refusal(who, body)
        if refused:
            return refused
        worker, key = body["worker"], body.get("key")
        if path == "/api/ping":
            return 200, self.ping(worker, who)
        if path == "/api/workers/register":
            return self.register(worker, body)
        if path == "/api/lease":
            return self.lease(worker, body, key)
        m = ACCOUNTING_PATH.fullmatch(path)
        if m:
            return self.accounting(int(m.group(1)), worker, body, key)
        m = CHECK_PATH.fullmatch(path)
        if m:
            return self.check(int(m.group(1)), worker, body, key)
        m = RELEASE_PATH.fullmatch(path)
        if m:
            return self.release(int(m.group(1)), worker, body, key)
        if path == "/api/workers/stopping":
            return self.stopping(worker, body)
        m = JOB_PATH.fullmatch(path)
        if not m:
            return 404, {"error": f"no such endpoint: {path}"}
        return self.job_request(int(m.group(1)), m.group(2), worker, body, key)

    def register(self, worker: str, body: dict) -> tuple[int, dict | None]:
        info = {} if body.get("info") is None else body["info"]  # [] is no object
        if not isinstance(info, dict):
            return 400, {"error": "`info` must be a JSON object"}
        problem = check_info(info)
        if problem:
            return 400, {"error": problem}
        self.ctx.store.upsert_worker(worker, info)
        return 200, {"worker": worker, "heartbeat": self.ctx.queue.heartbeat_seconds}

    def lease(self, worker: str, body: dict, key: str | None) -> tuple[int, dict | None]:
        wait = body.get("wait", 0)
        if (not isinstance(wait, (int, float)) or isinstance(wait, bool)
                or not 0 <= wait <= MAX_WAIT):
            return 400, {"error": f"`wait` must be seconds from 0 to {MAX_WAIT}"}
        idle = {} if body.get("idle") is None else body["idle"]
        if not (isinstance(idle, dict) and all(
                DAY.fullmatch(str(k)) and isinstance(v, (int, float))
                and not isinstance(v, bool) and 0 <= v <= 86400
                for k, v in idle.items())):
            return 400, {"error": "`idle` must map days (YYYY-MM-DD) to seconds (0-86400)"}
        if not workers.known(self.ctx.store, worker):
            return 409, {"error": f"unknown worker {worker!r}: register first"}
        if self.ctx.queue.stopped(worker, key):  # its worker stopped before this poll came
            return 204, None
        # A key seen before: the request came again (its answer was lost); its idle
        # is counted already, and the lease it got is given again while held.
        again = not self.ctx.store.add_idle(worker, idle, key)
        job = (again and self.ctx.queue.held(worker, key)) or self.ctx.queue.lease(worker,
                                                                                   wait, key)
        if job is None or self._left(worker, key, job):
            return 204, None
        if job.get("kind") == "slurm-accounting":
            return 200, {"kind": job["kind"], "id": job["id"], "request": f"A{job['id']}",
                         "lease": job["lease"], "jobs": job["jobs"],
                         "heartbeat": self.ctx.queue.heartbeat_seconds}
        if job.get("kind") == "compat-check":
            return 200, {"kind": job["kind"], "id": job["id"], "request": f"C{job['id']}",
                         "lease": job["lease"], "repo": job["repo"],
                         "commit": job["commit_asked"]}
        return 200, {"id": job["id"], "trial": job["trial"], "lease": job["lease"],
                     "spec": job["spec"], "attempt": job["attempts"],
                     "heartbeat": self.ctx.queue.heartbeat_seconds}

    def job_request(self, job_id: int, action: str, worker: str, body: dict,
                    key: str | None) -> tuple[int, dict | None]:
        """A leased trial's heartbeat or report."""
        lease = body.get("lease")
        if not isinstance(lease, str) or not 0 < len(lease) <= 100:
            return 400, {"error": "`lease` must be the lease id returned by /api/lease"}
        try:
            if action == "heartbeat":
                progress = {} if body.get("progress") is None else body["progress"]
                problem = check_progress(progress)
                if problem:
                    return 400, {"error": problem}
                return 200, {"cancel": self.ctx.queue.heartbeat(job_id, worker, lease, progress)}
            return self.report(job_id, worker, lease, body, key)
        except LeaseLost as exc:
            job = self.ctx.store.job(job_id)
            if job is None:
                return 404, {"error": f"there is no job {job_id} (T{job_id})"}
            if action == "report" and self._answered(worker, key, "report", job=job_id):
                return 200, {"trial": job["trial"], "status": job["status"]}
            return 409, {"error": str(exc)}

    def report(self, job_id: int, worker: str, lease: str, body: dict,
               key: str | None) -> tuple[int, dict | None]:
        if not isinstance(body.get("report"), dict):
            return 400, {"error": "`report` must be a JSON object (a trialbot.trial/1 "
                                  "report)"}
        held = self.ctx.store.job(job_id)  # its spec: the kind of each parameter
        problems = reports.validate(body.get("report"), held and held["spec"])
        if problems:
            return 400, {"error": "invalid report: " + "; ".join(problems)}
        job = self.ctx.queue.finish(job_id, worker, lease, body["report"], key)
        return 200, {"trial": job["trial"], "status": job["status"]}

    def unsent(self, path: str, body, reply: dict | None) -> None:
        """The answer to `path` could not be written (the worker hung up): a trial
        or a check it leased goes back to the queue. A Slurm accounting request
        waits out its lease (seconds of sacct, asked again)."""
        if path != "/api/lease" or not reply or not isinstance(body, dict):
            return
        worker = body.get("worker")
        if reply.get("kind") == "compat-check":
            if self.ctx.store.give_back_check(reply["id"], worker, reply["lease"]):
                log.warning("lease of %s not delivered to %s (the connection was gone); "
                            "queued again", reply["request"], worker)
        elif "trial" in reply and self.ctx.queue.unsent(worker, reply["id"], reply["lease"]):
            log.warning("lease of %s not delivered to %s (the connection was gone); "
                        "queued again", reply["trial"], worker)

    def ping(self, worker: str, who) -> dict:
        """The token is accepted for `worker`: the bot's clock and lease timings, so a
        worker can measure its clock's offset. Reads only; registers nothing."""
        return {"worker": worker, "token": "shared" if who is tokens.SHARED else "worker",
                "time": time.time(), "registered": workers.known(self.ctx.store, worker),
                "lease": self.ctx.queue.lease_seconds,
                "heartbeat": self.ctx.queue.heartbeat_seconds}

    def _answered(self, worker: str, key: str | None, kind: str, **ref) -> bool:
        """The request with this key was applied before (its answer was lost)."""
        first = self.ctx.store.worker_request(worker, key) if key else None
        return first is not None and first["kind"] == kind and all(first[k] == v
                                                              for k, v in ref.items())

    def accounting(self, req_id: int, worker: str, body: dict,
                   key: str | None = None) -> tuple[int, dict | None]:
        return self._plan_answer(
            f"A{req_id}", "result", worker, body, key, req_id, slurmactual.check,
            lambda lease, result: service.answer_slurm(self.ctx, req_id, worker, lease, result,
                                                       key),
            lambda: self.ctx.store.slurm_actual(req_id),
            f"there is no Slurm accounting request A{req_id}")

    def check(self, check_id: int, worker: str, body: dict,
              key: str | None = None) -> tuple[int, dict | None]:
        return self._plan_answer(
            f"C{check_id}", "check", worker, body, key, check_id, checks.problem,
            lambda lease, result: checks.answer(self.ctx, check_id, worker, lease, result, key),
            lambda: self.ctx.store.check(check_id),
            f"there is no compatibility check C{check_id}")

    def _plan_answer(self, name: str, kind: str, worker: str, body: dict, key: str | None,
                     req_id: int, problem: Callable[[object], str | None],
                     apply: Callable[[str, dict], dict], stored: Callable[[], dict | None],
                     missing: str) -> tuple[int, dict | None]:
        """A worker's answer to a plan's request (Slurm accounting, a check): applied
        under its lease; one sent again after its reply was lost is 200 again."""
        lease = body.get("lease")
        if not isinstance(lease, str) or not 0 < len(lease) <= 100:
            return 400, {"error": "`lease` must be the lease id returned by /api/lease"}
        wrong = problem(body.get("result"))
        if wrong:
            return 400, {"error": wrong}
        try:
            done = apply(lease, body["result"])
        except LeaseLost as exc:
            found = stored()
            if found is None:
                return 404, {"error": missing}
            if not self._answered(worker, key, kind, request=req_id):
                return 409, {"error": str(exc)}
            done = found
        return 200, {"request": name, "status": done["status"]}

    def release(self, job_id: int, worker: str, body: dict,
                key: str | None = None) -> tuple[int, dict | None]:
        lease, reason = body.get("lease"), body.get("reason")
        if not isinstance(lease, str) or not 0 < len(lease) <= 100:
            return 400, {"error": "`lease` must be the lease id returned by /api/lease"}
        if not (isinstance(reason, str) and REASON.fullmatch(reason)):
            return 400, {"error": BAD_REASON}
        try:
            job = self.ctx.queue.release(job_id, worker, lease, reason, key)
        except LeaseLost as exc:
            job = self.ctx.store.job(job_id)
            if job is None:
                return 404, {"error": f"there is no job {job_id} (T{job_id})"}
            # a cancelled trial's release ended it, kept as a report
            if not any(self._answered(worker, key, kind, job=job_id)
                       for kind in ("release", "report")):
                return 409, {"error": str(exc)}
        log.info("%s handed back by %s (%s): %s", job["trial"], worker, reason, job["status"])
        return 200, {"trial": job["trial"], "status": job["status"]}

    def stopping(self, worker: str, body: dict) -> tuple[int, dict | None]:
        """The worker stops and left its long poll `poll` open here: the poll
        answers nothing at once, and a trial it got meanwhile goes back to the
        queue (_left)."""
        reason, poll = body.get("reason"), body.get("poll")
        if not (isinstance(reason, str) and REASON.fullmatch(reason)):
            return 400, {"error": BAD_REASON}
        if not (isinstance(poll, str) and 0 < len(poll) <= 100):
            return 400, {"error": "`poll` must be the key of the lease request the worker "
                                  "left open (1-100 characters)"}
        self.ctx.queue.leave(worker, poll, reason)
        log.info("worker %s stopping (%s)", worker, reason)
        return 200, {"worker": worker}

    def _left(self, worker: str, key: str | None, job: dict) -> bool:
        """The worker of this long poll said it stopped: nobody will read the
        answer, so the trial or check it got is handed back at once. (A Slurm
        accounting request waits out its lease: seconds of sacct, asked again.)"""
        reason = self.ctx.queue.stopped(worker, key)
        if reason is None or job.get("kind") == "slurm-accounting":
            return False
        if job.get("kind") == "compat-check":
            if self.ctx.store.give_back_check(job["id"], worker, job["lease"]):
                log.warning("lease of C%s not delivered to %s (it stopped: %s); queued "
                            "again", job["id"], worker, reason)
            return True
        try:
            self.ctx.queue.release(job["id"], worker, job["lease"], reason)
            log.warning("lease of %s not delivered to %s (it stopped: %s); queued again",
                        job["trial"], worker, reason)
        except LeaseLost:  # a cancelled trial ended instead; or taken back already
            pass
        return True
