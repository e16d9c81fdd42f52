"""The worker agent: register, long-poll for a lease, run the trial in a
child process while heartbeating, post the report, repeat."""
from __future__ import annotations

import logging
import threading
import time

from worker import launcher
from worker.client import ApiError, Client
from worker.spec import TrialSpec

log = logging.getLogger("trialbot.worker")

LEASE_WAIT = 20  # seconds the server holds a lease request open


class Agent:
    def __init__(self, client: Client, name: str, info: dict | None = None):
        self.client, self.name, self.info = client, name, info or {}
        self.stopping = threading.Event()
        self.current: threading.Event | None = None  # cancel event of the running trial

    def serve_forever(self) -> None:
        self._retry(lambda: self.client.register(self.name, self.info), "register")
        log.info("worker %s registered with %s", self.name, self.client.server)
        while not self.stopping.is_set():
            job = self._retry(lambda: self.client.lease(self.name, LEASE_WAIT), "lease")
            if job:
                self.run_job(job)

    def stop(self) -> None:
        """Stop serving; a running trial's child is killed and not reported, so
        its lease expires and the job runs again on the next worker."""
        self.stopping.set()
        if self.current:
            self.current.set()

    def run_job(self, job: dict) -> None:
        log.info("leased %s: %s", job["trial"], job["spec"])
        cancel = self.current = threading.Event()
        beating = threading.Thread(target=self._heartbeat, args=(job, cancel), daemon=True)
        beating.start()
        report = launcher.run_trial(TrialSpec.from_dict(job["spec"]), cancel)
        cancel.set()  # stops the heartbeat thread
        self.current = None
        if self.stopping.is_set():
            log.warning("%s abandoned at shutdown; its lease will expire and it re-runs",
                        job["trial"])
            return
        report["trial"], report["worker"] = job["trial"], self.name
        try:
            self._retry(lambda: self.client.report(self.name, job, report), "report")
            log.info("%s reported: %s", job["trial"], report["status"])
        except ApiError as exc:  # 409: the lease went to another attempt
            log.warning("%s report refused: %s", job["trial"], exc)

    def _heartbeat(self, job: dict, done: threading.Event) -> None:
        while not done.wait(job.get("heartbeat", 10)):
            try:
                reply = self.client.heartbeat(self.name, job)
                if reply and reply.get("cancel"):
                    done.set()  # the launcher sees the same event and kills the child
            except ApiError as exc:
                if exc.status == 409:
                    log.warning("%s: lease lost (%s); stopping the trial", job["trial"], exc)
                    done.set()
            except OSError as exc:
                log.warning("heartbeat failed: %s", exc)

    def _retry(self, call, what: str):
        """Retry while the server is unreachable or failing (5xx), with backoff;
        a 4xx answer is final and raised."""
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
            if self.stopping.wait(delay):
                return None
            delay = min(delay * 2, 30)
