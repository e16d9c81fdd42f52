"""The estimate of docs/design.md §3, per block and for a plan. Pure: the
handler passes in the trials, attempts, measured idle and fits it read from
the store (bot/plans/service.py); the review of estimate against actual is
bot/plans/review.py.

    hours = prep + successful runs + retries + data prep + idle wait

A *run* is one repetition of the trial's measured unit: one request for
`llm-infer` (its latency samples); for a recipe, what its `unit` declares
(docs/recipes.md#what-one-run-is): the whole program (each trial one sample),
one generate call, one model call or one span the program marked; a recipe
report from before `unit` counts its run units, else its run phase. A trial
without a unit of the declared kind, or a time per run of zero, is refused,
never counted as 0 GPU-h. Every component carries where it came from.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal

from bot.fits.ols import t_quantile
from bot.plans.footing import off_target
from bot.plans.measured import (  # noqa: F401 - re-exported: callers read them here
    PREP_PHASES,
    EstimateError,
    code_version,
    config,
    data_seconds,
    differences,
    env_kind,
    lock_differences,
    phase_seconds,
    prep_seconds,
    program_seconds,
    reused_build_seconds,
    run_seconds,
    teardown_seconds,
    unit_kind,
    unit_label,
    unit_problem,
)
from bot.plans.perrun import per_run, spread  # noqa: F401 - re-exported
from bot.states import WAITING, JobStatus, Json, Outcome
from worker.i18n import _, pgettext

# The names callers read here from measured.py and perrun.py: strict mypy re-exports an
# import only when __all__ names it (this module's own names are public as always).
__all__ = [
    "PREP_PHASES", "EstimateError", "code_version", "config", "data_seconds", "differences",
    "env_kind", "lock_differences", "phase_seconds", "prep_seconds", "program_seconds",
    "reused_build_seconds", "run_seconds", "teardown_seconds", "unit_kind", "unit_label",
    "unit_problem", "per_run", "spread"]

# A block, its estimate and the trials it rests on (bot/plans/service.py's estimates).
Estimated = tuple[Json, Json, list[Json]]

LEVEL = 0.90  # the prediction interval shown


def hours(seconds: float) -> Decimal:
    """GPU-seconds as GPU-hours, unrounded (bot/figures.py rounds what is shown)."""
    return Decimal(repr(float(seconds))) / 3600


def in_hours(estimates: list[Json]) -> list[Json]:
    """Every component, block total and interval in GPU-hours, unrounded: a
    total is the exact sum of its parts, and each figure is rounded once, where
    it is shown, so `show`, `review`, `export` and the digest print the same."""
    for e in estimates:
        for c in e["components"]:
            c["hours"] = hours(c["seconds"])
        e["hours"] = hours(sum(c["seconds"] for c in e["components"]))
        e["interval"] = None
        if e["half"] is not None:
            w = hours(e["half"])
            e["interval"] = (max(Decimal(0), e["hours"] - w), e["hours"] + w)
    return estimates


def failure_rate(trials: list[Json], attempts: dict[int, list[Json]]) -> Json:
    """Failed attempts over all attempts, counting only attempts at the config
    the trial finally measured (a halve-batch retry's OOMs at the larger batch
    are not failures of the smaller one)."""
    tries = []
    for t in trials:
        mine = attempts.get(t["id"], [])
        final = mine[-1].get("changed") if mine else None
        tries += [a for a in mine if a.get("changed") == final]
    n = max(len(tries), len(trials))
    failed = [a for a in tries if a["status"] != "ok"]
    causes = ", ".join(sorted({a["error_class"] or "failed" for a in failed}))
    return {"n": n, "failed": len(failed), "p": len(failed) / n, "causes": causes}


def check_trials(trials: list[Json]) -> None:
    """Refuse trials a block cannot rest on: missing, unfinished, failed, or
    of different configs or environments."""
    for t in trials:
        if t["status"] in WAITING:  # held: waits for Slack's word
            raise EstimateError(
                _("{trial} is still queued; add the block when it has reported", trial=t["trial"])
                if t["status"] != JobStatus.RUNNING else
                _("{trial} is still running; add the block when it has reported",
                  trial=t["trial"]))
        if (t["status"] != JobStatus.DONE or not t.get("report")
                or t["report"]["status"] != Outcome.OK):
            raise EstimateError(_("{trial} failed, so it measured no successful run; estimate "
                                  "from a trial that succeeded", trial=t["trial"]))
        missing = unmeasured(t["report"])
        if missing:  # a report stored before the worker API refused NaN reads it as null
            raise EstimateError(_("{trial}'s report holds no measured value for {fields}, so "
                                  "its time cannot be counted; run it again (`/trial status "
                                  "{trial}` shows the command) and estimate from that trial",
                                  trial=t["trial"], fields=", ".join(missing)))
    first = trials[0]["report"]
    for t in trials[1:]:
        diff = differences(config(first), config(t["report"]))
        if diff:
            raise EstimateError(_("{first} and {other} ran different configs ({differences}); a "
                                  "block is estimated from trials of one config",
                                  first=trials[0]["trial"], other=t["trial"],
                                  differences="; ".join(diff)))
        if env_kind(t["report"]) != env_kind(first):
            raise EstimateError(_("{first} ran on {env} and {other} on {other_env}; a block is "
                                  "estimated from one kind of environment",
                                  first=trials[0]["trial"], env=env_kind(first),
                                  other=t["trial"], other_env=env_kind(t["report"])))


def unmeasured(report: Json) -> list[str]:
    """The times an estimate reads that the report holds no number for (a null,
    as a NaN stored before #29 reads back)."""
    def bad(v: object) -> bool:
        return not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)
    missing = ["seconds"] if bad(report.get("seconds")) else []
    missing += [f"phases.{p.get('name')}.seconds" for p in report.get("phases") or []
                if bad(p.get("seconds"))]
    latency = report.get("latency") or {}
    if latency.get("count"):
        missing += [f"latency.{k}" for k in ("mean", "count") if bad(latency.get(k))]
    missing += ["windows" for w in ((report.get("windows") or {}).get("rows") or [])[:1]
                if any(bad(r.get("mean")) for r in report["windows"]["rows"])]
    return missing


def estimate_block(block: Json, trials: list[Json], attempts: dict[int, list[Json]],
                   facts: Json, pays_prep: bool, usage: Json | None = None,
                   predicted: Json | None = None, earlier: list[Json] | None = None) -> Json:
    """One block's estimate. `trials` are the jobs it rests on (for a sweep block,
    the sweep's successful trials); `predicted` is a sweep fit's prediction for
    the block's config: {"seconds", "se", "dof", "source"}; `earlier` the reports
    of the worker's earlier trials (bot/plans/perrun.history)."""
    reports = [t["report"] for t in trials]
    names = ", ".join(t["trial"] for t in trials)
    runs = block["runs"] * block["configs"]
    times = (_("{runs} runs × {configs} configs", runs=block["runs"], configs=block["configs"])
             if block["configs"] > 1 else _("{runs} runs", runs=block["runs"]))
    run = (_runs_predicted(block, runs, times, predicted) if predicted
           else _runs_measured(trials, runs, times, pays_prep, earlier))
    run_s = runs * run["x"] + run["once"]  # a fresh process's first run's extra, once
    retry_s, retry_source = _retries(trials, attempts, run_s)
    if pays_prep:
        prep_s, prep_source = _prep(reports, names, predicted)
    else:
        prep_s = 0.0
        prep_source = _("0: same rental session as an earlier block (rental=single)")
    data_s, data_source = _data(reports, names, block["configs"])
    handoff = block.get("handoff") if block.get("handoff") is not None else facts.get("handoff")
    idle_s, idle_source = _idle(handoff, facts, usage, prep_s + run_s + retry_s + data_s)
    parts = [("prep", prep_s, prep_source), ("runs", run_s, run["source"]),
             ("retries", retry_s, retry_source), ("data", data_s, data_source),
             ("idle", idle_s, idle_source)]
    return _block_estimate(block, trials, facts, predicted, run, parts,
                           idle_s if handoff is not None else 0.0)


def _runs_predicted(block: Json, runs: int, times: str, predicted: Json) -> Json:
    """The runs' time per run and interval from a sweep fit's prediction."""
    x = predicted["seconds"]
    if x <= 0:  # bot/fits/usable.py names the cause before this; a last guard
        raise EstimateError(_("the fit predicts {seconds} s per run at this config, and a "
                              "time is positive: the fit is unusable here; `/trial fit "
                              "S{sweep}` says why and what to run", seconds=f"{x:.3g}",
                              sweep=block.get("sweep") or ".."))
    half = None
    if predicted.get("dof") and predicted.get("sd"):
        # se² = sd²·(1 + h): the new runs' own spread plus the fit's error at this config.
        h = max(0.0, (predicted["se"] / predicted["sd"]) ** 2 - 1)
        half = (t_quantile(predicted["dof"], LEVEL) * predicted["sd"]
                * math.sqrt(runs + runs ** 2 * h))
    # "3 × 116.3 s per request…" in English, "3 × 요청당 116.3 s…" in Korean (docs/i18n.md)
    source = pgettext("a predicted time", "{times} × {seconds} s {per}{source}", times=times,
                      seconds=f"{x:.4g}", per=predicted["per"], source=predicted["source"])
    return {"x": x, "source": source, "half": half,
            "why": predicted.get("no_interval")
            or _("the fit has no residual degrees of freedom"),
            "prep_var": 0.0, "pr": None, "once": 0.0}


def _runs_measured(trials: list[Json], runs: int, times: str, pays_prep: bool,
                   earlier: list[Json] | None) -> Json:
    """The runs' time per run and interval from the trials' own measurements
    (and the spread the worker's earlier trials measured)."""
    pr = per_run(trials, earlier)
    x = pr["mean"]
    half = None
    prep_var = pr["prep_var"] if pays_prep else 0.0  # from the trials' processes
    if pr["dof"] >= 1:
        # The block's mean per run: its own runs' spread (within/runs) plus
        # the level it sits at (drift components and the mean's uncertainty);
        # and its one prep, whose spread the processes measured.
        half = t_quantile(pr["dof"], LEVEL) * math.sqrt(
            runs ** 2 * (pr["within"] / runs + pr["level"]) + prep_var)
    return {"x": x, "half": half, "prep_var": prep_var, "pr": pr, "once": pr.get("once", 0.0),
            "source": _("{times} × {seconds} s per {unit} ({source})", times=times,
                        seconds=f"{x:.4g}", unit=pr["unit"], source=pr["source"]),
            "why": _("one measurement has no spread; run the trial again "
                     "(trial=T12,T13) or with more repeats")}


def _retries(trials: list[Json], attempts: dict[int, list[Json]],
             run_s: float) -> tuple[float, str]:
    """Time redoing failed runs, at the trials' failure rate, and where it came from."""
    fr = failure_rate(trials, attempts)
    if fr["failed"]:
        return run_s * fr["p"] / (1 - fr["p"]), _(
            "{failed} of {n} trial attempts failed ({causes}): expected attempts "
            "per run 1/(1−{p}); a failed run is redone whole", failed=fr["failed"],
            n=fr["n"], causes=fr["causes"], p=f"{fr['p']:.2f}")
    return 0.0, _("0 of {n} attempts failed; so few attempts do not rule out a failure "
                  "rate up to {rate} (rule of three)", n=fr["n"],
                  rate=f"{min(1.0, 3 / fr['n']):.0%}")


def _idle(handoff: float | None, facts: Json, usage: Json | None,
          busy: float) -> tuple[float, str]:
    """Idle wait: a declared hand-off gap, or the worker's measured idle share
    of `busy` seconds; and where it came from."""
    if handoff is not None:
        return handoff * 3600, _("declared hand-off gap {hours} h", hours=f"{handoff:g}")
    if facts.get("idle") == "measured" and usage and usage["idle"] + usage["busy"] > 0:
        share = usage["idle"] / (usage["idle"] + usage["busy"])
        idle_s = busy * share / (1 - share) if share < 1 else float("inf")
        idle_source = _("worker {worker} sat idle {share} of its measured time ({idle} h idle, "
                        "{busy} h busy over {days} days)", worker=usage["worker"],
                        share=f"{share:.0%}", idle=f"{usage['idle'] / 3600:.2f}",
                        busy=f"{usage['busy'] / 3600:.2f}", days=usage["days"])
        if not math.isfinite(idle_s):
            raise EstimateError(_("worker {worker} ran nothing while idle was measured; its idle "
                                  "share says nothing about a block: declare handoff=H",
                                  worker=usage["worker"]))
        return idle_s, idle_source
    if facts.get("idle") == "measured":
        return 0.0, _("no idle measured yet for the trial's worker")
    return 0.0, _("not counted: `set handoff=H` (a declared gap) or "
                  "`set idle=measured` (the workers' measured idle share)")


def _block_estimate(block: Json, trials: list[Json], facts: Json, predicted: Json | None,
                    run: Json, parts: list[tuple[str, float, str]], declared_idle: float) -> Json:
    """The block's estimate from its parts (seconds on one GPU, with their sources)."""
    gpus = block["gpus"]
    reports = [t["report"] for t in trials]
    # GPU-seconds; `in_hours` turns them into the GPU-hours shown.
    components = [{"name": n, "seconds": s * gpus, "source": src} for n, s, src in parts]
    half = run["half"]
    first = reports[0]
    return {"kind": block["kind"], "runs": block["runs"], "configs": block["configs"],
            "gpus": gpus, "components": components,
            "half": half * gpus if half is not None else None,
            "interval_note": (interval_note(run["pr"], len(trials),
                                            prep=not predicted and run["prep_var"] > 0)
                              if half is not None else
                              _("no interval: {why}", why=run["why"])),
            "per_run": run["x"], "trials": [t["trial"] for t in trials], "env": env_kind(first),
            # a declared hand-off: added once, never scaled by an interval's multipliers
            "declared_idle": declared_idle * gpus,
            # a time on another device than the target: shown apart, not in totals or cost
            "off_target": off_target(facts.get("gpu"), reports),
            "config": {**config(first), **(block.get("predict") or {}),
                       **(predicted or {}).get("config", {})},
            "code": code_version(first), "note": block.get("note"),
            "sweep": block.get("sweep"), "predicted": bool(predicted),
            "marks": (predicted or {}).get("marks"),
            "partial": (predicted or {}).get("partial")}


def _mean_of(reports: list[Json], f: Callable[[Json], float]) -> float:
    return sum(f(r) for r in reports) / len(reports)


def _prep(reports: list[Json], names: str, predicted: Json | None) -> tuple[float, str]:
    """Prep once for the block's rental session, and where it came from."""
    prep_s = _mean_of(reports, prep_seconds)
    if unit_kind(reports[0]) == "program":  # the program's loads are in each of its runs
        setup = _mean_of(reports, lambda r: phase_seconds(r, "setup"))
        build = _mean_of(reports, reused_build_seconds)
        text = _("{trials}: outside the program: setup {setup} s + the worker's start and "
                 "finish {rest} s (mean), once for this block's rental session", trials=names,
                 setup=f"{setup:.3g}", rest=f"{prep_s - setup - build:.3g}")
        if build:
            text += "; " + _("plus the recipe environment's build, {seconds} s (mean) as "
                             "measured when it was built: these trials reused it, a fresh box "
                             "builds it once", seconds=f"{build:.3g}")
        return prep_s, text
    shown = [p for p in PREP_PHASES if p != "launch" or any(
        phase_seconds(r, p) for r in reports)]
    phases = " + ".join(f"{p} {_mean_of(reports, lambda r: phase_seconds(r, p)):.3g} s"
                        for p in shown)
    prep_source = _("{trials}: {phases} + teardown {teardown} s (mean), once for this "
                    "block's rental session", trials=names, phases=phases,
                    teardown=f"{_mean_of(reports, teardown_seconds):.3g}")
    if any(reused_build_seconds(r) for r in reports):
        prep_source += "; " + _("plus the recipe environment's build, {seconds} s (mean) "
                                "as measured when it was built: these trials reused it, a "
                                "fresh box builds it once",
                                seconds=f"{_mean_of(reports, reused_build_seconds):.3g}")
    factor = (predicted or {}).get("weights_factor")
    if factor:  # a partial-depth trial built a fraction of the weights
        prep_s += (factor - 1) * _mean_of(reports, lambda r: phase_seconds(r, "weights"))
        prep_source += "; " + _("weights phase ×{factor} for the full depth's parameters "
                                "(a model estimate)", factor=f"{factor:.3g}")
    return prep_s, prep_source


def _data(reports: list[Json], names: str, configs: int) -> tuple[float, str]:
    if unit_kind(reports[0]) == "program":
        return 0.0, _("0: each program run loads its own data (in the runs)")
    data_each = _mean_of(reports, data_seconds)
    values = dict(trials=names, seconds=f"{data_each:.3g}", configs=configs)
    return data_each * configs, (
        _("{trials}: data phase {seconds} s (mean) × {configs} configs", **values)
        if configs > 1 else _("{trials}: data phase {seconds} s (mean)", **values))


def interval_note(pr: Json | None, trials: int, prep: bool = False) -> str:
    """What the interval contains and what it does not, by name; `prep`: its
    spread between the trials' processes is in it."""
    if pr is None:
        inside = [_("the runs' spread around the sweep's fit and the fit's error at this "
                    "config")]
        missing = [_("drift between the sweep's trials beyond the fit's residuals")]
    else:
        inside = pr["parts"] or [_("the run-to-run spread")]
        missing = list(pr["missing"])
    if prep:
        assert pr is not None  # prep is asked only of the trials' own measurements
        inside = [*inside, pr["prep_part"]]
        missing.append(_("the spread of data and retries"))
    else:
        missing.append(_("the spread of prep, data and retries (each one measurement per "
                         "trial)") if trials > 1 else
                       _("the spread of prep, data and retries (each one measurement)"))
    missing.append(_("a busier or quieter machine than the trial's"))
    return _("{level} prediction interval of the runs; it contains {inside}; not in it: "
             "{missing}", level=f"{LEVEL:.0%}", inside=", ".join(inside),
             missing="; ".join(missing))


def total(estimates: list[Json]) -> Json:
    """The plan's total: the sum of the blocks as shown. The interval adds the
    blocks' half-widths (blocks may rest on the same trial, so their errors are
    not assumed independent). A block measured off the target GPU is left out
    (its hours are another device's) and named in `left_out`."""
    left_out = [e["kind"] for e in estimates if e.get("off_target")]
    estimates = [e for e in estimates if not e.get("off_target")]
    hours_ = sum((e["hours"] for e in estimates), Decimal(0))
    widths = [e["interval"] for e in estimates]
    if estimates and all(widths):
        lo = sum((e["hours"] - e["interval"][0] for e in estimates), Decimal(0))
        hi = sum((e["interval"][1] - e["hours"] for e in estimates), Decimal(0))
        return {"hours": hours_, "interval": (max(Decimal(0), hours_ - lo), hours_ + hi),
                "left_out": left_out}
    return {"hours": hours_, "interval": None, "left_out": left_out}
