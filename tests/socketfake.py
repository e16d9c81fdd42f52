"""Slack's end of Socket Mode, on loopback: the WebSocket that
`apps.connections.open` points the bot to (FakeSlack.socket). It speaks the
protocol of Slack's Socket Mode docs: a `hello` on connect; envelopes
`{envelope_id, type, payload, accepts_response_payload}`; the app's ack
`{envelope_id, payload?}`; a `disconnect` (`refresh_requested`) asking the app
to reconnect. The framing is the `websockets` library's."""
from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import serve


@dataclass
class Ack:
    envelope_id: str
    payload: dict | None  # what the app answered with, if anything
    received: float  # time.monotonic() when it arrived
    seconds: float  # from sending the envelope to its ack


class SocketFake:
    def __init__(self):
        self.connections: list = []  # every connection, in the order the app opened them
        self.ended: list = []  # the connections closed since, by either side
        self.acks: list[Ack] = []  # every ack, in order (a redelivery is acked again)
        self.sent: dict[str, float] = {}  # envelope_id -> when it was last sent
        self.lock = threading.Condition()
        self._tickets = itertools.count(1)
        self.server = serve(self._session, "127.0.0.1", 0)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self) -> str:
        """A fresh URL per `apps.connections.open`, as Slack's carry a ticket."""
        port = self.server.socket.getsockname()[1]
        return f"ws://127.0.0.1:{port}/link/?ticket={next(self._tickets)}"

    def _session(self, ws) -> None:
        with self.lock:
            self.connections.append(ws)
            n = len(self.connections)
            self.lock.notify_all()
        ws.send(json.dumps({"type": "hello", "num_connections": n,
                            "connection_info": {"app_id": "A1"},
                            "debug_info": {"host": "fake", "approximate_connection_time": 18060}}))
        try:
            for raw in ws:
                received = time.monotonic()
                message = json.loads(raw)
                if "envelope_id" not in message:
                    continue
                with self.lock:
                    sent = self.sent.get(message["envelope_id"], received)
                    self.acks.append(Ack(message["envelope_id"], message.get("payload"),
                                         received, received - sent))
                    self.lock.notify_all()
        except ConnectionClosed:
            pass
        with self.lock:
            self.ended.append(ws)
            self.lock.notify_all()

    def wait_connections(self, n: int, timeout: float = 20) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: len(self.connections) >= n, timeout):
                raise AssertionError(f"expected {n} Socket Mode connections, "
                                     f"got {len(self.connections)}")

    def wait_ended(self, ws, timeout: float = 10) -> None:
        with self.lock:
            if not self.lock.wait_for(lambda: ws in self.ended, timeout):
                raise AssertionError("the old Socket Mode connection is still open")

    def deliver(self, kind: str, payload: dict, envelope_id: str | None = None,
                accepts_response_payload: bool = True) -> str:
        """Sends one envelope on the newest connection; returns its envelope_id."""
        envelope_id = envelope_id or str(uuid.uuid4())
        with self.lock:
            ws = self.connections[-1]
            self.sent[envelope_id] = time.monotonic()
        ws.send(json.dumps({"envelope_id": envelope_id, "type": kind, "payload": payload,
                            "accepts_response_payload": accepts_response_payload}))
        return envelope_id

    def wait_ack(self, envelope_id: str, nth: int = 1, timeout: float = 10) -> Ack:
        """The nth ack of `envelope_id` (a redelivered envelope is acked again)."""
        def mine():
            return [a for a in self.acks if a.envelope_id == envelope_id]
        with self.lock:
            if not self.lock.wait_for(lambda: len(mine()) >= nth, timeout):
                raise AssertionError(f"no ack #{nth} for envelope {envelope_id}: {self.acks}")
            return mine()[nth - 1]

    def drop(self) -> None:
        """Closes the newest connection, as when Slack or the network cuts it."""
        self.connections[-1].close()

    def refresh(self) -> None:
        """Slack's notice that this connection will end: the app should open another."""
        self.connections[-1].send(json.dumps({"type": "disconnect",
                                              "reason": "refresh_requested",
                                              "debug_info": {"host": "fake"}}))

    def close(self) -> None:
        self.server.shutdown()
