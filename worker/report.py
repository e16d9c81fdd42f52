"""The trial report: one JSON document shared by the worker and the bot, and
its one definition (the TypedDicts below) and validator.

The worker builds it, the bot stores and renders it, other tools read it.
Field names are a contract (docs/report-schema.md). The types say what each
field holds; `validate` checks what the bot relies on before it stores one.
"""
from __future__ import annotations

import functools
import types
import typing
from typing import Literal, TypedDict

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

# "class" is a keyword: the functional form spells it.
TrialError = TypedDict("TrialError", {"class": str, "message": str, "phase": "str | None"})


class Phase(TypedDict, total=False):
    name: str          # setup, weights, data, warmup, run (a recipe: launch, its marks)
    start: float       # Unix time
    end: float
    seconds: float
    found_by: str      # a recipe's: start, mark, hook:<what>, whole-program, recipe-setup
    peak_allocated: int | None  # CUDA only: peaks reset at the phase's start
    peak_reserved: int | None
    allocated: int | None       # ... and at its end
    reserved: int | None


class Memory(TypedDict, total=False):
    method: dict[str, str]  # for every field: how it was measured, or why not
    allocated: int | None
    reserved: int | None
    peak_allocated: int | None
    peak_reserved: int | None
    device_used_peak: int | None
    process_used_peak: int | None
    host_rss_peak: int | None
    host_rss_peak_kernel: int | None
    num_alloc_retries: int | None
    num_ooms: int | None
    devices: list[dict]  # per GPU: index, name, used_peak, process_used_peak, utilization


class Stats(TypedDict, total=False):
    """Latency (per request or training step), time to first token, decode step."""
    count: int
    p50: float
    p90: float
    p99: float
    mean: float
    stdev: float | None
    unit: str
    what: str


class Attempt(TypedDict, total=False):
    attempt: int
    status: str
    error_class: str | None
    message: str
    seconds: float | None
    changed: dict      # parameters that differ from the request
    next: str | None   # what changed for the next try


class Window(TypedDict, total=False):
    """One stretch of consecutive measured runs (requests or steps) in the run
    phase; the spread between windows is the drift within the trial."""
    start: float           # Unix time of the window's first run
    end: float             # ... and of its last run's end
    count: int
    mean: float            # seconds per run in the window
    sd: float | None
    others_cpu: float | None  # share of all CPUs other processes used meanwhile
    contended: bool        # others_cpu or steal over the contention threshold


class Windows(TypedDict, total=False):
    unit: str              # request or step
    what: str
    rows: list[Window]


class Contention(TypedDict, total=False):
    """What else used the machine while the trial ran (worker/probes/contention.py)."""
    flagged: bool          # past a threshold in warmup or run: the figures are suspect
    summary: str | None    # plain words for the card, or None when quiet
    summary_note: dict | None  # the same as {"id", "values"}, for the reader's language
    cpus: int
    threshold: dict        # {others_cpu, steal, gpu_others_memory}: the stated limits
    phases: dict           # phase name -> {seconds, others_cpu, others_cpu_max, steal, load_max}
    gpu: dict | None       # CUDA: per device others' processes, utilisation, throttle reasons
    method: dict[str, str]


# One child run of a malloc=auto trial (worker/launcher/passes.py); "pass" is a
# keyword, so the functional form spells it.
Pass = TypedDict("Pass", {
    "pass": str,            # memory, time, or one (CUDA: a single glibc pass)
    "malloc": str,          # live or glibc: the allocator setting it ran under
    "status": str,          # ok, failed, or "not run"
    "seconds": float,       # its wall time (the memory pass's is a cost of measuring)
    "params": dict,         # what it ran differently from the trial (the memory pass's runs)
    "supplied": list,       # the report's figures taken from it
    "host_rss_peak": "int | None",  # its own (the time pass's is not reported: glibc history)
    "what": str,
}, total=False)


class Report(TypedDict, total=False):
    schema: str                        # SCHEMA
    trial: str | None                  # T12, set by the bot's queue
    worker: str | None
    workload: str                      # llm-infer, llm-train, recipe
    params: dict                       # every parameter, resolved
    status: Literal["running", "ok", "failed"]
    error: TrialError | None
    started: float | None
    finished: float | None
    seconds: float | None
    phases: list[Phase]
    memory: Memory
    latency: Stats | None
    ttft: Stats | None
    decode_per_token: Stats | None
    stability: dict | None
    throughput: dict | None            # {value, unit, what}
    scale: dict | None
    scenario: str | None
    headline: dict | None              # {metric, value, unit}
    quality_probe: dict | None
    training: dict | None
    full_depth: dict                   # llm-infer with preset= (arithmetic), hf-* (counted)
    model: dict                        # hf-*: what transformers built, from where
    env: dict
    requested: dict
    attempts: list[Attempt]
    seconds_lost: float
    timeline: dict | None              # {sampled, allocator}: {columns, rows, method}
    probe: dict
    recipe: str | None
    output_tail: str
    slurm: dict
    windows: Windows | None            # the run phase in windows (drift inside the trial)
    units: dict | None                 # a recipe's generate/model calls the probe timed
    contention: Contention | None      # what else ran on the machine meanwhile
    passes: list[Pass] | None          # malloc=auto: memory pass (live) and time pass (glibc)


def new_report(workload: str, params: dict) -> Report:
    """An empty report in the schema's shape; the child and launcher fill it.
    An llm-infer trial with `preset=` carries the preset's full-depth
    arithmetic from the start, so a failed try reports it too."""
    report: Report = {
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


def fail(report: Report, error_class: str, message: str, phase: str | None = None) -> Report:
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
    problems += [f"{key} must be {what}" for key, what in _shapes(report)]
    return problems


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Fields `validate` checks more closely than their type.
_CHECKED = {"schema", "status", "workload", "params", "phases", "memory", "error", "timeline"}


def _kinds(hint) -> tuple[tuple[type, ...], str]:
    """The JSON types a field's annotation allows, and their name."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    allowed, names = [], []
    for a in args:
        origin = typing.get_origin(a) or a
        if a is type(None):
            names.append("null")
        elif origin is Literal or a is str:
            allowed.append(str)
            names.append("a string")
        elif a in (int, float):
            allowed += [int, float]
            names.append("a number")
        elif origin is list:
            allowed.append(list)
            names.append("a list")
        else:  # dict or a TypedDict
            allowed.append(dict)
            names.append("an object")
    return tuple(allowed) + ((type(None),) if "null" in names else ()), " or ".join(
        dict.fromkeys(names))


@functools.cache
def _field_kinds() -> dict[str, tuple[tuple[type, ...], str]]:
    """Each Report field's allowed JSON types, worked out once (every report is checked)."""
    return {key: _kinds(hint) for key, hint in typing.get_type_hints(Report).items()
            if key not in _CHECKED}


def _shapes(report: dict) -> list[tuple[str, str]]:
    """Fields present with a JSON type their Report annotation does not allow."""
    out = []
    for key, (allowed, what) in _field_kinds().items():
        if key in report:
            value = report[key]
            if not isinstance(value, allowed) or isinstance(value, bool) and bool not in allowed:
                out.append((key, what))
    return out
