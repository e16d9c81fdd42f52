"""The judge: a try whose child did not finish its own report gets its
verdict here (timeout, cancelled, the kernel's OOM killer, killed by a
signal, an out-of-memory in its output, or a crash), naming the phase it
was in; and the next trial waits for the GPU to be free."""
from __future__ import annotations

import re
import signal
import time

from worker import report as reports
from worker.launcher.process import Run
from worker.probes.nvml import NvmlTracker
from worker.report import Report

KERNEL_METHOD = "kernel max RSS of the child process (wait4 rusage ru_maxrss)"

# How a program that died of OOM says so: torch (CUDA and CPU allocators), Python.
OOM_IN_LOG = re.compile(r"OutOfMemoryError|CUDA out of memory|can't allocate memory|"
                        r"^MemoryError", re.MULTILINE)


def judge(report: Report, run: Run, timeout: float, killed_by_kernel: bool,
          phase: str | None = None) -> None:
    """Give a report whose child did not finish its own verdict an error class;
    `phase`: where the program was when it ended, as its probe saw it."""
    phase = phase or running_phase(report)
    if run.proc is None:
        reports.fail(report, "crash", run.tail(), phase)
    elif run.stopped == "timeout":
        reports.fail(report, "timeout", f"stopped after the trial's timeout of {timeout:g} s; "
                     "the child's process group was killed", phase)
    elif run.stopped == "cancelled":
        reports.fail(report, "cancelled", "cancelled from Slack: the child's process group "
                     "was killed", phase)
    elif killed_by_kernel:
        reports.fail(report, "oom", "the kernel's OOM killer ended the child (host memory "
                     f"ran out; the cgroup's oom_kill count rose)\n{run.tail()}", phase)
    elif report["status"] == "running" or (report["status"] == "ok" and run.code != 0):
        _exited(report, run.code, run.tail(), phase)


def _exited(report: Report, code: int | None, tail: str, phase: str) -> None:
    """A child that ended by itself (None: no exit status was read) without
    finishing its report: a signal, an out-of-memory in its output, or a crash."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        reports.fail(report, "killed", f"child killed by {name}\n{tail}", phase)
    elif OOM_IN_LOG.search(tail):
        reports.fail(report, "oom", f"child exited with code {code} after an "
                     f"out-of-memory error\n{tail}", phase)
    else:
        reports.fail(report, "crash", f"child exited with code {code}\n{tail}", phase)


def running_phase(report: Report) -> str:
    """The phase a killed child was in: the one after the last it finished."""
    order = ["setup", "weights", "data", "warmup", "run"]
    done = [p["name"] for p in report["phases"]]
    if report.get("recipe"):
        return done[-1] if done else "setup"
    for name in order:
        if name not in done:
            return name
    return "teardown"


def oom_kills() -> int | None:
    """The kernel's count of OOM kills: this cgroup's (cgroup v2 memory.events),
    else the whole machine's (/proc/vmstat, cgroup v1 or the root cgroup), or
    None where neither can be read."""
    try:
        with open("/proc/self/cgroup") as f:
            path = f.read().strip().split("::", 1)[-1]
        return _count(f"/sys/fs/cgroup{path}/memory.events", "oom_kill")
    except (OSError, ValueError):
        pass
    try:
        return _count("/proc/vmstat", "oom_kill")
    except (OSError, ValueError):
        return None


def _count(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            name, value = line.split()
            if name == key:
                return int(value)
    raise ValueError(f"{key} not in {path}")


def wait_gpu_released(nvml: NvmlTracker, run: Run, limit: float = 10) -> None:
    """The next trial must start on a clean GPU: wait until NVML no longer
    lists the dead child's processes (the driver frees their memory)."""
    if run.proc is None or not nvml.devices:
        return
    pids = {run.proc.pid} | run.sampler.pids
    deadline = time.monotonic() + limit
    while nvml.pids_on_gpu() & pids and time.monotonic() < deadline:
        time.sleep(0.1)
