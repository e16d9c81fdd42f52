"""Stand-ins at the network edge we cannot reach: a local HTTP server playing
the Slack Web API (records every call, as bolt-python's own tests do), and
slash-command requests signed exactly as Slack signs them."""
from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeSlack(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.fail_next: list[int] = []  # HTTP statuses to answer before succeeding
        self.outage: tuple[float, list[int]] | None = None  # (until, statuses to cycle)
        self.errors: dict[str, list[str]] = {}  # method -> Slack error codes (ok: false) to answer
        self.uploads: dict[str, bytes] = {}  # file id -> bytes, files_upload_v2's second step
        self.answers: dict[str, dict] = {}  # method -> fields added to its ok answer
        # Per channel: conversations.info's answer (fields over a member channel's,
        # or an error code), an error every post/edit/file there gets, a delay.
        self.channel_info: dict[str, dict | str] = {}
        self.channel_errors: dict[str, str] = {}
        self.delays: dict[str, float] = {}
        self.received: list[str] = []  # methods as they arrive, before any delay
        self.expired_urls: set[str] = set()  # response_url paths answered 404 expired_url
        self.scopes: str | None = None  # the x-oauth-scopes header of every answer, as Slack's
        self.socket_mode = None  # a socketfake.SocketFake: apps.connections.open answers its URL
        self.lock = threading.Lock()
        self.counter = 0
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/api/"

    def calls_of(self, method: str) -> list[dict]:
        with self.lock:
            return [args for m, args in self.calls if m == method]

    def posts(self) -> list[dict]:
        with self.lock:
            return [args for method, args in self.calls if method == "chat.postMessage"]

    def wait_posts(self, n: int, timeout: float = 60) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            posts = self.posts()
            if len(posts) >= n:
                return posts
            time.sleep(0.05)
        raise AssertionError(f"expected {n} chat.postMessage calls, got {self.posts()}")

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client (a bot stopped mid-call) hung up before its answer
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: FakeSlack

    def log_message(self, *args):
        pass

    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/upload/"):  # the upload URL files.getUploadURLExternal gave
            with self.server.lock:
                self.server.uploads[self.path.rsplit("/", 1)[-1]] = data
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")
            return
        raw = data.decode()
        if self.headers.get("Content-Type", "").startswith("application/json"):
            args = json.loads(raw or "{}")
        else:
            args = {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}
        method = self.path.rsplit("/", 1)[-1]
        channel = args.get("channel") or args.get("channel_id")
        if method in self.server.expired_urls:  # a spent response_url, as Slack answers it
            with self.server.lock:
                self.server.calls.append(("expired", {"url": method}))
            self._answer(404, b"expired_url", "text/plain")
            return
        refused = self.server.channel_errors.get(channel)
        if refused and method in ("chat.postMessage", "chat.update",
                                  "files.completeUploadExternal"):
            with self.server.lock:
                self.server.calls.append(("refused", dict(args, _method=method, _error=refused)))
            self._answer(200, json.dumps({"ok": False, "error": refused}).encode())
            return
        if method == "conversations.info":
            info = self.server.channel_info.get(channel, {})
            if isinstance(info, str):
                with self.server.lock:
                    self.server.calls.append((method, dict(args, _error=info)))
                self._answer(200, json.dumps({"ok": False, "error": info}).encode())
                return
        with self.server.lock:
            self.server.received.append(method)
        time.sleep(self.server.delays.get(channel, 0))
        with self.server.lock:
            outage = self.server.outage
            if outage and time.monotonic() < outage[0]:  # an outage: answer its errors in turn
                self.server.fail_next.append(outage[1][len(self.server.calls) % len(outage[1])])
                self.server.calls.append(("failed", {"status": self.server.fail_next[-1]}))
            if self.server.fail_next:
                status = self.server.fail_next.pop(0)
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            queued = self.server.errors.get(method)
            if queued:
                body = json.dumps({"ok": False, "error": queued.pop(0)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.server.counter += 1
            ts = f"1700000000.{self.server.counter:06d}"
            self.server.calls.append((method, dict(args, _ts=ts)))
        answer = {"ok": True, "ts": ts, "channel": args.get("channel"),
                  **self.server.answers.get(method, {})}
        if method == "conversations.info":
            answer["channel"] = {"id": channel, "is_channel": True, "is_member": True,
                                 "is_archived": False, **self.server.channel_info.get(channel, {})}
        elif method == "conversations.open":  # the bot's direct-message channel with a user
            answer["channel"] = {"id": "D" + args.get("users", "")}
        elif method == "apps.connections.open" and self.server.socket_mode:
            answer["url"] = self.server.socket_mode.url()
        if method == "files.getUploadURLExternal":
            file_id = f"F{self.server.counter}"
            answer.update(file_id=file_id, upload_url=f"http://127.0.0.1:"
                          f"{self.server.server_address[1]}/upload/{file_id}")
        elif method == "files.completeUploadExternal":
            answer["files"] = [{"id": f["id"]} for f in json.loads(args["files"])]
        self._answer(200, json.dumps(answer).encode())

    def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        if self.server.scopes is not None:
            self.send_header("x-oauth-scopes", self.server.scopes)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


_triggers = itertools.count(1)


def slash_body(text: str, command: str = "/trial", user: str = "U1", channel: str = "C1",
               trigger_id: str | None = None,
               response_url: str = "http://127.0.0.1:9/unused") -> str:
    """A slash command's form body; each call is a new invocation with its own
    trigger_id, as in Slack (a retry re-sends the same body)."""
    trigger_id = trigger_id or f"{next(_triggers)}.{time.monotonic_ns()}"
    return urllib.parse.urlencode({
        "token": "legacy", "team_id": "T0", "team_domain": "lab", "channel_id": channel,
        "channel_name": "gpu", "user_id": user, "user_name": "ada", "command": command,
        "text": text, "api_app_id": "A1", "response_url": response_url,
        "trigger_id": trigger_id})


def signed_headers(secret: str, body: str, timestamp: int | None = None) -> dict:
    """Slack's scheme: v0=HMAC-SHA256(secret, "v0:{timestamp}:{body}")."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    sig = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={sig}"}


def post(url: str, body: str, headers: dict) -> tuple[int, dict | str]:
    req = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read().decode()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw
