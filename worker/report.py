"""The trial report: one JSON document shared by the worker and the bot, and
its one definition (the TypedDicts below, and in worker/reportparts.py the
parts that modules below this one return) and validator.

The worker builds it, the bot stores and renders it, other tools read it.
Field names are a contract (docs/report-schema.md). The types say what each
field holds; `validate` checks what the bot relies on before it stores one.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict, cast, get_args

from worker import arithmetic, reportcheck, shape
from worker import spec as specs
from worker.limits import (  # noqa: F401 - re-exported: callers read them here
    AMOUNT,
    BYTES,
    COUNT,
    FIGURE,
    LAST_TIME,
    MAX_ATTEMPTS,
    MAX_BYTES,
    MAX_CORES,
    MAX_COUNT,
    MAX_DEVICES,
    MAX_ITEMS,
    MAX_PARAMS,
    MAX_PHASES,
    MAX_RATE,
    MAX_RATIO,
    MAX_SECONDS,
    PERCENT,
    RATE,
    RATIO,
    SECONDS,
    SHARE,
    TIME,
    TRY,
    YEAR,
)
from worker.reportparts import Env, FullDepth, Model, Object, Peaks, Slurm, Threads, Totals
from worker.shape import REQUIRED, Most, Range

SCHEMA = "trialbot.trial/1"

# Every memory figure, null where the device cannot measure it.
MEMORY_FIELDS = (
    "allocated",          # torch allocator, bytes held by tensors at the end of the trial
    "reserved",           # torch allocator, bytes held by the caching allocator at the end
    "peak_allocated",     # torch.cuda.max_memory_allocated over the trial
    "peak_reserved",      # torch.cuda.max_memory_reserved over the trial
    "device_used_peak",   # NVML device used (what nvidia-smi shows), sampled
    "process_used_peak",  # NVML per-process used, child process tree, sampled
    "host_rss_peak",      # RSS of the child process tree, sampled; the kernel's if it ran alone
    "host_rss_peak_kernel",  # kernel's own max RSS of the child (wait4 rusage)
    "host_rss_launch_share",  # the launch (recipe) or setup phase's host peak / host_rss_peak
    "num_alloc_retries",  # torch allocator: cache flushes forced by a failed cudaMalloc
    "num_ooms",           # torch allocator: out-of-memory errors raised
)

ErrorClass = Literal["oom", "timeout", "crash", "killed", "unsupported", "cancelled", "environment"]
ERROR_CLASSES: tuple[str, ...] = get_args(ErrorClass)  # in this order in messages


Scalar = str | float | bool | None  # a parameter's value
Params = Annotated[dict[str, Scalar], Most(MAX_PARAMS)]

# "class" is a keyword: the functional form spells it.
TrialError = TypedDict("TrialError", {
    "class": Annotated[ErrorClass, REQUIRED],
    "message": Annotated[str, REQUIRED],
    "phase": str | None})


class Phase(Peaks, total=False):  # Peaks: the allocator's, CUDA only
    name: Annotated[str, REQUIRED]  # setup, weights, data, warmup, run (a recipe: launch, marks)
    start: Annotated[float, TIME]   # Unix time
    end: Annotated[float, TIME]
    seconds: Annotated[float, SECONDS, REQUIRED]
    found_by: str      # a recipe's: start, mark, hook:<what>, whole-program, recipe-setup,
    #                    recipe-environment (its repository and environment made)
    cached: bool       # recipe-environment: an environment built before was reused ...
    built_at: Annotated[float | None, TIME]            # ... built then
    build_seconds: Annotated[float | None, SECONDS]    # ... taking this long
    host_rss_peak: Annotated[int | None, BYTES]   # any device: sampled RSS of the process tree
    host_rss_samples: Annotated[int, COUNT]       # ... over this many samples in the phase


class Device(TypedDict, total=False):
    index: Annotated[int, COUNT]
    name: str | None
    used_peak: Annotated[int | None, BYTES]
    process_used_peak: Annotated[int | None, BYTES]
    utilization_mean: Annotated[float | None, PERCENT]
    utilization_max: Annotated[float | None, PERCENT]


class Memory(Totals, total=False):  # Totals: the allocator's
    method: Annotated[Object, REQUIRED]  # for every field: how it was measured, or why not
    device_used_peak: Annotated[int | None, BYTES]
    process_used_peak: Annotated[int | None, BYTES]
    host_rss_peak: Annotated[int | None, BYTES]
    host_rss_peak_kernel: Annotated[int | None, BYTES]
    host_rss_launch_share: Annotated[float | None, SHARE]
    devices: Annotated[list[Device], Most(MAX_DEVICES)]  # per GPU


class Stats(TypedDict, total=False):
    """Latency (per request or training step), time to first token, decode step;
    null figures when nothing was timed."""
    count: Annotated[int, COUNT]
    p50: Annotated[float | None, SECONDS]
    p90: Annotated[float | None, SECONDS]
    p99: Annotated[float | None, SECONDS]
    mean: Annotated[float | None, SECONDS]
    stdev: Annotated[float | None, SECONDS]
    unit: str
    what: str


class Stability(TypedDict, total=False):
    count: Annotated[int, COUNT]
    iqr_over_median: Annotated[float | None, RATIO]
    threshold: Annotated[float | None, SHARE]
    bound: Annotated[float | None, SHARE]
    stable: bool | None
    stopped_by: str
    seconds: Annotated[float | None, SECONDS]


class Throughput(TypedDict, total=False):
    value: Annotated[float, RATE, REQUIRED]
    unit: Annotated[str, REQUIRED]
    what: str


class Headline(TypedDict, total=False):
    metric: Annotated[str, REQUIRED]
    value: Annotated[float, FIGURE, REQUIRED]
    unit: Annotated[str, REQUIRED]


class Scale(TypedDict, total=False):
    batch: Annotated[int, COUNT]
    prompt_tokens: Annotated[int, COUNT]
    gen_tokens: Annotated[int, COUNT]
    tokens_per_request: Annotated[int, COUNT]
    requests: Annotated[int, COUNT]
    tokens: Annotated[int, COUNT]


class Attempt(TypedDict, total=False):
    attempt: Annotated[int, TRY]
    status: Annotated[Literal["ok", "failed"], REQUIRED]
    error_class: ErrorClass | None
    message: str | None
    seconds: Annotated[float | None, SECONDS]
    changed: Params | None  # parameters that differ from the request
    next: str | None   # what changed for the next try


class Window(TypedDict, total=False):
    """One stretch of consecutive measured runs (requests or steps) in the run
    phase; the spread between windows is the drift within the trial."""
    start: Annotated[float, TIME]  # Unix time of the window's first run
    end: Annotated[float, TIME]    # ... and of its last run's end
    count: Annotated[int, COUNT]
    mean: Annotated[float, SECONDS]  # seconds per run in the window
    sd: Annotated[float | None, SECONDS]
    others_cpu: Annotated[float | None, SHARE]  # share of all CPUs other processes used
    contended: bool        # others_cpu or steal over the contention threshold
    process: Annotated[int, COUNT]  # processes=N: the process (1..N) the window was in


class Windows(TypedDict, total=False):
    unit: str              # request or step
    what: str
    rows: Annotated[list[Window], Most(100)]


class ContentionPhase(TypedDict, total=False):
    seconds: Annotated[float, SECONDS]
    others_cpu: Annotated[float, SHARE]
    others_cpu_max: Annotated[float, SHARE]
    others_cpu_free: Annotated[float, SHARE]  # pinned: others on the cores it left free
    steal: Annotated[float, SHARE]
    load_max: Annotated[float | None, RATIO]


class Contention(TypedDict, total=False):
    """What else used the machine while the trial ran (worker/probes/contention.py)."""
    flagged: bool          # past a threshold in warmup or run: the figures are suspect
    summary: str | None    # plain words for the card, or None when quiet
    summary_note: Object | None  # the same as {"id", "values"}, for the reader's language
    cpus: Annotated[int, COUNT]
    cores: Annotated[list[int], Most(MAX_CORES)] | None  # a pinned trial's: judged on them
    free_cores: Annotated[list[int], Most(MAX_CORES)]
    neighbour: Object | None  # pinned: {phase, others_cpu_free}, a neighbour on its free cores
    threshold: Object      # {others_cpu, steal, gpu_others_memory}: the stated limits
    phases: Annotated[dict[str, ContentionPhase], Most(MAX_PHASES)]
    gpu: Object | None     # CUDA: per device others' processes, utilisation, throttle reasons
    method: Object


# One child run of a malloc=auto trial (worker/launcher/passes.py); "pass" is a
# keyword, so the functional form spells it.
Pass = TypedDict("Pass", {
    "pass": str,            # memory, time, or one (CUDA: a single glibc pass)
    "malloc": str,          # live or glibc: the allocator setting it ran under
    "status": str,          # ok, failed, or "not run"
    "seconds": Annotated[float, SECONDS],  # its wall time (the memory pass's: a cost)
    "params": Params,       # what it ran differently from the trial (the memory pass's runs)
    "supplied": Annotated[list[str], Most(100)],  # the report's figures taken from it
    "host_rss_peak": Annotated[int | None, BYTES],  # its own (not the time pass's)
    "what": str,
}, total=False)


class ProcessRow(TypedDict, total=False):
    """One fresh process of a `processes=N` trial (worker/launcher/processes.py)."""
    process: Annotated[int, COUNT]
    status: str | None
    seconds: Annotated[float, SECONDS]   # its wall time
    prep: Annotated[float, SECONDS]      # seconds less its run and data
    run: Annotated[float, SECONDS]       # its run phase(s); a program unit: the program
    count: Annotated[int, COUNT]         # runs it counted (requests, steps, units)
    mean: Annotated[float | None, SECONDS]   # their latency mean ...
    stdev: Annotated[float | None, SECONDS]  # ... and sample sd
    per_run: Annotated[float | None, SECONDS]  # run / count: wall time per run
    windows: Annotated[list[float], Most(100)]  # its windows' means
    contended: bool


class Spread(TypedDict, total=False):
    sd: Annotated[float | None, SECONDS]
    dof: Annotated[int, Range(-1, MAX_COUNT, "degrees of freedom")]
    excess_sd: Annotated[float | None, SECONDS]
    how: str


class Processes(TypedDict, total=False):
    """Where the time figures came from: `count` fresh processes and the spreads."""
    count: Annotated[int, Range(1, specs.MAX_PROCESSES, "a process count"), REQUIRED]
    ran: Annotated[int, COUNT]           # a failed trial: the processes that ran
    seconds: Annotated[float, SECONDS]   # the time pass's wall time, all processes
    rows: Annotated[list[ProcessRow], Most(specs.MAX_PROCESSES)]
    within: Spread                       # the runs' spread inside each process
    between: Spread                      # the spread of the processes' time per run
    one_run: str                         # how phases and seconds read as one user run
    what: str


class QualityProbe(TypedDict, total=False):
    first_tokens: Annotated[list[int], Most(MAX_ITEMS)]
    logits_head: Annotated[list[float | None], Most(MAX_ITEMS)]  # null: not finite
    logits_sd: float | None
    what: str


class Rank(TypedDict, total=False):
    rank: Annotated[int, COUNT, REQUIRED]
    optimizer_state_bytes: Annotated[int, BYTES, REQUIRED]
    shard_params: Annotated[int | None, COUNT]
    host_rss_start: Annotated[int | None, BYTES]
    host_rss_peak: Annotated[int | None, BYTES]
    peak_allocated: Annotated[int | None, BYTES]


class Training(TypedDict, total=False):
    params: Annotated[int, COUNT, REQUIRED]
    precision: Annotated[str, REQUIRED]
    checkpointing: Annotated[str, REQUIRED]
    zero: Annotated[int, COUNT, REQUIRED]
    world: Annotated[int, COUNT, REQUIRED]
    steps: Annotated[int, COUNT, REQUIRED]
    loss_first: Annotated[float | None, REQUIRED]  # null: not finite (the loss diverged)
    loss_final: Annotated[float | None, REQUIRED]
    losses: Annotated[list[float | None], Most(MAX_ITEMS)]
    optimizer_state_theory_per_rank: Annotated[float, BYTES, REQUIRED]
    theory: Annotated[str, REQUIRED]
    theory_note: Object | None
    ranks: Annotated[list[Rank], Most(MAX_DEVICES), REQUIRED]


class Probe(TypedDict, total=False):
    hz: Annotated[float, RATE]
    samples: Annotated[int, COUNT]
    sampler_cpu_seconds: Annotated[float | None, SECONDS]
    what: str


class UnitModel(Stats, total=False):
    """A recipe's units of one kind on one model object (a draft, a target):
    their statistics, and their spread as stability judges it."""
    kind: str
    model: str | None              # class and instance number, "LlamaForCausalLM#2"
    params: Annotated[int | None, AMOUNT]
    iqr_over_median: Annotated[float | None, RATIO]
    stable: bool | None


class ProgramTime(TypedDict, total=False):
    seconds: Annotated[float | None, SECONDS]
    what: str


class Units(TypedDict, total=False):
    kind: str                      # the recipe's `unit`: program, generate, forward, mark:NAME
    unit: str
    count: Annotated[int, COUNT]
    run: Annotated[int, COUNT]
    warmup: Annotated[int, COUNT]
    kinds: dict[str, Annotated[int, COUNT]]
    kept: Annotated[int, COUNT]
    models: Annotated[list[UnitModel], Most(MAX_DEVICES)]
    program: ProgramTime


class TimelinePart(TypedDict, total=False):
    columns: Annotated[list[str], Most(16), REQUIRED]  # t (Unix time), then bytes
    rows: Annotated[list[list[Any]], Most(MAX_ITEMS), REQUIRED]  # each: t, then bytes or null
    method: str


class Report(TypedDict, total=False):
    schema: str                        # SCHEMA
    trial: str | None                  # T12, set by the bot's queue
    worker: str | None
    workload: Annotated[str, REQUIRED]  # llm-infer, llm-train, recipe
    params: Annotated[Params, REQUIRED]  # every parameter, resolved
    status: Literal["running", "ok", "failed"]
    error: TrialError | None
    started: Annotated[float | None, TIME]
    finished: Annotated[float | None, TIME]
    seconds: Annotated[float | None, SECONDS]
    phases: Annotated[list[Phase], Most(MAX_PHASES), REQUIRED]
    memory: Annotated[Memory, REQUIRED]
    latency: Stats | None
    ttft: Stats | None
    decode_per_token: Stats | None
    stability: Stability | None
    throughput: Throughput | None      # {value, unit, what}
    scale: Scale | None
    scenario: str | None
    headline: Headline | None          # {metric, value, unit}
    quality_probe: QualityProbe | None
    training: Training | None
    full_depth: FullDepth              # llm-infer with preset= (arithmetic), hf-* (counted)
    model: Model                       # hf-*: what transformers built, from where
    env: Env
    requested: Params
    attempts: Annotated[list[Attempt], Most(MAX_ATTEMPTS)]
    seconds_lost: Annotated[float, SECONDS]
    timeline: dict[str, TimelinePart] | None  # {sampled, allocator}: {columns, rows, method}
    probe: Probe
    recipe: str | None
    output_tail: str
    slurm: Slurm
    windows: Windows | None            # the run phase in windows (drift inside the trial)
    units: Units | None                # a recipe's generate/model calls the probe timed
    contention: Contention | None      # what else ran on the machine meanwhile
    threads: Threads | None            # intra-op threads: how many, where, who chose
    passes: Annotated[list[Pass], Most(10)] | None  # malloc=auto: memory and time passes
    processes: Processes | None        # processes=N: the time pass's fresh processes
    # The child's and the probe's notes to the launcher, which takes them out
    # before the report leaves the worker:
    threads_seen: Threads             # what torch ran with (worker/launcher's _threads)
    phase_at_exit: str | None         # where a recipe's probe last saw the program
    allocator_samples: list[Object]   # the allocator's samples, for the timeline


def new_report(workload: str, params: Object) -> Report:
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
        "memory": cast(Memory, {"method": {}, **dict.fromkeys(MEMORY_FIELDS)}),  # each unmeasured
        "latency": None,
        "throughput": None,
        "scale": None,
        "env": {},
    }
    if workload == "llm-infer" and params.get("preset", "none") != "none":
        report["full_depth"] = cast(FullDepth, arithmetic.full_depth(params))  # arithmetic's dict
    return report


def fail(report: Report, error_class: str, message: str, phase: str | None = None) -> Report:
    """Mark a report failed. The message is kept to its last 2000 characters
    because the tail of a traceback or log names the cause."""
    assert error_class in ERROR_CLASSES, error_class
    report["status"] = "failed"
    report["error"] = {"class": cast(ErrorClass, error_class), "message": message[-2000:],
                       "phase": phase}
    return report


def attempt(n: int, report: Report, changed: Params) -> Attempt:
    """Try `n` as `attempts[]` keeps it: its verdict, its message's tail (500
    characters: the cause), its seconds; `next` is the caller's to say."""
    err = report.get("error")
    # a try the launcher returned is ended: "running" is not one of an attempt's states
    return {"attempt": n, "status": "ok" if report["status"] == "ok" else "failed",
            "error_class": err["class"] if err else None,
            "message": (err["message"] if err else "")[-500:],
            "seconds": report.get("seconds"), "changed": changed, "next": None}


def validate(report: object, spec: Object | None = None) -> list[str]:
    """Problems that make a posted report unusable, each naming its field's JSON
    path (`report.memory.host_rss_peak`); empty when it is fine. Types, required
    keys, sizes and ranges come from the annotations above; `spec`, the job's
    stored spec, says which kind each parameter must be."""
    if not isinstance(report, dict):
        return ["`report` must be a JSON object"]
    problems = []
    if report.get("schema") != SCHEMA:
        problems.append(f"`report.schema` must be {SCHEMA!r}")
    if report.get("status") not in ("ok", "failed"):
        problems.append("`report.status` must be 'ok' or 'failed'")
    if report.get("status") == "failed" and not isinstance(report.get("error"), dict):
        problems.append(f"a failed report needs `report.error` {{class: one of "
                        f"{', '.join(ERROR_CLASSES)}, message}}")
    problems += shape.problems(report, Report, "report")
    problems += reportcheck.timeline(report.get("timeline"))
    if isinstance(report.get("params"), dict):
        problems += reportcheck.params(report["params"], spec)
    return list(dict.fromkeys(problems))[:shape.MAX_PROBLEMS]
