"""`malloc=auto` on a CPU: host memory and time measured in separate passes.

glibc keeps freed blocks in RSS by allocation history, so host RSS under its
default overstates what a larger batch needs; `malloc=live` gives the live
peak but slows CPU time by page faults (docs/design.md §2, "Memory, by
method"). So a built-in trial that will run on the CPU with `malloc=auto`
runs twice, each pass in its own fresh child:

1. the *memory pass*, malloc=live, the same config with two measured runs and
   no warmup (the live peak repeats from run to run), which supplies
   `host_rss_peak`, `host_rss_peak_kernel`, the launch share and each
   phase's host peak (by the phase's name);
2. the *time pass*, glibc's default, the trial as asked, which supplies
   everything else: phases, latency, throughput, `seconds`; with `processes=N`
   it runs as N fresh children (worker/launcher/processes.py), the memory
   pass stays one.

`seconds` and the phases stay the time pass's: a plan estimates the user's
run, which is one pass. The memory pass's seconds are in `passes`, a cost of
measuring like the sampler's. On CUDA the GPU figures answer for memory and a
GPU box pays for every second, so there `auto` is one glibc pass.
"""
from __future__ import annotations

import math
import time

from worker import machine
from worker.report import Pass, Report
from worker.spec import TrialSpec

SUPPLIED = ("host_rss_peak", "host_rss_peak_kernel", "host_rss_launch_share")
PHASE_SUPPLIED = "phase_host_rss_peak"  # each phase's host_rss_peak, by name

# The memory pass measures two runs: the live peak repeats, and a second run is
# a second chance for the ~100 Hz sampler to catch it.
INFER_PASS = {"warmup": 0, "repeats": 2, "stability": 0}
TRAIN_PASS = {"warmup": 0, "steps": 2}  # step 2 holds the optimizer state
MEMORY_PASS = {"llm-infer": INFER_PASS, "llm-train": TRAIN_PASS,
               "hf-infer": INFER_PASS, "hf-train": TRAIN_PASS}

LIVE_WHY = ("glibc's mmap threshold pinned at 64 KiB, so freed tensors leave RSS: the live "
            "peak")


def applies(spec: TrialSpec) -> bool:
    """A built-in trial whose allocator setting is left to the worker."""
    return not spec.recipe and spec.workload in MEMORY_PASS and spec.params.get("malloc") == "auto"


def split(spec: TrialSpec) -> bool:
    """Whether this try runs as a memory pass and a time pass: on the CPU."""
    device = spec.params.get("device", "auto")
    return applies(spec) and (device == "cpu" or (device == "auto" and not machine.has_cuda()))


def run(spec: TrialSpec, run_one, cancel, **kwargs) -> Report:
    """A malloc=auto try through `run_one` (the launcher's run_trial): both
    passes merged into one report in the trial's own params (a failed memory
    pass is the report), or on CUDA one glibc pass."""
    if not split(spec):
        return _one_pass(spec, run_one(_with(spec, malloc="glibc"), cancel, **kwargs))
    started = time.monotonic()
    timeout = spec.params.get("timeout", 1800)
    measure = MEMORY_PASS[spec.workload]
    # The heartbeat shows "memory pass", not that pass's phases: a "run" there
    # would be read as the trial's own run phase.
    if kwargs.get("progress") is not None:
        kwargs["progress"]["phase"] = "memory pass"
    one = {"processes": 1} if "processes" in spec.params else {}  # memory: one process
    memory = run_one(_with(spec, **measure, **one, malloc="live"), cancel,
                     **{**kwargs, "progress": {}})
    first = _entry("memory", "live", memory, [*SUPPLIED, PHASE_SUPPLIED], measure)
    first["host_rss_peak"] = memory["memory"].get("host_rss_peak")
    if memory["status"] != "ok":
        return _memory_failed(spec, memory, first)
    left = max(1, math.ceil(timeout - (time.monotonic() - started)))
    report = run_one(_with(spec, malloc="glibc", timeout=left), cancel, **kwargs)
    second = _entry("time", "glibc", report, ["phases", "seconds", "latency and every other "
                                              "time figure", "the other memory figures"], {})
    second["host_rss_peak"] = report["memory"].get("host_rss_peak")
    second["what"] = ("its own host RSS is not reported: under glibc's default it holds blocks "
                      "kept after frees")
    report["params"] = dict(spec.params)
    mem, method = report["memory"], report["memory"]["method"]
    for key in SUPPLIED:
        mem[key] = memory["memory"].get(key)
        method[key] = _from_memory_pass(memory, key, first, measure)
    method[PHASE_SUPPLIED] = (_from_memory_pass(memory, PHASE_SUPPLIED, first, measure)
                              + "; warmup: not measured, the memory pass runs none")
    _phase_peaks(report["phases"], memory["phases"])
    sampled = (report.get("timeline") or {}).get("sampled")
    if sampled:
        sampled["method"] += ("; this is the time pass (glibc's default): its host RSS holds "
                              "freed blocks, host_rss_peak is the memory pass's")
    report["passes"] = [first, second]
    return report


def _phase_peaks(phases: list[dict], measured: list[dict]) -> None:
    """The time pass's phases take the memory pass's host peaks by name; its
    warmup is not the trial's (it runs none), so warmup's peak is null."""
    live = {p["name"]: p for p in measured if p["name"] != "warmup"}
    for phase in phases:
        other = live.get(phase["name"], {})
        phase["host_rss_peak"] = other.get("host_rss_peak")
        phase["host_rss_samples"] = other.get("host_rss_samples", 0)


def _from_memory_pass(memory: dict, key: str, first: Pass, measure: dict) -> str:
    return (f"memory pass under malloc=live ({LIVE_WHY}; {_words(measure)}, "
            f"{first['seconds']:.1f} s); time figures from the time pass under glibc's "
            "default: " + memory["memory"]["method"].get(key, "?"))


def _one_pass(spec: TrialSpec, report: Report) -> Report:
    report["params"] = dict(spec.params)
    method = report["memory"]["method"]
    if "host_rss_peak" in method:
        method["host_rss_peak"] += ("; malloc=auto on CUDA: one pass under glibc's default "
                                    "(the GPU figures answer for memory, and a second pass "
                                    "would cost GPU time), so host RSS also holds blocks glibc "
                                    "kept after frees")
    report["passes"] = [_entry("one", "glibc", report, ["every figure"], {})]
    return report


def _with(spec: TrialSpec, **params) -> TrialSpec:
    return TrialSpec(spec.workload, {**spec.params, **params})


def _memory_failed(spec: TrialSpec, memory: Report, first: Pass) -> Report:
    err = memory.get("error") or {"class": "crash", "message": "", "phase": None}
    why = ("the memory pass (malloc=live, the first of the two passes malloc=auto runs on a "
           "CPU) failed, so the time pass did not run: ")
    err["message"] = why + err["message"][-(2000 - len(why)):]  # the cause is in the tail
    memory["error"] = err
    memory["params"] = dict(spec.params)
    memory["passes"] = [first, {"pass": "time", "malloc": "glibc", "status": "not run",
                                "seconds": 0.0, "supplied": []}]
    return memory


def _entry(name: str, malloc: str, report: Report, supplied: list[str], changed: dict) -> Pass:
    wall = (report.get("processes") or {}).get("seconds")  # N processes: all of them
    return {"pass": name, "malloc": malloc, "status": report["status"],
            "seconds": wall or report.get("seconds") or 0.0, "params": changed,
            "supplied": supplied}


def _words(measure: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in measure.items())
