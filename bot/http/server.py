"""The HTTP server: Slack's requests at /slack/events (HTTP mode), the worker
API under /api/, /healthz (open to anyone, says no names) and, behind a token,
/metrics and GET /api/workers — one port, both modes.

A thread per request (ThreadingHTTPServer): Bolt's `dispatch` is synchronous,
so calling it on a single event loop would serialise every slash command;
here a slow request never holds up another, and a long-poll lease holds only
its own thread.
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from worker.api import shape

log = logging.getLogger("trialbot.http")

# Slack requests Bolt handles at once; the others wait their turn, in order. One
# process runs Python one thread at a time: 100 at once take turns at every
# SQLite call and finish together, late (scripts/bench_ack.py: p99 248 ms against
# 145 ms with 1 or 2; 2 lets one thread's SQLite work overlap another's Python).
SLACK_AT_ONCE = 2
MAX_BODY = 16 * 2**20  # Slack's requests; the worker API has its own, smaller limits
DRAIN_MAX = 64 * 2**20  # an oversized body up to this is read and dropped, so the
# client gets its 413 (not a connection reset mid-send); over it, we hang up


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # the default 5 resets bursts of slash commands

    def __init__(self, address, worker_api, bolt_app=None, health=lambda: {}, watch=None,
                 borrow=contextlib.nullcontext, slack_budget=contextlib.nullcontext):
        self.worker_api, self.bolt_app, self.health = worker_api, bolt_app, health
        self.watch = watch  # bot/http/metrics.Watch: /metrics and GET /api/workers
        # A request's thread lives for one connection: its database connection is
        # borrowed from the store's pool for the request (Store.borrowed).
        self.borrow = borrow
        self.dispatching = threading.BoundedSemaphore(SLACK_AT_ONCE)
        # A Slack request's writes wait at most the ack's budget counted from its
        # arrival (Store.budget): one that waited its turn here has that much less,
        # so a locked database answers a burst in time, not turn by turn.
        self.slack_budget = slack_budget
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        assert isinstance(host, str)  # bound by getsockname, which gives a str host
        return f"http://{host}:{port}"


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle or stalled client does not hold a thread for ever
    # A response's headers and body leave in one write (handle_one_request flushes
    # after each request): unbuffered, they were two, and the second waited.
    wbufsize = 2**16

    def log_message(self, fmt, *args) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def handle_one_request(self) -> None:
        with self.server.borrow():
            super().handle_one_request()

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        watch = self.server.watch
        if path == "/healthz":  # 503 when something the bot needs fails (the database)
            health = {"ok": True, **self.server.health()}
            self._json(200 if health["ok"] else 503, health)
        elif watch is not None and path in ("/metrics", "/api/workers"):
            refused = watch.refusal(self.headers.get("Authorization"))
            if refused:
                self._json(401, {"error": refused})
            elif path == "/api/workers":
                self._json(200, watch.workers())
            else:
                self._send(200, watch.metrics(), watch.content_type)
        else:
            self._json(404, {"error": f"no such endpoint: GET {self.path}"})

    def do_POST(self) -> None:
        try:
            self._post()
        except Exception:  # noqa: BLE001 - answer, log, keep serving
            log.exception("POST %s failed", self.path)
            self._json(500, {"error": "internal error in trialbot; the bot's log has details"})

    def _post(self) -> None:
        path, _, query = self.path.partition("?")
        try:
            length = int(self.headers.get("Content-Length") or 0)
            assert length >= 0
        except (ValueError, AssertionError):
            self.close_connection = True  # the unread body must not be taken as a request
            self._json(400, {"error": "Content-Length must be a byte count"})
            return
        limit = (self.server.worker_api.body_limit(path) if path.startswith("/api/")
                 else MAX_BODY)
        if length > limit:
            self._drop_body(length)
            self._json(413, {"error": f"request body of {length} bytes is over the "
                                      f"{limit}-byte limit for {path}; nothing was changed"})
            return
        raw = self.rfile.read(length)
        if path == "/slack/events":
            self._slack(raw, query)
        elif path.startswith("/api/"):
            try:
                body = shape.loads(raw or b"{}")  # no NaN or Infinity: json_extract chokes
            except shape.Absurd as exc:
                self._json(400, {"error": f"the request body is refused: {exc}"[:300]})
                return
            except (ValueError, RecursionError) as exc:  # bad UTF-8 is a ValueError too
                self._json(400, {"error": f"the request body is not JSON: {exc}"[:300]})
                return
            status, reply = self.server.worker_api.handle(
                path, self.headers.get("Authorization"), body)
            try:
                self._json(status, reply)
                self.wfile.flush()  # here: a worker that hung up is found now, not later
            except (BrokenPipeError, ConnectionResetError):  # the worker hung up, mid long-poll
                self.close_connection = True
                self.server.worker_api.unsent(path, body, reply)
        else:
            self._json(404, {"error": f"no such endpoint: POST {path}"})

    def _drop_body(self, length: int) -> None:
        if length > DRAIN_MAX:
            self.close_connection = True  # the unread body must not be taken as a request
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 2**16))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _slack(self, raw: bytes, query: str) -> None:
        app = self.server.bolt_app
        if app is None:
            self._json(404, {"error": "Slack HTTP mode is off (Socket Mode or console)"})
            return
        from slack_bolt.request import BoltRequest
        grouped: dict[str, list[str]] = {}
        for key, value in self.headers.items():  # one pass (get_all per key reads them all)
            grouped.setdefault(key.lower(), []).append(value)
        headers: dict[str, str | Sequence[str]] = dict(grouped)  # the type BoltRequest takes
        request = BoltRequest(body=raw.decode("utf-8", "replace"), query=query, headers=headers)
        with self.server.slack_budget(), self.server.dispatching:
            resp = app.dispatch(request)
        body = resp.body.encode() if isinstance(resp.body, str) else json.dumps(resp.body).encode()
        self.send_response(resp.status)
        for key, values in resp.headers.items():
            if key.lower() == "content-length":
                continue
            for value in values:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, body: dict | None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self._send(status, data, "application/json" if body is not None else None)

    def _send(self, status: int, data: bytes, content_type: str | None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
