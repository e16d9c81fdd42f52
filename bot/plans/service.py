"""The plan services that read the store: each block's estimate from its
trials or sweep, and the review of estimates against actuals (also the
digest's), and a Slurm worker's accounting answer recorded."""
from __future__ import annotations

import math

import numpy as np

from bot.blocks import message
from bot.context import Context
from bot.fits import depth, ols, scaling, usable
from bot.fits.sweep import fit_sweep, judge_seconds, predict_seconds
from bot.plans import calibration, estimate, footing, kept_apart, perrun, review, slurm
from bot.plans.grammar import PlanError
from bot.states import WAITING, ActualStatus, JobStatus, Json, Outcome
from bot.trials.queue import LeaseLost
from worker import i18n
from worker.i18n import _


def _trials(ctx: Context, ids: list[int]) -> list[Json]:
    jobs = []
    for i in ids:
        job = ctx.store.job(i)
        if job is None:
            raise PlanError(_("There is no trial T{id}; `/trial list` shows recent ones", id=i))
        jobs.append(job)
    estimate.check_trials(jobs)
    return jobs


def _sweep_prediction(ctx: Context, block: Json) -> tuple[list[Json], Json]:
    ok = _sweep_trials(ctx, block)
    params = {**ok[0]["report"]["params"], **block["predict"]}
    fit, (seconds, se, dof), verdict = _predict_from(block, ok, params)
    shown = " ".join(f"{k}={v}" for k, v in block["predict"].items())
    if not verdict["usable"]:  # the real cause, not a blanket "extrapolated too far"
        raise PlanError(_("Sweep S{id}'s time fit is {verdict}. `/trial fit S{id} {config}` shows "
                          "the fit; nothing was added", id=block["sweep"],
                          verdict=usable.text(verdict), config=shown))
    per, source = _sweep_source(block, ok, params, shown)
    out = {"seconds": seconds, "se": se, "dof": dof, "sd": fit["time"]["residual_sd"],
           "per": per, "source": source, "partial": None,
           # The points' own marks travel into the block's warnings.
           # (a busy trial is warned of per trial already: bot/plans/views.block_warnings)
           "marks": {"marked": usable.marked(fit["time"], fit.get("points") or [],
                                             which=("unstable",)),
                     "unmeasured": verdict["unmeasured"],
                     "unchecked": None if verdict["checked"] else usable.text(verdict)}}
    if fit.get("kind") == "depth":
        depths = sorted({j["report"]["params"]["layers"] for j in ok})
        if params["layers"] > depths[-1]:
            out["partial"] = _("sweep S{id} measured layers {depths}; predicted at {layers}",
                               id=block["sweep"], depths=", ".join(map(str, depths)),
                               layers=params["layers"])
    elif ok[0]["report"]["workload"] in depth.DEPTHED:
        _to_full_depth(out, block, ok, fit)
    return ok, out


def _sweep_trials(ctx: Context, block: Json) -> list[Json]:
    """The block's sweep's successful trials, refused while it runs or when
    they are too few or have no time per run."""
    jobs = ctx.store.sweep_jobs(block["sweep"])
    if not jobs:
        raise PlanError(_("There is no sweep S{id}; `/trial sweep ...` starts one",
                          id=block["sweep"]))
    waiting = [j["trial"] for j in jobs if j["status"] in WAITING]
    if waiting:
        raise PlanError(_("Sweep S{id} is still running ({trials}); add the block when it has "
                          "reported", id=block["sweep"], trials=", ".join(waiting)))
    ok = [j for j in jobs if j["report"] and j["report"]["status"] == Outcome.OK]
    if len(ok) < 2:
        raise PlanError(_("Sweep S{id} has {n} successful trial(s); a fit needs at least 2",
                          id=block["sweep"], n=len(ok)))
    for job in ok:
        problem = estimate.unit_problem(job)
        if problem:
            raise PlanError(_("Sweep S{id} has no time per run to fit: {problem}",
                              id=block["sweep"], problem=problem))
    return ok


def _predict_from(block: Json, ok: list[Json], params: Json
                  ) -> tuple[Json, tuple[float, float, int], Json]:
    """The sweep's fit, its (seconds, se, dof) at `params`, and its verdict there."""
    try:
        fit = fit_sweep([j["report"] for j in ok])
        if fit.get("kind") == "depth":
            _check_depth_block(block, params, fit)
        else:
            _check_swept(block, fit, ok[0]["report"]["params"])
        seconds, se, dof = predict_seconds(fit, params)
        if fit.get("kind") != "depth":  # a depth fit's interval is its residuals' alone, for now
            se = _with_form(scaling.band(fit, "time", params), se)
        verdict = judge_seconds(fit, params, seconds)
    except PlanError:
        raise
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
        raise PlanError(_("Sweep S{id} cannot predict this config: {problem}", id=block["sweep"],
                          problem=exc)) from None
    return fit, (seconds, se, dof), verdict


def _sweep_source(block: Json, ok: list[Json], params: Json, shown: str) -> tuple[str, str]:
    """Where a predicted time per run came from: its unit ("per request"), then the
    config and the sweep."""
    held = [k for k in ("batch", "prompt", "gen") if k in params and k not in block["predict"]]
    first = ok[0]["report"]
    units = first.get("units") or {}  # a recipe's timed run units (worker/launcher)
    kind = estimate.unit_kind(first)
    unit = (_("per request") if not first.get("recipe") else
            _("per {unit}", unit=estimate.unit_label(kind)) if kind else
            _("per {unit}", unit=units["unit"]) if units.get("run") else _("per run phase"))
    values = dict(config=shown, id=block["sweep"], n=len(ok),
                  held=", ".join(f"{k}={params[k]}" for k in held))
    return unit, ", " + (
        _("predicted for {config} (at the sweep's {held}) by the time fit of sweep "
          "S{id} ({n} trials; a model estimate, not measured at this config)", **values)
        if held else
        _("predicted for {config} by the time fit of sweep S{id} ({n} trials; a "
          "model estimate, not measured at this config)", **values))


def _to_full_depth(out: Json, block: Json, ok: list[Json], fit: Json) -> None:
    """A batch sweep of a partial-depth model: its fit is the partial model's
    time, scaled here to the full depth by a stated model."""
    first = {"workload": ok[0]["report"]["workload"], "params": fit["defaults"],
             "trial": f"sweep S{block['sweep']}", "full_depth": ok[0]["report"].get(
                 "full_depth")}
    part = depth.partial(first)
    if part:
        k = depth.time_factor(fit["defaults"], depth.sizing_of(first))
        sd = out["sd"] * k["factor"] if out["sd"] is not None else None
        out.update(seconds=out["seconds"] * k["factor"], se=out["se"] * k["factor"], sd=sd,
                   source=f"{out['source']}, {k['what']}", partial=part,
                   weights_factor=k["weights_factor"],
                   config={"layers": depth.full_layers(first)})


def _with_form(band: ols.Band, se: float) -> float:
    """The standard error that gives the sweep's own interval (the points' spread
    and the fitted form's leave-one-out error), so the block's interval is the one
    `/trial fit` shows; the residuals' alone where the form's error has no points."""
    if band.half is None or not band.dof:
        return se
    return band.half / ols.t_quantile(band.dof)


def _check_swept(block: Json, fit: Json, measured: Json) -> None:
    """A sweep predicts only on what it measured: a recipe sweep on the
    parameters it varied, any sweep on its own parameters."""
    if fit.get("error"):
        return  # the fit's own reason comes first (predict_seconds raises it)
    varied = scaling.swept(fit)
    words = " ".join(f"{k}=N" for k in varied)
    for key, value in block["predict"].items():
        if key not in measured:
            raise PlanError(_("Sweep S{id} has no parameter `{key}`; it varied {swept}: give "
                              "{words}", id=block["sweep"], key=key,
                              swept=", ".join(varied), words=words))
        if fit.get("recipe") and key not in varied:
            raise PlanError(_("Sweep S{id} varied {swept}; {key} was {measured} in every trial, "
                              "so the fit says nothing about {key}={value}: give {words} (leave "
                              "{key} out, or sweep it too)", id=block["sweep"],
                              swept=", ".join(varied), key=key, measured=measured[key],
                              value=value, words=words))


def _check_depth_block(block: Json, params: Json, fit: Json) -> None:
    """A block from a depth sweep names the depth it is for (the sweep ran several)."""
    full = depth.full_layers(fit) if fit.get("preset") else None
    name = fit.get("preset")
    if "layers" not in block["predict"]:
        raise PlanError(
            _("Sweep S{id} is a depth sweep: give the depth the block is for, layers=N ({model}'s "
              "full depth is layers={full})", id=block["sweep"], model=name, full=full) if full
            else _("Sweep S{id} is a depth sweep: give the depth the block is for, layers=N",
                   id=block["sweep"]))
    if full and block["predict"]["layers"] > full:
        raise PlanError(_("{model} has {full} layers; predict at layers=1..{full}", model=name,
                          full=full))


def _partial_prediction(trials: list[Json]) -> Json | None:
    """A block from a partial-depth trial: its time at the full depth, by a
    stated model (bot/depth.time_factor), marked until a full-depth trial
    replaces it."""
    first = trials[0]["report"]
    part = depth.partial(first)
    if part is None:
        return None
    pr = estimate.per_run(trials)
    k = depth.time_factor(first["params"], depth.sizing_of(first))
    return {"seconds": pr["mean"] * k["factor"], "se": math.nan, "dof": 0, "sd": None,
            "per": _("per {unit}", unit=pr["unit"]),
            "source": f" ({pr['source']}), {k['what']}", "partial": part,
            "no_interval": _("a model-scaled time has no measured spread at the full depth"),
            "weights_factor": k["weights_factor"],
            "config": {"layers": depth.full_layers(first)}}


def estimates(ctx: Context, plan: Json, blocks: list[Json] | None = None
              ) -> list[tuple[Json, Json, list[Json]]]:
    """(block, estimate, its trials) for every block, in the order they were added."""
    out = []
    facts = plan["facts"]
    single = facts.get("rental") == "single"
    blocks = ctx.store.blocks(plan["name"]) if blocks is None else blocks
    seen: dict[tuple[str, str, int], list[Json]] = {}  # one query per worker and workload
    for i, block in enumerate(blocks):
        predicted: Json | None  # a sweep's always; a partial-depth trial's, if any
        if block["sweep"]:
            trials, predicted = _sweep_prediction(ctx, block)
        else:
            trials = _trials(ctx, block["trials"])
            predicted = _partial_prediction(trials)
        attempts = ctx.store.attempts_of([t["id"] for t in trials])
        usage = None
        if facts.get("idle") == "measured" and trials[0].get("worker"):
            usage = dict(ctx.store.worker_usage(trials[0]["worker"]),
                         worker=trials[0]["worker"])
        est = estimate.estimate_block(block, trials, attempts, facts,
                                     pays_prep=not single or i == 0, usage=usage,
                                     predicted=predicted,
                                     # a predicted time has no processes to pool with
                                     earlier=None if predicted else _earlier(ctx, trials, seen))
        out.append((block, est, trials))
    estimate.in_hours([e for _block, e, _trials in out])
    return out


def _earlier(ctx: Context, trials: list[Json],
             seen: dict[tuple[str, str, int], list[Json]]) -> list[Json]:
    """The reports of the worker's latest other trials of the block's workload:
    its box's spread between processes (bot/plans/perrun.history picks those of
    the same config and device). `seen` keeps each query's rows for the plan's
    other blocks."""
    first = trials[0]
    if not first.get("worker"):
        return []
    mine = {t["id"] for t in trials}
    key = (first["worker"], first["workload"], perrun.HISTORY + len(mine))
    if key not in seen:
        seen[key] = ctx.store.worker_trials(*key)
    return [j["report"] for j in seen[key]
            if j["id"] not in mine and j.get("report")][:perrun.HISTORY]


def review_rows(ctx: Context, plan: Json, ests: list[estimate.Estimated]) -> list[Json]:
    """Estimate against actual for each block (the review, and the digest's)."""
    # A trial cancelled while it ran held its GPUs too (one cancelled before it
    # started cost nothing).
    jobs = [j for j in ctx.store.plan_jobs(plan["name"])
            if j["status"] in (JobStatus.DONE, JobStatus.FAILED)
            or (j["status"] == JobStatus.CANCELLED and j["started"])]
    manual = review.latest_per_source(ctx.store.actuals(plan["name"]))
    rows = []
    for block, est, trials in ests:
        # Off-target and not-comparable trials are evidence, not the block's actual.
        mine, apart = kept_apart.split(plan, [j for j in jobs if j["block"] == block["kind"]],
                                       basis=trials[0]["report"])
        mine_manual = [m for m in manual if m["block"] == block["kind"]]
        attempts = ctx.store.attempts_of([j["id"] for j in mine])
        row = review.review_block(est, mine, attempts, mine_manual, plan["locked"])
        # An estimate and an actual are paired only on the same device.
        across = footing.across(est, plan["facts"].get("gpu"), row)
        if across:
            row = {"kind": est["kind"], "actual": None, "across": across}
            apart.append(across)
        row["apart"] = apart
        row["memory"] = review.memory_compare([t["report"] for t in trials],
                                               [j["report"] for j in mine if j["report"]])
        # For the calibration: when the actual was last recorded, and which trials
        # on either side flagged contention (or measured none).
        row["recorded"] = max([j["finished"] or 0.0 for j in mine]
                              + [m["recorded"] or 0.0 for m in mine_manual], default=None)
        seen = {t["trial"]: t["report"] for t in [*trials, *mine] if t.get("report")}
        row["contended"] = [n for n, r in seen.items()
                            if (r.get("contention") or {}).get("flagged")]
        row["unmeasured"] = [n for n, r in seen.items() if not r.get("contention")]
        rows.append(row)
    return rows


def calibration_pairs(ctx: Context, user: str, channel: str,
                      across: list[str] | None = None) -> list[Json]:
    """One pair per block with an actual, across the plans `user` may see from
    `channel` (bot/context.py: another channel's plans do not leak in). The
    estimate is recomputed from the block's trials, never calibrated, so the
    calibration does not feed on itself. A plan that cannot be estimated any
    more (its trials are gone) gives no pairs. `across`, when given, collects
    "PLAN KIND" for each block whose actual is on another device than its
    estimate (no pair)."""
    pairs = []
    for plan in ctx.visible_plans(user, channel)[0]:
        try:
            ests = estimates(ctx, plan)
        except (PlanError, estimate.EstimateError):
            continue
        for (_block, est, _trials), row in zip(ests, review_rows(ctx, plan, ests)):
            p = calibration.pair_of(plan["name"], est, row)
            if p is not None:
                pairs.append(p)
            elif row.get("across") and across is not None:
                across.append(f"{plan['name']} {est['kind']}")
    return pairs


def calibrations(ctx: Context, plan: Json, ests: list[estimate.Estimated], user: str, channel: str,
                 pairs: list[Json] | None = None) -> list[Json]:
    """Each block's calibration: from the pairs of its scope, less its own."""
    pairs = calibration_pairs(ctx, user, channel) if pairs is None else pairs
    out = []
    for _block, est, _trials in ests:
        scope = calibration.scope_of(est)
        out.append(calibration.calibrate(
            calibration.scoped(pairs, scope, exclude=(plan["name"], est["kind"])), scope=scope))
    return out


def answer_slurm(ctx: Context, req_id: int, worker: str, lease: str, result: Json,
                 key: str | None = None) -> Json:
    """A Slurm worker's sacct answer: the actual recorded (or why not) and
    posted in the plan's channel, in one transaction. Raises LeaseLost when the
    request is not leased to `worker` under `lease`."""
    req = ctx.store.slurm_actual(req_id)
    if req is None:
        raise LeaseLost(f"there is no Slurm accounting request A{req_id}")
    if req["worker"] != worker or req["lease"] != lease:
        raise LeaseLost(f"A{req_id} is not leased to {worker} under this lease")
    with i18n.using(ctx.store.channel_lang(req["channel"])):  # posted in the plan's channel
        actual, text = slurm.outcome(req, result)
    done = ActualStatus.DONE if actual else ActualStatus.FAILED
    if not ctx.store.finish_slurm_actual(req, done, result, text,
                                         actual, [dict(message(req["channel"], text),
                                                       user=req["user"])], key=key):
        raise LeaseLost(f"A{req_id} is not leased to {worker} under this lease")
    ctx.notify()
    answered = ctx.store.slurm_actual(req_id)
    assert answered is not None  # read above, and a request is never deleted
    return answered
