"""The trial's child process: `python -m worker.child SPEC.json REPORT.json`.

A fresh process per trial keeps peaks clean and lets an OOM or a segfault end
only this process. The report is rewritten after every phase, so a child
killed mid-trial still leaves the phases it finished.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from types import ModuleType

from worker import report as reports
from worker.probes.allocator import AllocatorProbe
from worker.report import Phase, Report
from worker.workloads import Unsupported


class Trial:
    """What a workload sees: its device, a synchronize, and timed phases."""

    def __init__(self, report: Report, path: str):
        self.report, self.path = report, path
        self.torch: ModuleType | None = None
        self.device = "cpu"
        self.allocator: AllocatorProbe | None = None
        self.current: str | None = None

    def attach(self, torch: ModuleType, device: str) -> None:
        """Called once torch is imported and the device chosen (end of `setup`)."""
        self.torch, self.device = torch, device
        self.allocator = AllocatorProbe(torch, device)

    def sync(self) -> None:
        # GPU work is asynchronous: a timestamp without a synchronize measures nothing.
        if self.device == "cuda" and self.torch is not None:  # attach sets both
            self.torch.cuda.synchronize()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.current = name
        print(f"TRIALBOT_PHASE {name}", flush=True)  # the worker's progress, live
        self.sync()
        if self.allocator:
            self.allocator.phase_start()
        start, t0 = time.time(), time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            seconds = time.perf_counter() - t0
            phase: Phase = {"name": name, "start": start, "end": start + seconds,
                            "seconds": seconds}
            if self.allocator:
                phase.update(self.allocator.phase_end())
            self.report["phases"].append(phase)
            save(self.report, self.path)
        self.current = None


def save(report: Report, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, path)


def classify(exc: BaseException, torch) -> str:
    if isinstance(exc, MemoryError):
        return "oom"
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    text = str(exc).lower()
    # CUDA says "out of memory"; torch's CPU allocator says "can't allocate memory".
    if (oom and isinstance(exc, oom)) or "out of memory" in text \
            or "can't allocate memory" in text:
        return "oom"
    return "crash"


def pick_device(torch, wanted: str) -> str:
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise Unsupported("device=cuda was asked for, but torch on this worker sees no CUDA "
                          f"device (torch {torch.__version__}, CUDA {torch.version.cuda}); "
                          "use device=auto or device=cpu, or run on a CUDA worker")
    return wanted


def set_threads(torch: ModuleType, count: int | None, report: Report) -> None:
    """The worker's thread choice (worker/threads.py), and what torch then runs
    with and where, for the report."""
    if count:
        torch.set_num_threads(count)
    report["threads_seen"] = {"torch_threads": torch.get_num_threads(),
                              "cores_seen": sorted(os.sched_getaffinity(0))}


def main(spec_path: str, report_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    report = reports.new_report(spec["workload"], spec["params"])
    report["started"] = time.time()
    save(report, report_path)
    trial = Trial(report, report_path)
    try:
        with trial.phase("setup"):  # importing torch and the workload, picking the device
            import torch

            from worker import env, workloads
            set_threads(torch, spec.get("threads"), report)
            device = pick_device(torch, spec["params"].get("device", "auto"))
            report["env"] = env.fingerprint(torch, device)
            workload = workloads.load(spec["workload"])
        trial.attach(torch, device)
        results = workload.run(spec["params"], trial)
        report.update(results)
        report["status"] = "ok"
    except Unsupported as exc:
        reports.fail(report, "unsupported", str(exc), trial.current)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a report
        torch_mod = sys.modules.get("torch")
        cls = classify(exc, torch_mod) if torch_mod else "crash"
        reports.fail(report, cls, "".join(traceback.format_exception(exc)), trial.current)
    if trial.allocator:
        values, method = trial.allocator.totals()
        report["memory"].update(values)
        report["memory"]["method"].update(method)
        report["allocator_samples"] = list(trial.allocator.samples)
    report["finished"] = time.time()
    save(report, report_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
