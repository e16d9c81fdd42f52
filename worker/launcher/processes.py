"""`processes=N`: a trial's time figures from N fresh processes, one after another.

One process sees the spread of its own requests and the drift inside its run
phase, but not that the same config in the next process may run several
percent slower (memory layout, clocks, the neighbours of that minute). Like
pyperf (more processes, fewer values each), the time pass runs as N fresh
children: each pays its own start, weights and warmup, and a built-in's
measured requests (or steps) and run cap are split between them, so the run
phase costs about what one process's did. A recipe's program runs whole in
each (its parameters are the admin's), so it costs N programs.

The N reports merge into ONE report in the trial's own shape:

- latency (and ttft, decode step): pooled over every process, count, mean and
  stdev exactly; p50/p90/p99 are the count-weighted mean of the processes' own
  percentiles (the children report summaries, not their samples);
- phases and `seconds` read as ONE user run: each one-time phase (setup,
  launch, weights, data, warmup, teardown) is the mean over processes, the run
  phase(s) the processes' run phases end to end (every measured request, as one
  process would run them); a recipe whose unit is the whole program: every
  phase the mean (one user run is one program);
- memory peaks the max over processes; contention flagged if any process was;
- `processes`: the count, each process's figures, and the within- and
  between-process spreads with how they were computed (docs/report-schema.md).

The memory pass of malloc=auto stays one process (worker/launcher/passes.py).
"""
from __future__ import annotations

import math
import statistics
import time
from typing import cast

from worker.report import MEMORY_FIELDS, Report
from worker.spec import TrialSpec

ONE_TIME = ("setup", "launch", "weights", "warmup", "data")
FIRST_ONLY = ("recipe-environment",)  # built once, reused after: the first process's
MIN_RUNS = 2  # per process: a spread inside each process needs two values


def count(spec: TrialSpec) -> int:
    return int(spec.params.get("processes", 1))


def share(spec: TrialSpec, n: int) -> dict:
    """One process's parameters: a built-in's measured requests (or steps) and
    run cap split between the n processes, at least MIN_RUNS each."""
    p = spec.params
    if spec.recipe or n == 1:
        return {}
    out = {}
    for key in ("repeats", "steps"):
        if key in p:
            out[key] = max(MIN_RUNS, math.ceil(p[key] / n))
    if "run_cap" in p:
        out["run_cap"] = max(1, math.ceil(p["run_cap"] / n))
    return out


def run(spec: TrialSpec, run_one, cancel, **kwargs) -> Report:
    """The time of `spec` from its `processes=` fresh children through `run_one`
    (the launcher's run_trial), merged; a process that fails is the report."""
    n = count(spec)
    started = time.monotonic()
    timeout = spec.params.get("timeout", 1800)
    mine = {k: v for k, v in spec.params.items() if k != "processes"}
    reports = []
    for i in range(n):
        left = max(1, math.ceil(timeout - (time.monotonic() - started)))
        child = TrialSpec(spec.workload, {**mine, **share(spec, n), "timeout": left},
                          spec.recipe)
        report = run_one(child, cancel, **kwargs)
        reports.append(report)
        if report["status"] != "ok":  # the casts: this module merges reports as open dicts
            return cast(Report, _failed(spec, reports, n, time.monotonic() - started))
    return cast(Report, merge(spec, reports, time.monotonic() - started))


def _failed(spec: TrialSpec, reports: list[dict], n: int, wall: float) -> dict:
    report = reports[-1]
    report["params"] = dict(spec.params)
    if n > 1:
        err = report.get("error") or {"class": "crash", "message": "", "phase": None}
        why = f"process {len(reports)} of {n} (processes={n}) failed: "
        err["message"] = why + err["message"][-(2000 - len(why)):]
        report["error"] = err
    report["processes"] = {"count": n, "ran": len(reports), "seconds": wall,
                           "rows": [_row(i, r) for i, r in enumerate(reports)],
                           "what": f"{len(reports)} of {n} processes ran; the last failed"}
    return report


def merge(spec: TrialSpec, reports: list[dict], wall: float) -> dict:
    """The processes' reports as one (module docstring says how)."""
    rows = [_row(i, r) for i, r in enumerate(reports)]  # before the first is merged into
    out = reports[0]
    if len(reports) > 1:
        _merge_times(out, reports, program=_unit(out) == "program")
        _merge_memory(out, reports)
        _merge_contention(out, reports)
        _merge_windows(out, reports)
    out["params"] = dict(spec.params)
    if len(reports) == 1:  # one process: its own wall time, as without processes=
        wall = out["seconds"]
    out["processes"] = {"count": len(reports), "seconds": wall, "rows": rows,
                        **spreads(rows), "one_run": ONE_RUN, "what": WHAT}
    out["started"] = reports[0].get("started")
    out["finished"] = reports[-1].get("finished")
    return out


ONE_RUN = ("phases and seconds read as one user run: each one-time phase (setup, launch, "
           "weights, data, warmup, teardown) the mean over the processes, the run phase(s) "
           "the processes' run phases end to end; a recipe whose unit is the program: every "
           "phase the mean; the trial's own wall time is processes.seconds")
WHAT = ("fresh processes run one after another, each with its own start, weights and warmup; "
        "a built-in's measured requests split between them")


def _unit(r: dict) -> str | None:
    return (r.get("units") or {}).get("kind") if r.get("recipe") else None


def run_phase(p: dict) -> bool:
    """A phase the run's time is in (not a one-time phase)."""
    return p["name"] not in ONE_TIME and p.get("found_by") not in (
        "recipe-setup", *FIRST_ONLY)


def _row(i: int, r: dict) -> dict:
    """One process's figures: seconds, prep (seconds less its run and data),
    its run per counted unit, and its units' count, mean and stdev."""
    phases = r.get("phases") or []
    data = sum(p["seconds"] for p in phases if p["name"] == "data")
    program = ((r.get("units") or {}).get("program") or {}).get("seconds")
    lat = r.get("latency") or {}
    seconds = r.get("seconds") or 0.0
    if _unit(r) == "program":
        run, n, mean, sd, data = program or 0.0, 1, program, None, 0.0
    else:
        run = sum(p["seconds"] for p in phases if run_phase(p))
        n, mean, sd = lat.get("count") or 0, lat.get("mean"), _within_models(r)
    rows = ((r.get("windows") or {}).get("rows")) or []
    return {"process": i + 1, "status": r.get("status"), "seconds": seconds,
            "prep": max(0.0, seconds - run - data), "run": run, "count": n, "mean": mean,
            "stdev": sd, "per_run": run / n if n else None,
            "windows": [w["mean"] for w in rows],
            "contended": bool((r.get("contention") or {}).get("flagged"))}


def _within_models(r: dict) -> float | None:
    """The runs' sd; a recipe's calls on several models (a draft, a target)
    pooled within each model: their difference is not noise."""
    models = (r.get("units") or {}).get("models") or []
    if len(models) < 2:
        return (r.get("latency") or {}).get("stdev")
    dof = sum(m["count"] - 1 for m in models if m.get("stdev") is not None)
    ss = sum((m["count"] - 1) * m["stdev"] ** 2 for m in models if m.get("stdev") is not None)
    return math.sqrt(ss / dof) if dof else None


def spreads(rows: list[dict]) -> dict:
    """Within: the requests' pooled sd inside each process. Between: the sd of
    the processes' run time per unit, and its excess over what the within
    spread alone puts into a process's mean (drift between processes)."""
    timed = [r for r in rows if r["count"]]
    dof_w = sum(r["count"] - 1 for r in timed if r["stdev"] is not None)
    ss = sum((r["count"] - 1) * r["stdev"] ** 2 for r in timed if r["stdev"] is not None)
    within = math.sqrt(ss / dof_w) if dof_w else None
    per = [r["per_run"] for r in timed if r["per_run"] is not None]
    between = statistics.stdev(per) if len(per) > 1 else None
    excess = None
    if between is not None:
        share_ = (within or 0.0) ** 2 / (sum(r["count"] for r in timed) / len(timed))
        excess = math.sqrt(max(0.0, between ** 2 - share_))
    return {
        "within": {"sd": within, "dof": dof_w,
                   "how": "pooled sample sd of the runs around their own process's mean, "
                          "sqrt(sum((n_i-1)*sd_i^2) / sum(n_i-1))"},
        "between": {"sd": between, "dof": len(per) - 1, "excess_sd": excess,
                    "how": "sample sd of the processes' run time per unit (run phase / "
                           "count); excess_sd: sqrt(max(0, sd^2 - within^2/mean count)), the "
                           "drift between processes beyond the runs' own spread"}}


def _merge_times(out: dict, reports: list[dict], program: bool) -> None:
    names = [[p["name"] for p in r["phases"]] for r in reports]
    teardown = statistics.fmean(r["seconds"] - sum(p["seconds"] for p in r["phases"])
                                for r in reports)
    if all(n == names[0] for n in names):
        for i, phase in enumerate(out["phases"]):
            if phase.get("found_by") in FIRST_ONLY:
                continue
            each = [r["phases"][i]["seconds"] for r in reports]
            phase["seconds"] = sum(each) if run_phase(phase) and not program else (
                statistics.fmean(each))
            for key in ("host_rss_peak", "peak_allocated", "peak_reserved"):
                phase[key] = _max([r["phases"][i].get(key) for r in reports])
    out["seconds"] = sum(p["seconds"] for p in out["phases"]) + teardown
    for key in ("latency", "ttft", "decode_per_token"):
        if out.get(key):
            out[key] = pool([r.get(key) for r in reports])
    _merge_rates(out, reports)
    units = out.get("units")
    if units:
        for key in ("count", "run", "warmup", "kept"):
            if key in units:
                units[key] = sum((r.get("units") or {}).get(key) or 0 for r in reports)
        kinds = [(r.get("units") or {}).get("kinds") or {} for r in reports]
        if units.get("kinds"):
            units["kinds"] = {k: sum(c.get(k, 0) for c in kinds) for k in units["kinds"]}
        models = [(r.get("units") or {}).get("models") or [] for r in reports]
        if units.get("models") and all(len(m) == len(models[0]) for m in models):
            units["models"] = [{**g, **(pool([m[i] for m in models]) or {})}
                               for i, g in enumerate(units["models"])]
        if (units.get("program") or {}).get("seconds") is not None:
            units["program"]["seconds"] = statistics.fmean(
                r["units"]["program"]["seconds"] for r in reports)


def pool(stats: list[dict | None]) -> dict | None:
    """Count, mean and stdev over all the processes' values (exact from each
    one's count, mean and sd); percentiles the count-weighted mean of theirs."""
    parts = [s for s in stats if s and s.get("count") and s.get("mean") is not None]
    if not parts:
        return stats[0]
    k = sum(s["count"] for s in parts)
    mean = sum(s["count"] * s["mean"] for s in parts) / k
    ss = sum((s["count"] - 1) * (s.get("stdev") or 0.0) ** 2 + s["count"] * (s["mean"] - mean)
             ** 2 for s in parts)
    out = {**parts[0], "count": k, "mean": mean, "stdev": math.sqrt(ss / (k - 1)) if k > 1
           else None}
    for q in ("p50", "p90", "p99"):
        if all(s.get(q) is not None for s in parts):
            out[q] = sum(s["count"] * s[q] for s in parts) / k
    out["what"] = ((parts[0].get("what") or "") + f"; pooled over {len(parts)} processes: "
                   "count, mean and stdev exact, p50/p90/p99 the count-weighted mean of each "
                   "process's own")
    return out


def _merge_rates(out: dict, reports: list[dict]) -> None:
    """Throughput ∝ 1/mean latency: pooled as count over the sum of count/rate."""
    thr = out.get("throughput")
    counts = [(r.get("latency") or {}).get("count") or 0 for r in reports]
    rates = [(r.get("throughput") or {}).get("value") for r in reports]
    known = [v for v in rates if v]
    if thr and len(known) == len(rates) and sum(counts):
        thr["value"] = sum(counts) / sum(c / v for c, v in zip(counts, known))
    h = out.get("headline")
    if h and h.get("metric") == "throughput" and thr:
        h["value"] = thr["value"]
    elif h and h.get("metric") == "p90 latency" and (out.get("latency") or {}).get("p90"):
        h["value"] = out["latency"]["p90"]
    st = [s for r in reports if (s := r.get("stability"))]
    if st:
        worst = max(st, key=lambda s: s.get("iqr_over_median") or 0.0)
        verdicts = [s.get("stable") for s in st]
        out["stability"] = {**worst, "count": sum(s.get("count") or 0 for s in st),
                            "seconds": sum(s.get("seconds") or 0.0 for s in st),
                            "stable": (False if False in verdicts else
                                       None if None in verdicts else True)}
    if out.get("scale"):
        for key in ("requests", "tokens"):
            if key in out["scale"]:
                out["scale"][key] = sum((r.get("scale") or {}).get(key) or 0 for r in reports)


def _max(values: list) -> int | float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _merge_memory(out: dict, reports: list[dict]) -> None:
    mem = out["memory"]
    top = max(reports, key=lambda r: r["memory"].get("host_rss_peak") or 0)
    for key in MEMORY_FIELDS:
        if key == "host_rss_launch_share":
            mem[key] = top["memory"].get(key)
        elif key in mem:
            mem[key] = _max([r["memory"].get(key) for r in reports])
    if "host_rss_peak" in mem["method"]:  # how the max was measured: the kernel's or sampled
        mem["method"]["host_rss_peak"] = top["memory"]["method"]["host_rss_peak"]
    for key in list(mem["method"]):
        if key in MEMORY_FIELDS and mem.get(key) is not None:
            mem["method"][key] += f"; the max over {len(reports)} processes"


def _merge_contention(out: dict, reports: list[dict]) -> None:
    flagged = [r["contention"] for r in reports if (r.get("contention") or {}).get("flagged")]
    if flagged:
        out["contention"] = flagged[0]


def _merge_windows(out: dict, reports: list[dict]) -> None:
    rows = []
    for i, r in enumerate(reports):
        rows += [{**w, "process": i + 1} for w in ((r.get("windows") or {}).get("rows") or [])]
    if rows and out.get("windows"):
        out["windows"]["rows"] = rows
        out["windows"]["what"] += (f"; each of the {len(reports)} processes' windows, in "
                                   "turn (process: which)")
