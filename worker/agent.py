"""The worker agent: register, long-poll for a lease, run the trial in a
child process while heartbeating, post the report, repeat."""
from __future__ import annotations

import logging
import math
import threading
import time
from datetime import datetime, timedelta, timezone

from worker import attempts, compat, compatcheck, redact
from worker import report as reports
from worker.client import ApiError, CertError, new_key
from worker.ports import BotApi
from worker.signals import GRACE, TELL
from worker.spec import TrialSpec, resolve

log = logging.getLogger("trialbot.worker")

LEASE_WAIT = 20  # seconds the server holds a lease request open


def split_by_day(start: float, end: float) -> dict[str, float]:
    """Seconds of [start, end) per UTC day, so idle time lands on the right day."""
    out: dict[str, float] = {}
    while start < end:
        day = datetime.fromtimestamp(start, timezone.utc)
        midnight = (day.replace(hour=0, minute=0, second=0, microsecond=0)
                    + timedelta(days=1)).timestamp()
        stop = min(end, midnight)
        out[day.strftime("%Y-%m-%d")] = out.get(day.strftime("%Y-%m-%d"), 0.0) + stop - start
        start = stop
    return out


class Agent:
    def __init__(self, client: BotApi, name: str, info: dict | None = None, recipes=None,
                 executor=None):
        self.client, self.name, self.info = client, name, dict(info or {})
        self.recipes = recipes or {}
        # How a trial runs: attempts.run here, or e.g. the Slurm executor (same call).
        self.executor = executor or attempts.run
        # Any child may see the worker's environment, so every recipe's secrets are masked.
        self.secrets = redact.secret_values(client.token, *(
            v for r in self.recipes.values() for v in r.secrets()))
        self.info["recipes"] = [r.workload().to_dict() for r in self.recipes.values()]
        self.info["compat"] = compat.report.SCHEMA  # it answers `/plan NAME check`
        self.stopping = threading.Event()  # take no new trial
        self.halted = threading.Event()  # the running trial is killed and handed back
        self.reason = "shutdown"  # why, as the bot's card shows it: a signal's name
        self.tell_by = math.inf  # after a stop, retries to reach the bot end here (monotonic)
        self.lock = threading.Lock()  # a stop and a trial's start, one at a time
        # Idle: seconds this worker was ready with nothing to run, per UTC day,
        # measured here and sent with the next lease request.
        self.idle: dict[str, float] = {}
        self.current: threading.Event | None = None  # cancel event of the running trial

    def serve_forever(self) -> None:
        """Lease and run trials until stopped; returns once the trial that ran
        at the stop is reported or handed back."""
        if self.stopping.is_set():  # stopped before it started
            return
        self._retry(lambda: self.client.register(self.name, self.info), "register")
        log.info("worker %s registered with %s", self.name, self.client.server)
        while not self.stopping.is_set():
            ready = time.time()
            job = self._next()
            for day, seconds in split_by_day(ready, time.time()).items():
                self.idle[day] = self.idle.get(day, 0.0) + seconds
            if job and self.stopping.is_set():  # leased as the stop came: never started
                self._hand_back(job)
            elif job and job.get("kind") == "slurm-accounting":
                self.run_accounting(job)
            elif job and job.get("kind") == "compat-check":
                self.run_check(job)
            elif job:
                self.run_job(job)

    def _next(self) -> dict | None:
        """The next lease, or None. The long poll (up to LEASE_WAIT) runs on a
        thread of its own, so a stop does not wait out its 20 s: the poll is
        left and the bot told, which answers it at once (a trial it would still
        get goes back to the queue). A trial the poll got anyway, its answer
        already on the wire, is returned, and serve_forever hands it back before
        the process exits; only a bot silent for TELL seconds leaves the poll's
        thread to hand it back, if the process lives that long."""
        key = new_key()  # one per lease request, the same on its retries
        got, done, mine = {}, threading.Event(), threading.Lock()

        def poll():
            try:
                job = self._retry(lambda: self._lease(key), "lease")
            except Exception as exc:  # noqa: BLE001 - a 4xx or CertError: serve_forever's
                job, got["error"] = None, exc
            with mine:
                abandoned = got.get("abandoned", False)
                got["job"] = job
                done.set()
            if abandoned and job:
                self._hand_back(job)

        threading.Thread(target=poll, daemon=True, name="lease-poll").start()
        while not done.wait(0.1):
            if self.stopping.is_set():
                self._say_stopping(key)
                done.wait(max(0.0, min(self.tell_by, time.monotonic() + TELL)
                              - time.monotonic()))
                with mine:
                    got["abandoned"] = not done.is_set()
                    return None if got["abandoned"] else got["job"]
        if "error" in got:
            raise got["error"]
        return got["job"]

    def _lease(self, key: str | None = None):
        sent = dict(self.idle)  # unchanged across retries: the bot counts it once per key
        try:
            job = self.client.lease(self.name, LEASE_WAIT, sent, key)
        except ApiError as exc:
            if exc.status != 409:
                raise
            # The bot does not know us (a new database): register again.
            self.client.register(self.name, self.info)
            return None
        for day, seconds in sent.items():  # the bot has them now
            self.idle[day] -= seconds
            if self.idle[day] < 1e-9:
                del self.idle[day]
        return job

    def drain(self, reason: str, grace: float = GRACE) -> None:
        """Stop taking trials (the first SIGTERM or Ctrl-C): the running trial
        has `grace` seconds to end and be reported as usual; then stop() kills
        it and hands it back to the bot's queue."""
        with self.lock:
            if self.stopping.is_set():
                return
            self.reason = reason
            self.tell_by = time.monotonic() + grace + TELL
            self.stopping.set()
        timer = threading.Timer(grace, self.stop, args=(reason,))
        timer.daemon = True
        timer.start()

    def stop(self, reason: str = "shutdown") -> None:
        """Stop now: the running trial's child is killed and the trial handed
        back to the bot's queue (released: no attempt counted), within TELL
        seconds; an idle worker leaves its long poll."""
        with self.lock:
            if not self.stopping.is_set():
                self.reason = reason
            self.tell_by = min(self.tell_by, time.monotonic() + TELL)
            self.stopping.set()
            self.halted.set()
            if self.current:
                self.current.set()

    def run_job(self, job: dict) -> None:
        log.info("leased %s: %s", job["trial"], job["spec"])
        cancel = threading.Event()
        with self.lock:
            self.current = cancel
            if self.halted.is_set():
                cancel.set()
        done = threading.Event()
        progress: dict = {}  # attempt, phase, failed tries: sent with each heartbeat
        beating = threading.Thread(target=self._heartbeat, args=(job, cancel, done, progress),
                                   daemon=True)
        beating.start()
        try:
            spec = resolve(TrialSpec.from_dict(job["spec"]), self.recipes)
            report = self.executor(spec, cancel, self.recipes, progress)
        except Exception as exc:  # noqa: BLE001 - a worker-side failure still ends the job
            log.exception("%s: the worker failed around the trial", job["trial"])
            report = reports.fail(reports.new_report(job["spec"].get("workload", "?"),
                                                     job["spec"].get("params", {})),
                                  "crash", f"worker-side error: {exc!r}", "setup")
        finally:
            done.set()  # stops the heartbeat thread
            self.current = None
        if self.halted.is_set() and (report.get("error") or {}).get("class") == "cancelled":
            self._hand_back(job)  # killed by the stop: it runs again elsewhere
            return
        report["trial"], report["worker"] = job["trial"], self.name
        report = redact.walk(report, self.secrets)  # output tails may print a token
        key = new_key()
        try:
            if self._retry(lambda: self.client.report(self.name, job, report, key,
                                                      self._timeout()), "report", final=True):
                log.info("%s reported: %s", job["trial"], report["status"])
            else:  # a stop's deadline passed with the bot unreachable
                log.warning("%s: the report could not reach the bot before the stop; its "
                            "lease expires and it re-runs", job["trial"])
        except ApiError as exc:
            if exc.status in (400, 413):  # malformed or too big: still end the job, plainly
                bad = reports.fail(reports.new_report(report.get("workload", "?"), {}), "crash",
                                   f"the worker's report was refused: {exc}", None)
                bad["trial"], bad["worker"] = job["trial"], self.name
                plain = new_key()  # another request than the refused one
                self._retry(lambda: self.client.report(self.name, job, bad, plain,
                                                       self._timeout()), "report", final=True)
            else:  # 409: the lease went to another attempt
                log.warning("%s report refused: %s", job["trial"], exc)

    def _hand_back(self, job: dict) -> None:
        """The trial did not end here and goes back to the bot's queue, no attempt
        counted (a Slurm accounting request waits out its lease: seconds of sacct)."""
        if job.get("kind") in ("slurm-accounting", "compat-check"):
            log.warning("%s left at the stop; its lease expires and it is asked again",
                        job["request"])
            return
        key = new_key()
        try:
            if self._retry(lambda: self.client.release(self.name, job, self.reason, key,
                                                       self._timeout()), "release", final=True):
                log.info("%s handed back to the queue (%s)", job["trial"], self.reason)
            else:
                log.warning("%s: the bot could not be told; its lease expires and it re-runs",
                            job["trial"])
        except (ApiError, CertError) as exc:  # 409: cancelled, expired or taken over meanwhile
            log.warning("%s hand-back refused: %s", job["trial"], exc)

    def _say_stopping(self, poll: str) -> None:
        """One try, briefly: the bot then hands back what the left poll would get."""
        try:
            self.client.stopping(self.name, self.reason, poll, self._timeout(cap=2))
        except (ApiError, CertError, OSError) as exc:
            log.warning("could not tell the bot that %s stops: %s", self.name, exc)

    def _timeout(self, cap: float = 30) -> float:
        """An HTTP call's timeout: after a stop, what is left until tell_by."""
        return max(0.5, min(cap, self.tell_by - time.monotonic()))

    def run_accounting(self, job: dict) -> None:
        """sacct for the bot (it is not on the cluster): seconds, well inside the
        lease, so no heartbeat; a worker that dies here lets the lease expire
        and the request is leased again."""
        from worker import sacct
        log.info("leased %s: sacct for jobs %s", job["request"], ",".join(job["jobs"]))
        result = sacct.query(job["jobs"])
        key = new_key()
        try:
            self._retry(lambda: self.client.accounting(self.name, job, result, key),
                        "accounting", final=True)
            log.info("%s answered: %s", job["request"],
                     "error" if "error" in result else f"{len(result['records'])} jobs")
        except ApiError as exc:  # 409: the lease went to another worker; 400: a bug here
            log.warning("%s answer refused: %s", job["request"], exc)

    def run_check(self, job: dict) -> None:
        """A repository fetched and read for the bot, never run: the fetch is
        bounded well inside the lease, so no heartbeat; a worker that dies here
        lets the lease expire and the check is leased again."""
        log.info("leased %s: check %s at %s", job["request"], job["repo"],
                 job.get("commit") or "HEAD")
        result = compatcheck.run(job["repo"], job.get("commit"))
        key = new_key()
        try:
            self._retry(lambda: self.client.check_result(self.name, job, result, key),
                        "check", final=True)
            log.info("%s answered: %s", job["request"],
                     result["error"]["why"] if "error" in result else result["commit"][:12])
        except ApiError as exc:  # 409: the lease went to another worker; 400: a bug here
            log.warning("%s answer refused: %s", job["request"], exc)

    def _heartbeat(self, job: dict, cancel: threading.Event, done: threading.Event,
                   progress: dict) -> None:
        while not done.wait(job.get("heartbeat", 10)):
            try:
                reply = self.client.heartbeat(self.name, job, dict(progress))
                if reply and reply.get("cancel"):
                    log.info("%s: cancelled from Slack; killing the child", job["trial"])
                    cancel.set()  # the launcher kills the child's process group
            except ApiError as exc:
                if exc.status == 409:
                    log.warning("%s: lease lost (%s); stopping the trial", job["trial"], exc)
                    cancel.set()
            except (OSError, CertError) as exc:  # the lease loop stops on a CertError
                log.warning("heartbeat failed: %s", exc)

    def _retry(self, call, what: str, final: bool = False):
        """Retry while the server is unreachable or failing (5xx), with backoff;
        a 4xx answer is final and raised. A stop ends the retries (None); a
        `final` call (a report, a hand-back) goes on until the stop's tell_by."""
        delay = 1.0
        while True:
            try:
                return call()
            except ApiError as exc:
                if exc.status < 500:
                    raise
                log.warning("%s: %s; retrying in %.0f s", what, exc, delay)
            except OSError as exc:
                log.warning("%s: server unreachable (%s); retrying in %.0f s", what, exc, delay)
            if not self._pause(delay, final):
                return None
            delay = min(delay * 2, 30)

    def _pause(self, delay: float, final: bool) -> bool:
        """Wait `delay` before a retry; False to give up instead."""
        if not final:
            return not self.stopping.wait(delay)
        if not self.stopping.is_set():
            self.stopping.wait(delay)  # a stop meanwhile: retry at once, then until tell_by
            return True
        left = self.tell_by - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        return True
