"""`GET /metrics`: the bot's health in the Prometheus text format. A collector
reads the store at each scrape, so every value is what is stored now; the
registry is the Runtime's own (no process-wide state: two bots in one test
process do not mix)."""
from __future__ import annotations

import hmac
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from bot.http import tokens
from bot.ports import ApiStore, Clock
from bot.store import Reason
from bot.trials import workers
from bot.trials.job import ENDED, WAITING

# always listed, 0 or not (held: waiting for Slack to say the bot may post in its channel)
STATES = WAITING + ENDED
PROBE_SECONDS = 1.0  # the scrape's probe write waits at most this for the database
WAIT_BOUNDS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0)  # seconds
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StoreCollector:
    def __init__(self, store: ApiStore, slack_errors: Callable[[], dict] = dict,
                 clock: Clock = time.time):
        self.store, self.slack_errors, self.clock = store, slack_errors, clock

    def collect(self):
        now = self.clock()
        counts = self.store.job_counts()
        jobs = GaugeMetricFamily("trialbot_jobs", "Jobs in each state, as stored.",
                                 labels=["state"])
        for state in sorted(set(STATES) | set(counts)):
            jobs.add_metric([state], counts.get(state, 0))
        yield jobs
        oldest = self.store.oldest_queued()
        yield GaugeMetricFamily("trialbot_queue_oldest_seconds",
                                "Age of the longest-waiting queued job (0: none queued).",
                                value=max(0.0, now - oldest) if oldest else 0.0)
        under, total, count = self.store.queue_waits(WAIT_BOUNDS)
        buckets = [(repr(b), n) for b, n in zip(WAIT_BOUNDS, under)] + [("+Inf", count)]
        yield HistogramMetricFamily(
            "trialbot_queue_wait_seconds",
            "Seconds from queued to leased of every job leased (its latest lease).",
            buckets=buckets, sum_value=total)
        yield CounterMetricFamily("trialbot_lease_expiries",
                                  "Leases that expired (no heartbeat): leased again, or a job's "
                                  "last, which ended it.",
                                  value=self.store.lease_expiries())
        backlog = self.store.outbox_backlog()
        yield GaugeMetricFamily("trialbot_outbox_unsent", "Messages stored and not yet sent.",
                                value=backlog["count"])
        first = backlog["oldest"]
        yield GaugeMetricFamily("trialbot_outbox_oldest_unsent_seconds",
                                "Age of the oldest unsent message (0: none waits).",
                                value=max(0.0, now - first["created"]) if first else 0.0)
        errors = CounterMetricFamily("trialbot_slack_errors",
                                     "Failed Slack API calls since the bot started, by class "
                                     "(Slack's error code, ratelimited, http_NNN or network).",
                                     labels=["class"])
        for name, n in sorted(self.slack_errors().items()):
            errors.add_metric([name], n)
        yield errors
        seen = self.store.workers(seen_within=workers.ONLINE_SECONDS)
        yield GaugeMetricFamily("trialbot_workers_online",
                                f"Workers seen within {workers.ONLINE_SECONDS} s.",
                                value=len(seen))
        yield GaugeMetricFamily("trialbot_workers_idle",
                                "Online workers with no job leased.",
                                value=sum(1 for w in seen if not w["job"]))
        yield from self.writes()

    def writes(self):
        """Can the database be written now (a write undone, as /healthz does), and
        the writes it refused since start, by reason."""
        problem = self.store.probe_write(PROBE_SECONDS)
        yield GaugeMetricFamily("trialbot_db_writable",
                                "1 when a write to the database succeeds now (a write undone, "
                                "at each scrape), 0 when it is locked, full or read-only.",
                                value=0 if problem else 1)
        failures = self.store.write_state().failures
        failed = CounterMetricFamily("trialbot_db_write_failures",
                                     "Writes the database refused since the bot started (each "
                                     "answered as not done), by reason: locked, full, "
                                     "read-only or io-error.", labels=["reason"])
        for reason in Reason:
            failed.add_metric([reason.value], failures.get(reason, 0))
        yield failed


def registry(store: ApiStore, slack_errors: Callable[[], dict] = dict) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StoreCollector(store, slack_errors))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)


UNAUTHORIZED = ("/metrics and GET /api/workers need `Authorization: Bearer <token>` with "
                "TRIALBOT_WORKER_TOKEN, or TRIALBOT_METRICS_TOKEN where it is set (a "
                "per-worker token is not enough); this request had {what}")


class Watch:
    """What an operator may read with a token: /metrics and the workers' names."""

    content_type = CONTENT_TYPE

    def __init__(self, store: ApiStore, worker_token: str, metrics_token: str | None = None,
                 slack_errors: Callable[[], dict] = dict):
        self.store = store
        self.accepted = [t for t in (worker_token, metrics_token) if t]
        self.registry = registry(store, slack_errors)

    def refusal(self, header: str | None) -> str | None:
        """None when the header carries an accepted token, else what is wrong."""
        given = tokens.bearer(header)
        if not given:
            return UNAUTHORIZED.format(what="no Bearer token")
        # Each compared in constant time, all of them every time.
        ok = [hmac.compare_digest(given.encode(), t.encode()) for t in self.accepted]
        return None if any(ok) else UNAUTHORIZED.format(what="a token that is not one of these")

    def metrics(self) -> bytes:
        return render(self.registry)

    def workers(self) -> dict:
        now = time.time()
        return {"workers": [
            {"name": w["name"], "online": now - (w["last_seen"] or 0) <= workers.ONLINE_SECONDS,
             "job": f"T{w['job']}" if w["job"] else None, "last_seen": w["last_seen"]}
            for w in self.store.workers()]}
