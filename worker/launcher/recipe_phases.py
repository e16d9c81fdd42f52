"""A recipe's phases and run units, from its stdout marks and its probe file.

Phases: the program's own `TRIALBOT_PHASE` marks win. Before the first mark
(or all along, in a program without marks) the probe's hooks find them in
Hugging Face code: weights, data, warmup (the first generate or model call),
run (the later ones, up to the last one's end). From the first mark on, only
marks make phases. Time before the first phase is `launch`; a program with
neither is one `run` phase. Each phase says how it was found (`found_by`).

Units: each outermost generate or model call the probe timed (with the model
object it ran on), and each span the program marked (`TRIALBOT_UNIT NAME`).
The recipe's `unit` says which of them is one run: `program` (the whole
invocation; its time is in `units.program`), `generate`, `forward` or
`mark:NAME`. The report's latency is over the declared kind's units in phases
named `run` (a marked kind's in every phase: the program chose them), as a
built-in trial's is over its run phase's requests; `units.models` has them
apart per model, and the stability is judged per model.
"""
from __future__ import annotations

from typing import cast

from worker import stats, windows
from worker.report import Phase, Report
from worker.reportparts import Peaks

PHASE_MEMORY = ("peak_allocated", "peak_reserved", "allocated", "reserved")
UNIT_NAMES = {"generate": "generate call", "forward": "model call", "program": "program run"}
HOOKED = ("generate", "forward")


def phases(run, probed: list[dict]) -> list[Phase]:
    """The report's phases of one recipe run (`run`: a launcher Run)."""
    first_mark = run.marks[0][1] if run.marks else None
    hooked = [p for p in probed if str(p.get("found_by", "")).startswith("hook:")
              and p.get("start") is not None
              and (first_mark is None or p["start"] < first_mark)]
    events: list[tuple[str, float, str, dict | None]] = [
        (p["name"], p["start"], p["found_by"], p) for p in hooked]
    events += [(name, t, "mark", None) for name, t in run.marks]
    if not events:
        events = [("run", run.started, "whole-program", None)]
    if events[0][1] - run.started > 0.001:
        events.insert(0, ("launch", run.started, "start", None))
    end = max(run.ended, events[-1][1])
    out: list[Phase] = []
    for i, (name, start, found_by, entry) in enumerate(events):
        stop = events[i + 1][1] if i + 1 < len(events) else (entry or {}).get("end") or end
        # Wall times of two processes: a clock stepped back must not give a negative phase
        phase: Phase = {"name": name, "start": start, "end": stop,
                        "seconds": max(0.0, stop - start), "found_by": found_by}
        if entry is not None:  # a hook's phase: the probe saw its start and its peaks
            phase.update(_peaks(entry))
        out.append(phase)
    # Marked phases and launch take the probe's peaks paired by position from the
    # last back (the probe always has a `launch` entry first; names may repeat).
    own = [p for p in out if not p["found_by"].startswith("hook:")]
    seen = [p for p in probed if not str(p.get("found_by", "")).startswith("hook:")]
    for phase, entry in zip(reversed(own), reversed(seen)):
        phase.update(_peaks(entry))
    return out


def _peaks(entry: dict) -> Peaks:
    """The allocator's figures in one of the probe's phases (PHASE_MEMORY), null where absent."""
    return {"peak_allocated": entry.get("peak_allocated"),
            "peak_reserved": entry.get("peak_reserved"),
            "allocated": entry.get("allocated"), "reserved": entry.get("reserved")}


def unit_name(kind: str) -> str:
    """`generate call`, `model call`, `program run`, `prompt span` (mark:prompt)."""
    return UNIT_NAMES.get(kind) or f"{kind.removeprefix('mark:')} span"


def results(probe: dict, phase_list: list[Phase], kind: str = "program",
            program: float | None = None) -> Report:
    """The report's units (always, for the declared `kind` and the program's
    own seconds) and the latency, stability and windows of the units one run
    is counted in; no latency when the program made none."""
    units = probe.get("units") or []
    if kind.startswith("mark:") and not any(u["kind"] == kind for u in units):
        units = units + _marked_phases(phase_list, kind)
    chosen = _chosen(units, kind)
    seen = probe.get("units_seen", len(units)) + (len(units) - len(probe.get("units") or []))
    label = _label(chosen, kind)
    summary = {"kind": kind, "unit": label, "count": seen, "run": len(chosen),
               "warmup": sum(u.get("phase") == "warmup" for u in units),
               "kinds": _count(u["kind"] for u in units), "kept": len(units),
               "models": _models(chosen, probe.get("models") or {}),
               "program": {"seconds": program,
                           "what": "the program's process from its start by the worker to its "
                                   "exit (launch, loads, warmup, runs and its own reporting; "
                                   "no setup commands, no environment build)"},
               "what": _what(kind, len(units), seen)}
    out: dict = {"units": summary}
    if chosen:
        latencies = [u["latency"] for u in chosen]
        run_seconds = sum(p["seconds"] for p in phase_list if p["name"] == "run")
        out.update(latency={**stats.summary(latencies), "unit": "s",
                            "what": f"one {label}: " + summary["what"]},
                   stability=_stability(chosen, run_seconds),
                   windows=windows.split(chosen, label))
    # Its parts are stats' and windows' dicts: worker/stats.py and worker/windows.py
    # sit below the report and cannot name its types.
    return cast(Report, out)


def _chosen(units: list[dict], kind: str) -> list[dict]:
    """The units one run is counted in: the declared kind's in the run phase
    (a marked kind's anywhere); for `program`, every unit in the run phase."""
    if kind.startswith("mark:"):
        return [u for u in units if u["kind"] == kind]
    return [u for u in units if u.get("phase") == "run" and kind in ("program", u["kind"])]


def _label(chosen: list[dict], kind: str) -> str:
    if kind != "program":
        return unit_name(kind)
    names = {unit_name(u["kind"]) for u in chosen}
    return names.pop() if len(names) == 1 else "run unit"


def _count(items) -> dict:
    out: dict = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _marked_phases(phase_list: list[Phase], kind: str) -> list[dict]:
    """A program that marks each run as a phase (`TRIALBOT_PHASE NAME`, up to
    the next mark) instead of with `TRIALBOT_UNIT`: each such phase is a unit."""
    name = kind.removeprefix("mark:")
    return [{"kind": kind, "phase": p["name"], "t0": p.get("start"), "t1": p.get("end"),
             "latency": p["seconds"], "model": None}
            for p in phase_list if p["name"] == name and p.get("found_by") == "mark"]


def _models(chosen: list[dict], known: dict) -> list[dict]:
    """The chosen units apart per (kind, model): a draft and a target model
    are two distributions, each with its own spread."""
    groups: dict[tuple[str, str | None], list[float]] = {}
    for u in chosen:
        groups.setdefault((u["kind"], u.get("model")), []).append(u["latency"])
    out = []
    for (kind, model), lat in groups.items():
        info = known.get(model) or {}
        st = stats.fixed_stability(lat, sum(lat))
        out.append({"kind": kind, "model": model,
                    "params": info.get("params"), **stats.summary(lat),
                    "iqr_over_median": st["iqr_over_median"], "stable": st["stable"]})
    return out


def _stability(chosen: list[dict], run_seconds: float) -> dict:
    """Judged per model: the spread of a mix of a draft's and a target's calls
    is their difference, not noise. With several, the widest one's."""
    groups: dict[tuple[str, str | None], list[float]] = {}
    for u in chosen:
        groups.setdefault((u["kind"], u.get("model")), []).append(u["latency"])
    judged = [stats.fixed_stability(lat, run_seconds) for lat in groups.values()]
    return max(judged, key=lambda st: st["iqr_over_median"] or 0.0)


def _what(kind: str, kept: int, seen: int) -> str:
    what = ("outermost generate calls and model calls (a forward inside generate or inside "
            "another model is part of it), each synchronized on CUDA at both ends and timed "
            "with perf_counter in the recipe's process by trialbot's injected probe, with "
            "the model object each ran on; spans the program marked with TRIALBOT_UNIT; "
            f"one run is one {unit_name(kind)} (the recipe's unit = \"{kind}\"); `run` "
            "counts the units the latency is over: the declared kind's in phases named run "
            "(a marked kind's in every phase)")
    return what + (f"; only the first {kept} of {seen} were kept" if seen > kept else "")
