"""Process isolation: run one trial in a fresh child process and sample it
from outside.

The child (`worker.child`) measures phases and the allocator from inside; this
side samples host RSS and NVML at ~100 Hz, enforces the timeout, cancels by
killing the child's process group, and turns a child that died without
finishing into a failed report with the error class. Whatever happens, a
report comes back.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from worker import report as reports
from worker.probes.host import HostRssTracker
from worker.probes.nvml import NvmlTracker
from worker.spec import TrialSpec

SAMPLE_HZ = 100
KERNEL_METHOD = "kernel max RSS of the child process (wait4 rusage ru_maxrss)"


class Sampler(threading.Thread):
    """One thread ticks every tracker at SAMPLE_HZ over the child's process tree."""

    def __init__(self, pid: int, trackers):
        super().__init__(daemon=True, name="trial-sampler")
        try:
            self.root = psutil.Process(pid)
        except psutil.NoSuchProcess:  # the child already exited: nothing to sample
            self.root = None
        self.trackers = trackers
        self.done = threading.Event()

    def run(self) -> None:
        period = 1.0 / SAMPLE_HZ
        while self.root and not self.done.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for tracker in self.trackers:
                tracker.sample(procs)
            self.done.wait(period)

    def stop(self) -> None:
        self.done.set()
        self.join()


def run_trial(spec: TrialSpec, cancel: threading.Event | None = None) -> dict:
    """Run `spec` in a child process and return its report (never raises for
    a failing trial: the failure is in the report)."""
    cancel = cancel or threading.Event()
    timeout = spec.params.get("timeout", 1800)
    with tempfile.TemporaryDirectory(prefix="trialbot-") as tmp:
        spec_path, report_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "report.json")
        log_path = os.path.join(tmp, "child.log")
        with open(spec_path, "w") as f:
            json.dump(spec.to_dict(), f)
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", PYTHONUNBUFFERED="1")
        started = time.time()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker.child", spec_path, report_path],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env)  # own process group: killable as a whole
        host, nvml = HostRssTracker(), NvmlTracker()
        sampler = Sampler(proc.pid, [host, nvml])
        sampler.start()
        stopped = _watch(proc, timeout, cancel)
        # wait4 reaps the child and gives the kernel's own peak RSS for it.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop()
        report = _read(report_path, spec)
        with open(log_path, "rb") as f:
            log_tail = f.read()[-4000:].decode(errors="replace")
    _judge(report, proc.returncode, stopped, timeout, log_tail)
    memory = report["memory"]
    for tracker in (host, nvml):
        memory.update(tracker.result())
        memory["method"].update(tracker.method)
    memory["host_rss_peak_kernel"] = usage.ru_maxrss * 1024  # Linux reports KiB
    memory["method"]["host_rss_peak_kernel"] = KERNEL_METHOD
    report["env"]["driver"] = nvml.driver()
    nvml.close()
    report["started"] = report.get("started") or started
    report["finished"] = time.time()
    report["seconds"] = report["finished"] - started
    return report


def _watch(proc: subprocess.Popen, timeout: float, cancel: threading.Event) -> str | None:
    """Wait for the child to exit; kill its group on timeout or cancel.
    Returns "timeout", "cancelled" or None. Does not reap the child."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            # WNOWAIT: see the exit without reaping, so wait4 can still read rusage.
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return None
        except ChildProcessError:
            return None
        reason = "cancelled" if cancel.is_set() else (
            "timeout" if time.monotonic() > deadline else None)
        if reason:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return reason
        time.sleep(0.05)


def _read(path: str, spec: TrialSpec) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return reports.new_report(spec.workload, spec.params)


def _judge(report: dict, code: int, stopped: str | None, timeout: float, log: str) -> None:
    """Give a report whose child did not finish its own verdict an error class."""
    if stopped == "timeout":
        reports.fail(report, "timeout", f"stopped after the trial's timeout of {timeout:g} s",
                     _running_phase(report))
    elif stopped == "cancelled":
        reports.fail(report, "killed", "cancelled: the child's process group was killed",
                     _running_phase(report))
    elif report["status"] == "running":  # died before writing a verdict
        if code < 0:
            name = signal.Signals(-code).name
            hint = (" (the kernel's OOM killer sends SIGKILL when host memory runs out)"
                    if -code == signal.SIGKILL else "")
            reports.fail(report, "killed", f"child killed by {name}{hint}\n{log}",
                         _running_phase(report))
        else:
            reports.fail(report, "crash", f"child exited with code {code} before "
                         f"finishing\n{log}", _running_phase(report))


def _running_phase(report: dict) -> str:
    """The phase a killed child was in: the one after the last it finished."""
    order = ["setup", "weights", "data", "warmup", "run"]
    done = [p["name"] for p in report["phases"]]
    for name in order:
        if name not in done:
            return name
    return "teardown"
