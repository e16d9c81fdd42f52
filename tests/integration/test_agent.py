"""The worker agent against a real bot runtime on loopback."""
import contextlib
import io
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime
from worker import agent as agent_mod
from worker import report as reports
from worker.agent import Agent, split_by_day
from worker.client import Client
from worker.spec import parse


@contextlib.contextmanager
def one_trial(tmp_path, monkeypatch, run):
    """A bot and an agent whose trials are `run(spec, ...)`: yields the bot, the
    agent and the job of one llm-infer trial once it has ended."""
    rt = Runtime(str(tmp_path / "a.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)))
    rt.start()
    monkeypatch.setattr(agent_mod.attempts, "run", run)
    a = Agent(Client(rt.server.url, "tok"), "w1")
    threading.Thread(target=a.serve_forever, daemon=True).start()
    try:
        job = rt.queue.submit(parse(["llm-infer", "processes=1"]), "llm-infer", "U1", "C1")
        deadline = time.monotonic() + 30
        while rt.store.job(job["id"])["status"] not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield rt, a, rt.store.job(job["id"])
    finally:
        a.stop()
        rt.stop()


def test_a_worker_side_error_still_ends_the_job_with_a_report(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")
    with one_trial(tmp_path, monkeypatch, broken) as (rt, a, job):
        r = job["report"]
        assert r["error"]["class"] == "crash" and "No space left" in r["error"]["message"]
        assert a.current is None  # the heartbeat for that job stopped


def test_a_report_the_bot_refuses_ends_the_job_as_a_plain_failure_naming_the_field(
        tmp_path, monkeypatch):
    """A worker with a bug that measures a negative peak: the bot refuses the
    report (400, the field named) and the worker posts a plain failed one, so the
    job still ends, and the negative figure is stored and posted nowhere."""
    def buggy(spec, *args, **kwargs):
        r = reports.new_report(spec.workload, spec.params)
        r.update(status="ok", seconds=1.0)
        r["memory"]["host_rss_peak"] = -5 * 2**30
        return r
    with one_trial(tmp_path, monkeypatch, buggy) as (rt, a, job):
        r = job["report"]
        assert r["status"] == "failed" and r["error"]["class"] == "crash"
        assert "the worker's report was refused" in r["error"]["message"]
        assert "`report.memory.host_rss_peak` is -5368709120" in r["error"]["message"]
        assert r["memory"]["host_rss_peak"] is None
        assert not any("-5 GiB" in m["text"] for m in rt.store.db["outbox"].rows)


def test_idle_is_split_at_utc_midnight():
    midnight = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()
    assert split_by_day(midnight - 30, midnight + 15) == {"2026-11-30": 30.0,
                                                          "2026-12-01": 15.0}


class LosingProxy(ThreadingHTTPServer):
    """Between the worker and the bot: forwards every request, and drops the
    answer to the first lease that leased a job (the connection closes before
    it is sent back), as a network fault loses an answer."""
    daemon_threads = True

    def __init__(self, target: str, hold_lease_until: threading.Event | None = None):
        self.target, self.dropped = target, 0
        # with an event: a lease's answer is held until it is set, and not dropped
        self.hold = hold_lease_until
        self.stopping_seen = threading.Event()
        super().__init__(("127.0.0.1", 0), _Forward)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        req = urllib.request.Request(self.server.target + self.path, data=body, method="POST",
                                     headers={"Authorization": self.headers["Authorization"],
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, answer = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, answer = exc.code, exc.read()
        if self.path == "/api/workers/stopping":
            self.server.stopping_seen.set()
        if self.path == "/api/lease" and status == 200 and self.server.hold is not None:
            self.server.hold.wait(30)  # on the wire as the worker stops
        elif self.path == "/api/lease" and status == 200 and not self.server.dropped:
            self.server.dropped += 1
            self.close_connection = True  # the bot leased it; the worker never hears
            return
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def test_a_lease_whose_answer_was_lost_is_retried_with_its_key_and_runs(tmp_path):
    rt = Runtime(str(tmp_path / "k.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)))
    rt.start()
    proxy = LosingProxy(rt.server.url)
    a = Agent(Client(proxy.url, "tok"), "w1")
    a.idle = {"2026-11-30": 10.0}  # measured before: sent with the first lease request
    try:
        job = rt.queue.submit(parse(["llm-infer", "gen=2", "repeats=1", "stability=0",
                                     "processes=1", "layers=1", "hidden=64", "heads=2",
                                     "kv_heads=1", "vocab=256"]), "llm-infer", "U1", "C1")
        threading.Thread(target=a.serve_forever, daemon=True).start()
        deadline = time.monotonic() + 60
        while rt.store.job(job["id"])["status"] != "done":
            assert time.monotonic() < deadline, rt.store.job(job["id"])
            time.sleep(0.05)
        assert proxy.dropped == 1
        assert rt.store.job(job["id"])["attempts"] == 1  # the same lease, not one left to expire
        assert [r["seconds"] for r in rt.store.idle("w1") if r["day"] == "2026-11-30"] == [10.0]
    finally:
        a.stop()
        proxy.shutdown()
        rt.stop()


LONG = ["llm-infer", "gen=2", "repeats=2000", "run_cap=60", "stability=0", "layers=1",
        "hidden=64", "heads=2", "kv_heads=1", "vocab=256", "malloc=glibc", "processes=1"]  # ~30 s


def _serving(tmp_path, name: str):
    rt = Runtime(str(tmp_path / f"{name}.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                       str(tmp_path)))
    rt.start()
    a = Agent(Client(rt.server.url, "tok"), "w1")
    serving = threading.Thread(target=a.serve_forever, daemon=True)
    serving.start()
    return rt, a, serving


def _until(check, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_trial_that_outlasts_the_grace_is_killed_and_handed_back(tmp_path):
    rt, a, serving = _serving(tmp_path, "g")
    try:
        job = rt.queue.submit(parse(LONG), "llm-infer", "U1", "C1")
        _until(lambda: rt.store.job(job["id"])["status"] == "running" and a.current)
        t0 = time.monotonic()
        a.drain("SIGTERM", grace=0.5)
        serving.join(10)
        assert not serving.is_alive()
        assert 0.5 <= time.monotonic() - t0 < 5  # the grace, then the kill and the hand-back
        row = rt.store.job(job["id"])
        assert (row["status"], row["worker"], row["attempts"]) == ("queued", None, 0)
        assert rt.store.attempts(job["id"]) == []
    finally:
        a.stop()
        rt.stop()


def test_an_idle_worker_stops_at_once_and_its_left_poll_gets_no_trial(tmp_path):
    rt, a, serving = _serving(tmp_path, "i")
    try:
        _until(lambda: rt.store.workers())
        time.sleep(0.5)  # in its long poll (20 s)
        t0 = time.monotonic()
        a.drain("SIGTERM")
        serving.join(5)
        assert not serving.is_alive() and time.monotonic() - t0 < 1
        job = rt.queue.submit(parse(LONG), "llm-infer", "U1", "C1")
        time.sleep(1.5)  # the bot's side of the poll looks every second
        row = rt.store.job(job["id"])
        assert (row["status"], row["attempts"]) == ("queued", 0)
    finally:
        rt.stop()


def test_a_lease_on_the_wire_as_the_worker_stops_is_handed_back_before_it_returns(tmp_path):
    """The bot leased a trial to the long poll just before the worker said it is
    stopping; the answer arrives after. serve_forever (then the process) ends
    only once that trial is handed back, not left to a lease that expires."""
    rt = Runtime(str(tmp_path / "w.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)))
    rt.start()
    on_the_wire = threading.Event()
    proxy = LosingProxy(rt.server.url, hold_lease_until=on_the_wire)
    a = Agent(Client(proxy.url, "tok"), "w1")
    serving = threading.Thread(target=a.serve_forever, daemon=True)
    try:
        serving.start()
        _until(lambda: rt.store.workers())
        job = rt.queue.submit(parse(LONG), "llm-infer", "U1", "C1")
        _until(lambda: rt.store.job(job["id"])["status"] == "running")  # leased, answer held
        a.drain("SIGTERM")
        _until(proxy.stopping_seen.is_set, 5)
        on_the_wire.set()  # the lease's answer arrives after "stopping"
        serving.join(10)
        assert not serving.is_alive()
        row = rt.store.job(job["id"])  # when serve_forever returned: the process may exit
        assert (row["status"], row["worker"], row["attempts"]) == ("queued", None, 0), row
    finally:
        a.stop()
        proxy.shutdown()
        rt.stop()


def test_the_bot_stopping_hands_its_local_workers_trial_back(tmp_path):
    rt = Runtime(str(tmp_path / "l.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)))
    rt.start()
    agent = rt.start_local_worker("local")
    job = rt.queue.submit(parse(LONG), "llm-infer", "U1", "C1")
    _until(lambda: agent.current is not None)
    t0 = time.monotonic()
    rt.stop("SIGTERM")
    assert time.monotonic() - t0 < 5
    row = rt.store.job(job["id"])
    assert (row["status"], row["worker"], row["attempts"]) == ("queued", None, 0)
