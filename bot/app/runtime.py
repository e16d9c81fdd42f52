"""Wiring shared by `serve` and `console`: store, queue, outbox, HTTP server,
the digest schedule, the one Context the commands read, and optionally a
worker agent in this process (the single-box default)."""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

from bot import access
from bot.context import Context
from bot.delivery.outbox import ALERT_MINUTES, Courier
from bot.digest.scheduler import Digests
from bot.http.metrics import Watch
from bot.http.server import Server
from bot.http.workerapi import WorkerApi
from bot.slack.later import ACK_WRITE_SECONDS
from bot.store import Store
from bot.trials import workers
from bot.trials.queue import LEASE_SECONDS, JobQueue
from worker.i18n import _

if TYPE_CHECKING:
    from worker.api import Agent

# Seconds the embedded worker has to kill its trial and hand it back (worker/agent.py
# TELL, and the child's death) before the bot stops without it.
AGENT_STOP = 5


def context(store: Store, queue: JobQueue | None = None, policy: access.Policy | None = None,
            admins: frozenset[str] = frozenset(), notify=lambda: None,
            outbox_alert_minutes: float = ALERT_MINUTES) -> Context:
    """A Context over `store` with its own queue unless one is given, and no
    Slack: scripts and tests (anyone may run; `admins` are admins), and the
    runtime below with the configured policy."""
    queue = queue or JobQueue(store, on_message=notify)
    return Context(store=store, queue=queue, notify=notify,
                   policy=policy or access.Policy(run_everyone=True, admins=admins),
                   outbox_alert_minutes=outbox_alert_minutes)


HEALTH_WRITE_SECONDS = 1.0  # /healthz's probe write waits at most this for the database


class Runtime:
    ctx: Context  # set in __init__, after the courier that forgets a refused channel through it

    def __init__(self, db: str, worker_token: str, transport, host: str = "127.0.0.1",
                 port: int = 0, lease_seconds: float = LEASE_SECONDS,
                 policy: access.Policy | None = None, metrics_token: str | None = None,
                 outbox_alert_minutes: float = ALERT_MINUTES):
        self.store = Store(db)
        self.outbox = Courier(self.store, transport,
                              update_interval=getattr(transport, "update_interval", None),
                              on_refused=lambda channel: self.ctx.channels.forget(channel),
                              alert_minutes=outbox_alert_minutes)
        self.queue = JobQueue(self.store, on_message=self.outbox.wake,
                              lease_seconds=lease_seconds)
        # Unconfigured, nobody may run (access.Policy()): the commands say how to set it.
        ctx = context(self.store, self.queue, policy or access.Policy(),
                      notify=self.outbox.wake, outbox_alert_minutes=outbox_alert_minutes)
        # The schedule posts through a Context without itself; `/plan digest` re-reads it.
        self.digests = Digests(ctx)
        self.ctx = dataclasses.replace(ctx, digests=self.digests)
        self.worker_token = worker_token
        self.server = Server((host, port), WorkerApi(self.ctx, worker_token),
                             health=self.health, borrow=self.store.borrowed,
                             slack_budget=functools.partial(self.store.budget,
                                                            ACK_WRITE_SECONDS),
                             watch=Watch(self.store, worker_token, metrics_token,
                                         self.slack_errors))
        self.agent: Agent | None = None
        self.agent_thread: threading.Thread | None = None

    def slack_errors(self) -> dict[str, int]:
        """Failed Slack calls by class: the outbox's and the Bolt app's, added."""
        total = Counter(self.outbox.slack_errors())
        total.update(self.ctx.slack.failures())
        return dict(total)

    def health(self) -> dict:
        """Open to anyone: a count, never the workers' names (GET /api/workers has
        them); and whether the database can be written now (a write undone), with
        the reason when not: then not ok, and /healthz answers 503."""
        out = {"workers_online": len(workers.online(self.store))}
        problem = self.store.probe_write(HEALTH_WRITE_SECONDS)
        if problem is None:
            return dict(out, database={"writable": True})
        return dict(out, ok=False, database={"writable": False, "reason": problem.reason.value,
                                             "detail": problem.detail})

    def start(self) -> None:
        self.outbox.start()
        threading.Thread(target=self.server.serve_forever, daemon=True,
                         name="http").start()
        threading.Thread(target=self._reap, daemon=True, name="lease-reaper").start()
        self.digests.start()  # posts weeks missed while the bot was down

    def _reap(self) -> None:
        """Expired leases are also noticed when no worker is asking for work."""
        while not self.outbox.stopping.wait(10):
            try:
                self.queue.reap()
            except Exception:  # noqa: BLE001 - a locked database now is fine next time
                pass

    def start_local_worker(self, name: str | None = None, user=None, recipes=None):
        """A worker agent in a thread of this process, talking to our own API
        over loopback HTTP like any other worker; trials still run in children,
        as `user` (a worker.trialuser.TrialUser: --trial-user) when given.
        `recipes`: its recipe file's (worker/offer.py), and it registers what
        hf-* models it can build as trialbot-worker does."""
        from worker.api import Agent, Client, attempts, machine, offer
        if os.geteuid() == 0 and user is None:
            # read at the console (TRIALBOT_LANG), like trialbot-worker's warnings
            logging.getLogger("trialbot").warning(_(
                "the local worker runs trials as root: a trial can read this bot's Slack "
                "tokens, worker token and database; give --trial-user USER, run the bot as "
                "an unprivileged user, or run trials on a trialbot-worker with --trial-user"))
        host, port = self.server.server_address[:2]
        host = "127.0.0.1" if host in ("0.0.0.0", "") else str(host)  # AF_INET: a str
        # Registered like trialbot-worker's: its GPUs and CPU cores, transformers and
        # its configs, its recipes (`/trial workers`).
        self.agent = Agent(Client(f"http://{host}:{port}", self.worker_token),
                           name or f"{socket.gethostname()}-local",
                           info=dict(machine.info(), hf=offer.hf()), recipes=recipes,
                           executor=functools.partial(attempts.run, user=user) if user else None)
        self.agent_thread = threading.Thread(target=self.agent.serve_forever, daemon=True,
                                             name="agent")
        self.agent_thread.start()
        deadline = time.monotonic() + 10  # so the first reply can already name it
        while (self.agent.name not in workers.online(self.store)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        return self.agent

    def stop(self, reason: str = "shutdown") -> None:
        """Stop taking work and finish what is in flight: the embedded worker
        hands its trial back (`reason`, e.g. SIGTERM, on the card) over the
        API, so before the server stops accepting; the outbox starts no more
        Slack calls and completes the ones it is making (marked sent)."""
        if self.agent and self.agent_thread:  # started together
            self.agent.stop(reason)
            self.agent_thread.join(timeout=AGENT_STOP)
        self.outbox.stop()
        self.digests.stop()
        self.server.shutdown()
        self.server.server_close()
        if self.outbox.is_alive():
            self.outbox.join(timeout=30)
