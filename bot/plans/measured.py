"""What one trial measured, as a plan reads it: its phases' seconds (prep,
data, the run), what one run is (the recipe's unit) and whether it has one,
and what it ran (config, environment, code), which a plan's lock compares.
Pure functions of a stored report; bot/plans/estimate.py builds on them."""
from __future__ import annotations

import re

from bot.states import Json
from worker.i18n import N_, _


class EstimateError(ValueError):
    """Trials a block cannot be estimated from; the message says why."""

# A recipe's `launch` (its interpreter and imports before its first phase) is
# prep too: with run units timed it would otherwise be spread over its runs.
PREP_PHASES = ("setup", "launch", "weights", "warmup")
# Parameters that change how a trial measures, not what it runs.
RUN_CONTROL = {"repeats", "stability", "run_cap", "warmup", "seed", "timeout", "on_oom",
               "attempts", "processes"}
def phase_seconds(report: Json, name: str) -> float:
    seconds: float = sum(p["seconds"] for p in report.get("phases") or [] if p["name"] == name)
    return seconds


def unit_kind(report: Json) -> str | None:
    """A recipe's declared unit (program, generate, forward, mark:NAME); None
    for a built-in workload and a recipe report from before `unit`."""
    return (report.get("units") or {}).get("kind") if report.get("recipe") else None


def program_seconds(report: Json) -> float:
    return ((report.get("units") or {}).get("program") or {}).get("seconds") or 0.0


def unit_label(kind: str) -> str:
    """One run's name in a block line: `100 runs × 4.2 s per program run`."""
    if kind.startswith("mark:"):
        return _("`{name}` span", name=kind.removeprefix("mark:"))
    label = UNIT_LABELS.get(kind)
    return _(label) if label else kind  # a kind from a newer worker: its own name


UNIT_LABELS = {"program": N_("program run"), "generate": N_("generate call"),
               "forward": N_("model call")}


def unit_problem(trial: Json) -> str | None:
    """Why a recipe trial has no run of its declared unit, or None."""
    r, name = trial["report"], trial["trial"]
    kind = unit_kind(r)
    if kind is None:
        return None
    units = r.get("units") or {}
    if kind == "program":
        return None if program_seconds(r) > 0 else _(
            "{trial} recorded no time for its program (a report from a worker that did not "
            "time it); run it again", trial=name)
    if units.get("run"):
        return None
    if kind.startswith("mark:"):
        return _("{trial}'s program marked no `{name}` span, and its recipe counts one run as "
                 "one (unit = \"{kind}\"): print `TRIALBOT_UNIT {name}` where a run begins "
                 "(or call trialbot_probe.unit(\"{name}\")), or declare another unit",
                 trial=name, name=kind.removeprefix("mark:"), kind=kind)
    made = (units.get("kinds") or {}).get(kind, 0)
    return _("{trial} made {n} {unit}(s) and none in its run phase (the first one is the "
             "warmup), and its recipe counts one run as one {unit} (unit = \"{kind}\"); "
             "declare unit = \"program\" to count whole invocations, or run more than one",
             trial=name, n=made, unit=unit_label(kind), kind=kind)


def teardown_seconds(report: Json) -> float:
    """Wall time of the trial outside its phases: the child's exit, memory being
    freed, the gaps between phases. A rented GPU is paid for it too."""
    inside: float = sum(p["seconds"] for p in report.get("phases") or [])
    wall: float = report.get("seconds") or 0.0
    return max(0.0, wall - inside)


def prep_seconds(report: Json) -> float:
    """One-time time of a rental session: a reused recipe environment counts as
    the build it saved, measured when it was built (a fresh box builds it once)."""
    return _prep_measured(report) + reused_build_seconds(report)


def reused_build_seconds(report: Json) -> float:
    """What a reused recipe environment's build took beyond its reuse."""
    saved: float = sum(max(0.0, p["build_seconds"] - p["seconds"])
                       for p in report.get("phases") or []
                       if p.get("cached") and p.get("build_seconds") is not None)
    return saved


def _prep_measured(report: Json) -> float:
    if unit_kind(report) == "program":  # all the program does is in its runs
        return max(0.0, (report.get("seconds") or 0.0) - program_seconds(report))
    return sum(phase_seconds(report, p) for p in PREP_PHASES) + teardown_seconds(report)


def data_seconds(report: Json) -> float:
    """The data phases, unless each program run loads its own data."""
    return 0.0 if unit_kind(report) == "program" else phase_seconds(report, "data")


def config(report: Json) -> Json:
    """What a trial ran, without the knobs that only change how it measured."""
    what = {k: v for k, v in (report.get("params") or {}).items() if k not in RUN_CONTROL}
    if report.get("recipe"):
        what["recipe"] = report["recipe"]
    return {"workload": report["workload"], **what}


def env_kind(report: Json) -> str:
    e = report.get("env") or {}
    if e.get("gpu_count"):
        return f"{e['gpu_count']}× {e['gpu_name']}"
    return f"CPU ({e.get('cpu') or 'unknown'})"


def code_version(report: Json) -> str:
    e = report.get("env") or {}
    if report.get("recipe"):
        return e.get("code_version") or "unrecorded"
    return f"built-in {report['workload']}, torch {e.get('torch')}"


def code_text(code: str) -> str:
    """A stored code version as shown: it is compared as stored (English), and its
    words are translated here: "built-in llm-infer, torch 2.13.0", "unrecorded"."""
    built_in = re.fullmatch(r"built-in (\S+), torch (.+)", code)
    if built_in:
        return _("built-in {workload}, torch {torch}", workload=built_in[1], torch=built_in[2])
    return _("unrecorded") if code == "unrecorded" else code


def lock_differences(lock: Json, report_config: Json, code: str) -> list[str]:
    """How a trial differs from what the plan's lock fixed; empty when comparable."""
    diff = differences(lock["config"], report_config)
    if code != lock["code"]:
        diff.append(_("code {old} → {new}", old=code_text(lock["code"]), new=code_text(code)))
    return diff


def differences(a: Json, b: Json) -> list[str]:
    a, b = _with_defaults(a), _with_defaults(b)
    keys = sorted(set(a) | set(b))
    return [f"{k} {a.get(k)} → {b.get(k)}" for k in keys if a.get(k) != b.get(k)]


BUILT_IN = ("llm-infer", "llm-train", "hf-infer", "hf-train")


def _with_defaults(c: Json) -> Json:
    """A built-in workload's config from before `malloc=` existed ran with
    glibc's default, and malloc=auto times its run under glibc too (its live
    pass gives only host memory): both are the same config as malloc=glibc."""
    if c.get("workload") in BUILT_IN and c.get("malloc", "auto") == "auto":
        return {**c, "malloc": "glibc"}
    return c


def run_seconds(report: Json) -> float:
    """The trial's wall time minus prep and data: its run phase(s), or its
    program for a recipe whose run is the program."""
    return max(0.0, (report.get("seconds") or 0.0) - _prep_measured(report)
               - data_seconds(report))
