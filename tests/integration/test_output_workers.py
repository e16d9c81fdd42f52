"""A worker's machine info, read on this box and registered by the local worker of a
real runtime (the rest of issue 19's output: tests/unit/test_output.py)."""
import os

from bot.trials import workerlist
from worker import machine


def test_a_worker_registered_with_machine_info_shows_its_cpu_cores():
    info = machine.info()
    assert info["cpus"] == os.cpu_count()
    w = {"name": "box-local", "info": info, "last_seen": 100.0, "job": None,
         "job_started": None, "last_finished": None, "registered": 90.0, "idle_seconds": 0.0}
    text = workerlist.text([w], 100.0, 60.0)
    assert "? CPU cores" not in text
    assert (f"no GPU ({os.cpu_count()} CPU cores)" in text) == (not info["gpus"])


def test_the_local_worker_registers_its_machine_info(tmp_path):
    from bot.app.console import ConsoleTransport, files_dir
    from bot.app.runtime import Runtime
    rt = Runtime(str(tmp_path / "w.db"), "token-x", ConsoleTransport(open(os.devnull, "w"), False),
                 port=0)
    rt.start()
    try:
        agent = rt.start_local_worker("box-local")
        (row,) = [w for w in rt.store.workers() if w["name"] == "box-local"]
        assert row["info"]["cpus"] == os.cpu_count() and agent.info["host"]
    finally:
        rt.stop()
    assert files_dir(str(tmp_path / "w.db")) == str(tmp_path / "trialbot-files")
