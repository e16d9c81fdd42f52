"""A recipe's phases and run units, from its stdout marks and its probe file.

Phases: the program's own `TRIALBOT_PHASE` marks win. Before the first mark
(or all along, in a program without marks) the probe's hooks find them in
Hugging Face code: weights, data, warmup (the first generate or model call),
run (the later ones, up to the last one's end). From the first mark on, only
marks make phases. Time before the first phase is `launch`; a program with
neither is one `run` phase. Each phase says how it was found (`found_by`).

Units: each outermost generate or model call the probe timed. The report's
latency is over the units in phases named `run`, as a built-in trial's is
over its run phase's requests.
"""
from __future__ import annotations

from worker import stats, windows

PHASE_MEMORY = ("peak_allocated", "peak_reserved", "allocated", "reserved")
UNIT_NAMES = {"generate": "generate call", "forward": "model call"}


def phases(run, probed: list[dict]) -> list[dict]:
    """The report's phases of one recipe run (`run`: a launcher Run)."""
    first_mark = run.marks[0][1] if run.marks else None
    hooked = [p for p in probed if str(p.get("found_by", "")).startswith("hook:")
              and p.get("start") is not None
              and (first_mark is None or p["start"] < first_mark)]
    events = [(p["name"], p["start"], p["found_by"], p) for p in hooked]
    events += [(name, t, "mark", None) for name, t in run.marks]
    if not events:
        events = [("run", run.started, "whole-program", None)]
    if events[0][1] - run.started > 0.001:
        events.insert(0, ("launch", run.started, "start", None))
    end = max(run.ended, events[-1][1])
    out = []
    for i, (name, start, found_by, entry) in enumerate(events):
        stop = events[i + 1][1] if i + 1 < len(events) else (entry or {}).get("end") or end
        # Wall times of two processes: a clock stepped back must not give a negative phase
        phase = {"name": name, "start": start, "end": stop, "seconds": max(0.0, stop - start),
                 "found_by": found_by}
        if entry is not None:  # a hook's phase: the probe saw its start and its peaks
            phase.update({k: entry.get(k) for k in PHASE_MEMORY})
        out.append(phase)
    # Marked phases and launch take the probe's peaks paired by position from the
    # last back (the probe always has a `launch` entry first; names may repeat).
    own = [p for p in out if not p["found_by"].startswith("hook:")]
    seen = [p for p in probed if not str(p.get("found_by", "")).startswith("hook:")]
    for phase, entry in zip(reversed(own), reversed(seen)):
        phase.update({k: entry.get(k) for k in PHASE_MEMORY})
    return out


def results(probe: dict, phase_list: list[dict]) -> dict:
    """The report's latency, stability, windows and units from the probe's
    units; {} when the program made no generate or model call."""
    units = probe.get("units") or []
    if not units:
        return {}
    run_units = [u for u in units if u.get("phase") == "run"]
    kinds = {}
    for u in units:
        kinds[u["kind"]] = kinds.get(u["kind"], 0) + 1
    names = {UNIT_NAMES.get(u["kind"], u["kind"]) for u in run_units}
    unit = names.pop() if len(names) == 1 else "run unit"
    seen = probe.get("units_seen", len(units))
    summary = {"unit": unit, "count": seen, "run": len(run_units),
               "warmup": sum(u.get("phase") == "warmup" for u in units), "kinds": kinds,
               "kept": len(units),
               "what": "outermost generate calls and model calls (a forward inside generate "
                       "or inside another model is part of it), each synchronized on CUDA at "
                       "both ends and timed with perf_counter in the recipe's process by "
                       "trialbot's injected probe; `run` counts those in phases named run"
                       + (f"; only the first {len(units)} of {seen} were kept"
                          if seen > len(units) else "")}
    if not run_units:
        return {"units": summary}
    latencies = [u["latency"] for u in run_units]
    run_seconds = sum(p["seconds"] for p in phase_list if p["name"] == "run")
    return {
        "units": summary,
        "latency": {**stats.summary(latencies), "unit": "s",
                    "what": f"one {unit} in the run phase: " + summary["what"]},
        "stability": stats.fixed_stability(latencies, run_seconds),
        "windows": windows.split(run_units, unit),
    }
