"""The worker agent against a real bot runtime on loopback."""
import io
import threading
import time
from datetime import datetime, timezone

from bot.outbox import ConsoleTransport
from bot.runtime import Runtime
from worker import agent as agent_mod
from worker.agent import Agent, split_by_day
from worker.client import Client
from worker.spec import parse


def test_a_worker_side_error_still_ends_the_job_with_a_report(tmp_path, monkeypatch):
    rt = Runtime(str(tmp_path / "a.db"), "tok", ConsoleTransport(io.StringIO(), True, str(tmp_path)))
    rt.start()

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(agent_mod.attempts, "run", broken)
    a = Agent(Client(rt.server.url, "tok"), "w1")
    threading.Thread(target=a.serve_forever, daemon=True).start()
    try:
        job = rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
        deadline = time.monotonic() + 30
        while rt.store.job(job["id"])["status"] != "failed":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = rt.store.job(job["id"])["report"]
        assert r["error"]["class"] == "crash" and "No space left" in r["error"]["message"]
        assert a.current is None  # the heartbeat for that job stopped
    finally:
        a.stop()
        rt.stop()


def test_idle_is_split_at_utc_midnight():
    midnight = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()
    assert split_by_day(midnight - 30, midnight + 15) == {"2026-11-30": 30.0,
                                                          "2026-12-01": 15.0}
