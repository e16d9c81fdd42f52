"""Contention: a trial on a busy machine says so, in its report and its windows."""
import os
import subprocess
import sys

from worker import launcher, report, summary, windows
from worker.probes import contention
from worker.spec import parse

SPIN = "while True: pass"


def _row(t, busy, tree, steal=0, cpus=2, hz=100):
    # (t, busy, steal, total, tree, self, load1): total is all CPU time there was.
    return (t, busy, steal, int(t * cpus * hz), tree, 0, 1.0)


def _tracker(rows):
    c = contention.ContentionTracker()
    c.rows = rows
    return c


def test_others_share_is_the_machines_busy_time_minus_the_trials():
    # 2 CPUs for 1 s = 200 jiffies; the machine was busy 150, the trial 50: others 100 = 50%.
    c = _tracker([_row(10.0, 0, 0), _row(10.5, 75, 25), _row(11.0, 150, 50)])
    got = c.phase(10.0, 11.0)
    assert abs(got["others_cpu"] - 0.5) < 1e-9 and got["steal"] == 0


def test_a_burst_inside_a_quiet_phase_is_caught_by_the_peak_span():
    # Quiet except 0.5 s in which others took the whole machine: the mean over 4 s
    # is 12.5%, under the threshold, the busiest span 100%.
    rows = [_row(10 + i * 0.5, 0, 0) for i in range(4)]
    rows += [_row(12.0, 100, 0), _row(12.5, 100, 0), _row(13.0, 100, 0), _row(13.5, 100, 0)]
    c = _tracker(rows)
    got = c.phase(10.0, 13.5)
    assert got["others_cpu"] < contention.OTHERS_CPU and got["others_cpu_max"] == 1.0
    out = c.result([{"name": "run", "start": 10.0, "end": 13.5}])
    assert out["flagged"] and "during the run phase" in out["summary"]
    assert "re-run on a quiet machine" in out["summary"]


def test_a_quiet_trial_is_not_flagged_and_says_how_quiet():
    c = _tracker([_row(10.0, 0, 0), _row(10.5, 52, 50), _row(11.0, 104, 100)])
    out = c.result([{"name": "setup", "start": 10.0, "end": 10.5},
                    {"name": "run", "start": 10.5, "end": 11.0}])
    assert not out["flagged"] and out["summary"] is None
    assert summary.machine(out).startswith("quiet: other processes used 2% of the 2 CPUs")


def test_steal_alone_flags_a_phase():
    c = _tracker([_row(10.0, 0, 0, steal=0), _row(11.0, 100, 100, steal=40)])
    out = c.result([{"name": "run", "start": 10.0, "end": 11.0}])
    assert out["flagged"] and "hypervisor took 20% (steal)" in out["summary"]


def test_a_busy_setup_flags_the_trial_and_is_named():
    # A plan counts prep too, so a busy setup is a busy trial; the run phase was quiet.
    c = _tracker([_row(10.0, 0, 0), _row(11.0, 200, 0), _row(12.0, 300, 100)])
    out = c.result([{"name": "setup", "start": 10.0, "end": 11.0},
                    {"name": "run", "start": 11.0, "end": 12.0}])
    assert out["phases"]["setup"]["others_cpu"] == 1.0 and out["flagged"]
    assert "during the setup phase" in out["summary"]


def test_windows_cut_the_run_phase_in_time_order_and_take_their_contention():
    samples = [{"latency": 0.1 * (i + 1), "t0": 10.0 + i, "t1": 10.5 + i} for i in range(10)]
    w = windows.split(samples, "request")
    assert [r["count"] for r in w["rows"]] == [2] * 5
    assert abs(w["rows"][0]["mean"] - 0.15) < 1e-12 and w["rows"][0]["start"] == 10.0
    windows.annotate(w, lambda a, b: {"others_cpu": 0.6 if a >= 18 else 0.0, "steal": 0.0},
                     contention.OTHERS_CPU, contention.STEAL)
    assert [r["contended"] for r in w["rows"]] == [False] * 4 + [True]
    assert windows.split(samples[:1], "request") is None


def test_a_trial_beside_busy_processes_is_flagged_in_its_report_and_windows():
    # A run phase of a second or more: one core's /proc/stat line counts 100
    # jiffies a second, and a run of 0.13 s (12 requests) read in steps of 9%.
    spec = parse(["llm-infer", "batch=2", "prompt=32", "gen=8", "repeats=300", "stability=0",
                  "hidden=128", "heads=2", "kv_heads=1", "vocab=512", "processes=1"])
    # One spinner held on each usable core: the trial is pinned to its own cores
    # (worker/threads.py), and a spinner the scheduler left free could sit on
    # the others, which is a neighbour, not contention. Each spinner has its own
    # session, as another user's job would: with autogroup scheduling, spinners
    # in the test's session share that session's weight with it, and took 9-31%
    # of the trial's core (truly: the probe read what they got, not a fault).
    spinners = [subprocess.Popen([sys.executable, "-c",
                                  f"import os\nos.sched_setaffinity(0, {{{core}}})\n{SPIN}"],
                                 start_new_session=True)
                for core in sorted(os.sched_getaffinity(0))]
    try:
        busy = launcher.run_trial(spec)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert busy["status"] == "ok", busy["error"]
    c = busy["contention"]
    assert c["flagged"], {k: c[k] for k in ("cores", "free_cores", "neighbour", "phases")}
    run = c["phases"]["run"]  # the flag's rule: the mean, or the busiest 0.5 s span
    assert max(run["others_cpu"], run["others_cpu_max"]) > contention.OTHERS_CPU, run
    assert "busy machine" in summary.text(busy) and report.validate(busy) == []
    rows = busy["windows"]["rows"]
    assert sum(r["count"] for r in rows) == 300 and any(r["contended"] for r in rows)
    assert all(r["others_cpu"] is not None for r in rows)


class _FakeNvml:
    """NVML's answers for one GPU shared with another job (no GPU on CI)."""
    class NVMLError(Exception):
        pass

    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwThermalSlowdown = 0x40

    def __init__(self, ours, theirs):
        self.ours, self.theirs = ours, theirs

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"used": 10 * 2**30})

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [type("P", (), {"pid": self.ours, "usedGpuMemory": 4 * 2**30}),
                type("P", (), {"pid": self.theirs, "usedGpuMemory": 6 * 2**30})]

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("U", (), {"gpu": 97})

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 | 0x40


def test_another_process_on_the_trials_gpu_and_thermal_slowdown_flag_it():
    from worker.probes.nvml import NvmlTracker
    t = NvmlTracker()
    t.nvml = _FakeNvml(ours=111, theirs=222)
    t.devices = [{"index": 0, "handle": None, "name": "H200", "used_peak": 0,
                  "process_used_peak": 0, "util": [], "ours": False, "others": {},
                  "reasons": 0}]
    t.ticks = 0
    t.sample([type("Proc", (), {"pid": 111})])
    gpu = t.contention()
    dev = gpu["devices"][0]
    assert dev["others"] == [{"pid": 222, "used_peak": 6 * 2**30}]
    assert dev["throttle"] == ["thermal (hardware)", "power cap"]
    assert "1 other process(es) on GPU 0 holding 6.00 GiB" in gpu["flagged_why"]
    assert "thermal (hardware)" in gpu["flagged_why"] and "power cap" not in gpu["flagged_why"]
    c = contention.ContentionTracker()
    c.rows = [_row(10.0, 0, 0), _row(11.0, 100, 100)]
    out = c.result([{"name": "run", "start": 10.0, "end": 11.0}], gpu=gpu)
    assert out["flagged"] and out["summary"].startswith("busy GPU: 1 other process(es)")


def test_a_window_shorter_than_the_reads_period_takes_the_reads_around_it():
    c = _tracker([_row(10.0, 0, 0), _row(10.1, 20, 0), _row(10.2, 20, 0)])
    # A 20 ms window between the first two reads: others took the whole machine there.
    assert c.share(10.04, 10.06)["others_cpu"] == 1.0
    assert c.share(10.12, 10.18)["others_cpu"] == 0.0
    assert contention.ContentionTracker().share(1.0, 2.0) is None


def test_a_quiet_recipe_names_its_longest_phase_and_no_reads_say_not_measured():
    c = _tracker([_row(10.0, 0, 0), _row(10.5, 51, 50), _row(12.0, 204, 200)])
    out = c.result([{"name": "launch", "start": 10.0, "end": 10.5},
                    {"name": "train", "start": 10.5, "end": 12.0}], recipe=True)
    assert summary.machine(out).startswith("quiet: other processes used 1% of the 2 CPUs "
                                           "during the train phase")
    empty = contention.ContentionTracker().result([])
    assert summary.machine(empty).startswith("contention not measured")
