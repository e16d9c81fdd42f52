"""HTTP client for the bot's worker API (stdlib only: a GPU box needs no
extra HTTP package). Every call is outbound: the box needs no open port."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def new_key() -> str:
    """An idempotency key for one logical request: sent with each of its retries,
    so the bot applies a request whose answer was lost once."""
    return uuid.uuid4().hex


class Client:
    def __init__(self, server: str, token: str):
        self.server = server.rstrip("/")
        self.token = token

    def call(self, path: str, body: dict, timeout: float = 30) -> dict | None:
        """POST JSON; the decoded reply, or None for 204. Raises ApiError for
        an HTTP error, OSError when the server cannot be reached."""
        req = urllib.request.Request(
            self.server + path, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                if resp.status == 204:
                    return None
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise ApiError(exc.code, message) from None

    def register(self, name: str, info: dict) -> dict:
        return self.call("/api/workers/register", {"worker": name, "info": info})

    def lease(self, name: str, wait: float, idle: dict | None = None,
              key: str | None = None) -> dict | None:
        """Long-poll for a job; `idle` reports seconds ready with nothing to run, per day."""
        return self.call("/api/lease", _keyed({"worker": name, "wait": wait,
                                               "idle": idle or {}}, key), timeout=wait + 30)

    def heartbeat(self, name: str, job: dict, progress: dict | None = None) -> dict:
        """Keeps the lease; `progress` (attempt, phase, failed tries) is shown in
        Slack. The reply says whether the trial was cancelled."""
        return self.call(f"/api/jobs/{job['id']}/heartbeat",
                         {"worker": name, "lease": job["lease"], "progress": progress or {}})

    def accounting(self, name: str, job: dict, result: dict, key: str | None = None) -> dict:
        """A Slurm accounting request's answer: sacct's records or its error."""
        return self.call(f"/api/accounting/{job['id']}/result",
                         _keyed({"worker": name, "lease": job["lease"], "result": result}, key))

    def report(self, name: str, job: dict, report: dict, key: str | None = None) -> dict:
        return self.call(f"/api/jobs/{job['id']}/report",
                         _keyed({"worker": name, "lease": job["lease"], "report": report}, key))


def _keyed(body: dict, key: str | None) -> dict:
    return dict(body, key=key) if key else body
