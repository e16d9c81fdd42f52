"""HTTP client for the bot's worker API (stdlib only: a GPU box needs no
extra HTTP package). Every call is outbound: the box needs no open port."""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

from worker.i18n import _


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class CertError(Exception):
    """The bot's TLS certificate could not be verified: final, not retried, since
    waiting does not make a certificate trusted."""


def server_problem(server: str | None) -> str | None:
    """What is wrong with a --server URL, or None: http:// or https:// and a host."""
    url = urllib.parse.urlparse(server or "")
    if url.scheme not in ("http", "https") or not url.hostname:
        return _("--server {server} is not an http:// or https:// URL; write it as "
                 "https://HOST or http://HOST:PORT, e.g. http://localhost:3000 through an "
                 "SSH tunnel", server=repr(server))
    return None


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificates and host names verified: against `ca_file` alone when given
    (a private CA, a self-signed bot), else the system's store (SSL_CERT_FILE
    honoured). Raises OSError or ssl.SSLError for a file that is not a CA bundle."""
    return ssl.create_default_context(cafile=ca_file)


def ca_problem(ca_file: str) -> str | None:
    """What is wrong with --ca-file as a CA bundle, or None."""
    try:
        tls_context(ca_file)
    except (OSError, ssl.SSLError) as exc:
        return _("--ca-file {file} is not a readable CA bundle ({why}); give the PEM file of "
                 "the CA that signed the bot's certificate", file=ca_file,
                 why=getattr(exc, "strerror", None) or exc)
    return None


def new_key() -> str:
    """An idempotency key for one logical request: sent with each of its retries,
    so the bot applies a request whose answer was lost once."""
    return uuid.uuid4().hex


class Client:
    def __init__(self, server: str, token: str, ca_file: str | None = None):
        self.server = server.rstrip("/")
        self.token = token
        self.ca_file = ca_file
        https = self.server.startswith("https://")
        self.context = tls_context(ca_file) if https else None

    def call(self, path: str, body: dict, timeout: float = 30) -> dict | None:
        """POST JSON; the decoded reply, or None for 204. Raises ApiError for
        an HTTP error, OSError when the server cannot be reached."""
        req = urllib.request.Request(
            self.server + path, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.context) as resp:
                if resp.status == 204:
                    return None
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise ApiError(exc.code, message) from None
        except (urllib.error.URLError, ssl.SSLCertVerificationError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise CertError(self._cert_message(reason)) from None
            raise

    def _cert_message(self, reason: ssl.SSLCertVerificationError) -> str:
        host = urllib.parse.urlparse(self.server).hostname
        why = reason.verify_message or str(reason)
        if self.ca_file:
            return _("the certificate of {host} is not trusted by --ca-file {file} ({why}); "
                     "give the CA that signed the bot's certificate, or check that the URL "
                     "names the host the certificate is for", host=host, file=self.ca_file,
                     why=why)
        return _("the certificate of {host} could not be verified ({why}); if the bot's "
                 "certificate is self-signed or from your own CA, give that CA with --ca-file "
                 "FILE (or env TRIALBOT_CA_FILE)", host=host, why=why)

    def register(self, name: str, info: dict) -> dict | None:
        return self.call("/api/workers/register", {"worker": name, "info": info})

    def lease(self, name: str, wait: float, idle: dict | None = None,
              key: str | None = None) -> dict | None:
        """Long-poll for a job; `idle` reports seconds ready with nothing to run, per day."""
        return self.call("/api/lease", _keyed({"worker": name, "wait": wait,
                                               "idle": idle or {}}, key), timeout=wait + 30)

    def heartbeat(self, name: str, job: dict, progress: dict | None = None) -> dict | None:
        """Keeps the lease; `progress` (attempt, phase, failed tries) is shown in
        Slack. The reply says whether the trial was cancelled."""
        return self.call(f"/api/jobs/{job['id']}/heartbeat",
                         {"worker": name, "lease": job["lease"], "progress": progress or {}})

    def accounting(self, name: str, job: dict, result: dict, key: str | None = None) -> dict | None:
        """A Slurm accounting request's answer: sacct's records or its error."""
        return self.call(f"/api/accounting/{job['id']}/result",
                         _keyed({"worker": name, "lease": job["lease"], "result": result}, key))

    def check_result(self, name: str, job: dict, result: dict,
                     key: str | None = None) -> dict | None:
        """A compatibility check's answer: the report read, or why not."""
        return self.call(f"/api/checks/{job['id']}/result",
                         _keyed({"worker": name, "lease": job["lease"], "result": result}, key))

    def report(self, name: str, job: dict, report: Mapping[str, Any], key: str | None = None,
               timeout: float = 30) -> dict | None:
        return self.call(f"/api/jobs/{job['id']}/report",
                         _keyed({"worker": name, "lease": job["lease"], "report": report}, key),
                         timeout)

    def release(self, name: str, job: dict, reason: str, key: str | None = None,
                timeout: float = 30) -> dict | None:
        """Hand the trial back as this worker stops: the bot queues it again at
        once and counts no attempt."""
        return self.call(f"/api/jobs/{job['id']}/release",
                         _keyed({"worker": name, "lease": job["lease"], "reason": reason}, key),
                         timeout)

    def stopping(self, name: str, reason: str, poll: str, timeout: float = 30) -> dict | None:
        """This worker stops and left its long poll (the lease request with key
        `poll`) open: a trial that poll would still get goes back to the queue."""
        return self.call("/api/workers/stopping",
                         {"worker": name, "reason": reason, "poll": poll}, timeout)


def _keyed(body: dict, key: str | None) -> dict:
    return dict(body, key=key) if key else body
