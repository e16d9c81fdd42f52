"""The trial report: one JSON document shared by the worker and the bot.

The worker builds it, the bot stores and renders it, other tools read it.
Field names are a contract (README, "The trial report").
"""
from __future__ import annotations

from worker import arithmetic

SCHEMA = "trialbot.trial/1"

# Every memory figure, null where the device cannot measure it.
MEMORY_FIELDS = (
    "allocated",          # torch allocator, bytes held by tensors at the end of the trial
    "reserved",           # torch allocator, bytes held by the caching allocator at the end
    "peak_allocated",     # torch.cuda.max_memory_allocated over the trial
    "peak_reserved",      # torch.cuda.max_memory_reserved over the trial
    "device_used_peak",   # NVML device used (what nvidia-smi shows), sampled
    "process_used_peak",  # NVML per-process used, child process tree, sampled
    "host_rss_peak",      # RSS of the child process tree, sampled
    "host_rss_peak_kernel",  # kernel's own max RSS of the child (wait4 rusage)
    "num_alloc_retries",  # torch allocator: cache flushes forced by a failed cudaMalloc
    "num_ooms",           # torch allocator: out-of-memory errors raised
)

ERROR_CLASSES = ("oom", "timeout", "crash", "killed", "unsupported", "cancelled")


def new_report(workload: str, params: dict) -> dict:
    """An empty report in the schema's shape; the child and launcher fill it.
    An llm-infer trial with `preset=` carries the preset's full-depth
    arithmetic from the start, so a failed try reports it too."""
    report = {
        "schema": SCHEMA,
        "trial": None,
        "worker": None,
        "workload": workload,
        "params": dict(params),
        "status": "running",
        "error": None,
        "started": None,
        "finished": None,
        "seconds": None,
        "phases": [],
        "memory": {"method": {}, **{f: None for f in MEMORY_FIELDS}},
        "latency": None,
        "throughput": None,
        "scale": None,
        "env": {},
    }
    if workload == "llm-infer" and params.get("preset", "none") != "none":
        report["full_depth"] = arithmetic.full_depth(params)
    return report


def fail(report: dict, error_class: str, message: str, phase: str | None = None) -> dict:
    """Mark a report failed. The message is kept to its last 2000 characters
    because the tail of a traceback or log names the cause."""
    assert error_class in ERROR_CLASSES, error_class
    report["status"] = "failed"
    report["error"] = {"class": error_class, "message": message[-2000:], "phase": phase}
    return report


def validate(report: object) -> list[str]:
    """Problems that make a posted report unusable (what the bot stores and
    renders relies on these); empty when it is fine."""
    if not isinstance(report, dict):
        return ["report must be a JSON object"]
    problems = []
    if report.get("schema") != SCHEMA:
        problems.append(f"schema must be {SCHEMA!r}")
    if report.get("status") not in ("ok", "failed"):
        problems.append("status must be 'ok' or 'failed'")
    if not isinstance(report.get("workload"), str):
        problems.append("workload must be a string")
    if not isinstance(report.get("params"), dict):
        problems.append("params must be an object")
    phases = report.get("phases")
    if not isinstance(phases, list) or not all(
            isinstance(p, dict) and isinstance(p.get("name"), str)
            and _number(p.get("seconds")) for p in phases):
        problems.append("phases must be a list of {name, start, end, seconds}")
    memory = report.get("memory")
    if not isinstance(memory, dict) or not isinstance(memory.get("method"), dict):
        problems.append("memory must be an object with a method object")
    else:
        bad = [f for f in MEMORY_FIELDS if memory.get(f) is not None and not _number(memory[f])]
        if bad:
            problems.append(f"memory fields must be numbers or null: {', '.join(bad)}")
    error = report.get("error")
    if report.get("status") == "failed" and not (
            isinstance(error, dict) and error.get("class") in ERROR_CLASSES
            and isinstance(error.get("message"), str)):
        problems.append(f"a failed report needs error {{class: one of {', '.join(ERROR_CLASSES)}, "
                        "message}")
    timeline = report.get("timeline")
    if timeline is not None and not (isinstance(timeline, dict) and all(
            isinstance(part, dict) and isinstance(part.get("columns"), list)
            and isinstance(part.get("rows"), list)
            and all(isinstance(r, list) and len(r) == len(part["columns"])
                    and all(v is None or _number(v) for v in r) for r in part["rows"])
            for part in timeline.values())):
        problems.append("timeline parts must be {columns, rows} with numeric rows of that width")
    for key in ("latency", "throughput", "scale", "stability"):
        if report.get(key) is not None and not isinstance(report[key], dict):
            problems.append(f"{key} must be an object or null")
    return problems


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
