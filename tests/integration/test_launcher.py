"""Trials in real child processes on this CPU: every outcome is a report."""
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

from worker import launcher, report
from worker.spec import TrialSpec, parse

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(batch=2, prompt=16, gen=4, repeats=3, stability=0, hidden=64, heads=2, kv_heads=1,
             vocab=512, processes=1)


def small(**over):
    return parse(["llm-infer"] + [f"{k}={v}" for k, v in {**SMALL, **over}.items()])


def test_ok_trial_has_every_phase_rss_and_latency():
    r = launcher.run_trial(small())
    assert r["schema"] == report.SCHEMA and r["status"] == "ok", r["error"]
    assert [p["name"] for p in r["phases"]] == ["setup", "weights", "data", "warmup", "run"]
    for p in r["phases"]:
        assert p["end"] >= p["start"] and p["seconds"] >= 0
    m = r["memory"]
    assert m["host_rss_peak"] > 50 * 2**20  # torch alone is more than this
    if m["host_rss_peak_kernel"] is not None:  # None when this (pytest) process is larger
        assert m["host_rss_peak"] == m["host_rss_peak_kernel"]  # it ran alone: the exact peak
    else:
        assert "worker's own peak RSS at spawn" in m["method"]["host_rss_peak_kernel"]
    assert m["peak_allocated"] is None and "no CUDA" in m["method"]["peak_allocated"]
    assert "NVML" in m["method"]["device_used_peak"]
    assert r["latency"]["count"] == 3 and r["latency"]["p50"] <= r["latency"]["p99"]
    assert r["throughput"]["value"] > 0 and r["throughput"]["unit"] == "tokens/s"
    assert r["scale"] == {"batch": 2, "prompt_tokens": 16, "gen_tokens": 4,
                          "tokens_per_request": 40, "requests": 3, "tokens": 120}
    assert r["env"]["device"] == "cpu" and r["env"]["torch"] and r["env"]["python"]
    assert report.validate(r) == []


def test_host_oom_is_classified():
    r = launcher.run_trial(parse(["llm-infer", "vocab=1048576", "hidden=65536", "heads=64",
                                  "kv_heads=8"]))
    assert r["status"] == "failed"
    assert r["error"]["class"] == "oom" and r["error"]["phase"] == "weights"


def test_timeout_kills_the_child_and_says_so():
    # 10000 requests of 64 tokens, uncapped, take minutes: the timeout falls in a phase
    # of the trial. One glibc pass: under malloc=auto the short memory pass runs first
    # with the same timeout, and a loaded box can spend it all there, up to its teardown.
    r = launcher.run_trial(small(repeats=10000, gen=64, run_cap=3600, timeout=5,
                                 malloc="glibc"))
    assert r["error"]["class"] == "timeout"
    assert r["error"]["phase"] in ("setup", "weights", "data", "warmup", "run")
    assert r["seconds"] < 30


def test_cancel_kills_the_child():
    cancel = threading.Event()
    threading.Timer(3, cancel.set).start()
    r = launcher.run_trial(small(repeats=10000), cancel)
    assert r["status"] == "failed" and r["error"]["class"] == "cancelled"


def test_cuda_on_a_cpu_box_is_unsupported_not_a_traceback():
    r = launcher.run_trial(small(device="cuda"))
    assert r["error"]["class"] == "unsupported"
    assert "device=cuda" in r["error"]["message"] and "Traceback" not in r["error"]["message"]


def test_a_crashing_child_still_reports():
    r = launcher.run_trial(TrialSpec("no-such-workload", {"timeout": 60}))
    assert r["status"] == "failed" and r["error"]["class"] == "crash"
    assert r["error"]["phase"] == "setup"


def test_a_trials_json_file_is_read_only_if_it_is_a_small_regular_file(tmp_path):
    """The trial may own the directory its report is read from (--trial-user)
    while the worker is root: a link, a FIFO or an endless file is no report."""
    import os
    import threading

    from worker.launcher.process import read_json
    good = tmp_path / "report.json"
    good.write_text('{"status": "ok"}')
    assert read_json(str(good)) == {"status": "ok"}
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "shadow.json").symlink_to(good)
    os.mkfifo(tmp_path / "fifo.json")
    big = tmp_path / "big.json"
    big.write_text('"' + "x" * 4096 + '"')
    done = []
    reader = threading.Thread(target=lambda: done.append(
        [read_json(str(tmp_path / n)) for n in ("zero.json", "shadow.json", "fifo.json")]
        + [read_json(str(big), limit=1024)]))
    reader.start()
    reader.join(5)
    assert done == [[None, None, None, None]], "a link, a FIFO or an oversized file is refused"


def test_a_child_that_ran_alone_reports_the_kernels_exact_peak():
    """The kernel's high-water mark is the peak, and its method names the
    sampled one (the two counters can differ by a few pages either way)."""
    words = ["llm-infer", *(f"{k}={v}" for k, v in SMALL.items())]
    code = ("import json, sys; from worker import launcher; from worker.spec import parse; "
            f"r = launcher.run_trial(parse({words!r})); json.dump(r['memory'], sys.stdout)")
    # Through sh, which forks: a process exec'd straight from pytest would inherit
    # pytest's peak RSS at exec, and pass it on to the trial's child.
    out = subprocess.run(["sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, code],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    m = json.loads(out.stdout)
    assert m["host_rss_peak_kernel"] is not None, m["method"]["host_rss_peak_kernel"]
    assert m["host_rss_peak"] == m["host_rss_peak_kernel"]
    method = m["method"]["host_rss_peak"]
    sampled = float(re.search(r"sampler's peak was ([\d.]+) MiB", method)[1]) * 2**20
    assert "ran alone" in method and 50 * 2**20 < sampled <= m["host_rss_peak"] + 2**19


def test_a_process_tree_keeps_the_sampled_peak():
    """The kernel's figure is one process's: a tree's sum is the sampler's to say."""
    class Host:
        method = {"host_rss_peak": "sampled"}

        def result(self):
            return {"host_rss_peak": 300 * 2**20}

    class Nvml(Host):
        method: dict = {}

        def result(self):
            return {}
    spec = small()
    for pids, peak in (({1, 2}, 300 * 2**20), ({1}, 310 * 2**20)):
        run = SimpleNamespace(max_rss=310 * 2**20, parent_rss=40 * 2**20,
                              sampler=SimpleNamespace(pids=pids))
        memory = {"method": {}}
        launcher._memory(memory, run, spec, Host(), Nvml())
        assert memory["host_rss_peak"] == peak and memory["host_rss_peak_kernel"] == 310 * 2**20
        assert ("ran alone" in memory["method"]["host_rss_peak"]) == (len(pids) == 1)
