"""A block's time per run from its trials (docs/design.md §3): the mean over
the trials' fresh processes (or the whole trial where it ran in one), the
runs' own spread, and the levels above it (drift between windows, processes
and trials) with their degrees of freedom. Pure, like bot/plans/estimate.py,
which turns it into a block's hours and interval."""
from __future__ import annotations

import math
from collections.abc import Callable

from bot.plans.measured import (
    EstimateError,
    code_version,
    config,
    differences,
    env_kind,
    program_seconds,
    run_seconds,
    unit_kind,
    unit_label,
    unit_problem,
)
from bot.states import Json
from worker.api import PROCESSES
from worker.i18n import _


def _window_means(r: Json) -> list[float]:
    """The run phase's window means (worker/windows.py), [] on a report from
    before windows existed."""
    rows = (r.get("windows") or {}).get("rows") or []
    return [w["mean"] for w in rows] if len(rows) >= 2 else []


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def per_run(trials: list[Json], earlier: list[Json] | None = None) -> Json:
    """One run's time: the run phase over the requests it measured (so the
    time between requests is counted too), with the variance components of
    that figure (docs/plans-and-advice.md): request-to-request spread, drift
    between the run phase's windows, and the spread between trials; for a
    recipe, its declared unit's (a whole program: one per trial). A trial
    without such a run, or a time of zero, is refused (EstimateError).
    `earlier`: reports of the worker's earlier trials; those of the same config
    on the same device lend their spread between processes (see `history`)."""
    reports = [t["report"] for t in trials]
    for t in trials:
        problem = unit_problem(t)
        if problem:
            raise EstimateError(problem)
    kind = unit_kind(reports[0])
    other = next((t for t in trials if unit_kind(t["report"]) != kind), None)
    if other is not None:  # the recipe file changed its unit between the trials
        raise EstimateError(_("{first} counted a run as a {unit} and {other} as a {other_unit}; "
                              "a block is estimated from trials of one unit",
                              first=trials[0]["trial"], unit=kind, other=other["trial"],
                              other_unit=unit_kind(other["report"])))
    views = _views(reports)
    if kind == "program":
        out = _per_sample(trials, views, _("program run"), _program_source)
    elif all((r.get("latency") or {}).get("count") for r in reports):
        out = _per_request(trials, views, kind)
    else:
        out = _per_sample(trials, views, _("run phase"), _phase_source)
    if not out["mean"] > 0:
        raise EstimateError(_("{trials} measured {seconds} s per {unit}: a block cannot count "
                              "runs that take no time; {why}", trials=out["names"],
                              seconds=f"{out['mean']:.3g}", unit=out["unit"],
                              why=_("its work was all in one-time phases (launch, weights, "
                                    "warmup); declare the recipe's unit = \"program\" to "
                                    "count whole invocations") if reports[0].get("recipe")
                              else _("run it again")))
    several = len(views) > len(reports)  # fresh processes: the level below trials
    past = history(earlier or [], trials) if several else None
    out.update(spread(out, len(views), _("the spread between {n} processes of {t} trial(s)",
                                         n=len(views), t=len(reports)) if several else None,
                      past))
    extra = _processes(reports, views, past)
    out["missing"] += extra.pop("missing", [])
    return {**out, **extra}


HISTORY = 30  # earlier trials a worker lends at most: its box's recent state, not its life
LONG_FROM = 2  # earlier trials it takes to measure drift over longer than a trial


def history(earlier: list[Json], trials: list[Json]) -> Json | None:
    """What the worker's earlier trials of the same config, code and device
    measured above one trial (docs/plans-and-advice.md): the spread between
    each one's fresh processes relative to its mean, pooled ({"rel", "dof"}),
    and each one's mean and process count ({"means"}), against which the
    block's trials show drift over longer than one trial. A trial flagged busy
    lends nothing: its spread is the neighbour's. None when none qualifies."""
    basis = trials[0]["report"]
    ss, dof, means = 0.0, 0, []
    for r in earlier:
        if (r.get("status") != "ok" or (r.get("contention") or {}).get("flagged")
                or differences(config(basis), config(r)) or env_kind(r) != env_kind(basis)
                or code_version(r) != code_version(basis)):
            continue
        try:
            xs = per_run([{"trial": "earlier", "report": r}])["trial_means"]
        except EstimateError:
            continue
        m = sum(xs) / len(xs)
        if not m > 0:
            continue
        if len(xs) >= 2:
            ss += (len(xs) - 1) * _var(xs) / m ** 2
            dof += len(xs) - 1
        means.append((m, len(xs)))
    return {"rel": ss / dof if dof else 0.0, "dof": dof, "means": means} if means else None


def _long_drift(past: Json, means: list[float], rel: float) -> tuple[float, int]:
    """Drift between trials at other times, relative to the mean (its variance
    beyond what the spread between processes puts into a trial's mean), with its
    degrees of freedom; (0, 0) until LONG_FROM earlier trials measure it."""
    if len(past["means"]) < LONG_FROM:
        return 0.0, 0
    rows = [*past["means"], (sum(means) / len(means), len(means))]
    grand = sum(m for m, _n in rows) / len(rows)
    noise = rel * sum(1 / n for _m, n in rows) / len(rows)
    return max(0.0, _var([m / grand for m, _n in rows]) - noise), len(rows) - 1


def _views(reports: list[Json]) -> list[Json]:
    """What the spread is built from: each fresh process of each trial (a
    report's `processes`, worker/launcher/processes.py), or the whole trial
    where it ran in one process or predates `processes`."""
    out = []
    for r in reports:
        rows = [x for x in (r.get("processes") or {}).get("rows") or [] if x.get("count")]
        if len(rows) >= 2:
            out += [{"n": x["count"], "m": x["mean"], "run": x["run"], "prep": x["prep"],
                     "ss": (x["count"] - 1) * (x.get("stdev") or 0.0) ** 2,
                     "dof": x["count"] - 1 if x.get("stdev") is not None else 0,
                     "windows": x["windows"] if len(x["windows"]) >= 2 else [],
                     "first": _first_extra(r, x.get("process"))}
                    for x in rows]
            continue
        latency = r.get("latency") or {}
        ss, dof = _within(r) if latency.get("count") else (0.0, 0)
        out.append({"n": latency.get("count") or 0, "m": latency.get("mean"),
                    "run": run_seconds(r), "prep": None, "ss": ss, "dof": dof,
                    "windows": _window_means(r)})
    return out


def _first_extra(r: Json, process: int | None) -> float | None:
    """How much longer a fresh process's first measured request took than its
    others, in seconds: its first window's excess over the rest, times the
    requests in that window (only the first is slow: a long process's windows
    show it). None without two windows of the process."""
    rows = [w for w in (r.get("windows") or {}).get("rows") or []
            if w.get("process") == process and w.get("count")]
    rest = sum(w["count"] for w in rows[1:])
    if process is None or not rest:
        return None
    level = sum(w["mean"] * w["count"] for w in rows[1:]) / rest
    return float(rows[0]["count"] * (rows[0]["mean"] - level))


def _steady(views: list[Json]) -> tuple[list[Json], float]:
    """The processes without their first request's extra time, and that extra
    (mean over the processes). A fresh process's first measured request runs
    slower than the rest (on the quiet plan bench, 15% after warmup=1): a block
    runs in one process and pays it once, while a trial split into N processes
    of a few requests paid it N times, which put its estimate 5% high."""
    firsts = [float(v["first"]) for v in views if v.get("first") is not None]
    if len(firsts) < len(views):
        return views, 0.0
    steady = [dict(v, m=v["m"] - f / v["n"], run=v["run"] - f,
                   windows=v["windows"][1:] if len(v["windows"]) >= 3 else [])
              for v, f in zip(views, firsts)]
    return steady, sum(firsts) / len(firsts)


def _processes(reports: list[Json], views: list[Json], past: Json | None) -> Json:
    """Prep's variance for a future run's one process (its spread between the
    trials' fresh processes, plus its mean's uncertainty), and what the interval
    leaves out when a trial ran in one process by request."""
    preps = [v["prep"] for v in views if v["prep"] is not None]
    out = {"prep_var": _var(preps) * (1 + 1 / len(preps)) if len(preps) >= 2 else 0.0,
           "prep_part": _("prep's spread between {n} processes", n=len(preps))}
    if any((r.get("processes") or {}).get("count") == 1 for r in reports):
        out["missing"] = [_(
            "drift between processes (processes=1: the trial ran in one process; "
            "processes={n} measures it)", n=PROCESSES)]
    elif len(reports) == 1 and len(views) >= 2 and len((past or {}).get("means", [])) < LONG_FROM:
        # Back-to-back processes agree more with each other than with a run
        # at another time: on the quiet box such intervals held 46 of 60.
        out["missing"] = [_(
            "drift over longer than the trial: its processes ran back to back (trials at "
            "other times, trial=T12,T13, or the calibration measure it)")]
    return out


def _per_request(trials: list[Json], views: list[Json], kind: str | None) -> Json:
    """Runs timed one by one (requests, a recipe's generate or model calls or
    marked spans), pooled over the trials' processes (`views`)."""
    reports = [t["report"] for t in trials]
    names = ", ".join(t["trial"] for t in trials)
    views, once = _steady(views) if len(views) > len(trials) else (views, 0.0)
    n = [v["n"] for v in views]
    m = [v["m"] for v in views]
    k = sum(n)
    lat = sum(ni * mi for ni, mi in zip(n, m)) / k
    within = sum(v["ss"] for v in views) / max(1, sum(v["dof"] for v in views))
    if kind and kind.startswith("mark:"):  # the program's own spans: nothing between them
        trial_means, mean = list(m), lat
    else:  # wall time per run over latency per request: the gaps between requests count
        trial_means = [v["run"] / ni for v, ni in zip(views, n)]
        mean = sum(v["run"] for v in views) / k
    scale = mean / lat if lat > 0 else 1.0
    windows = [[x * tm / mi for x in v["windows"]] if mi > 0 else []
               for v, tm, mi in zip(views, trial_means, m)]
    sd = math.sqrt(within) if sum(v["dof"] for v in views) else None
    if kind:
        source = _("{trials}: {k} runs of one {unit} each ({models}; a whole program run "
                   "{program} s)",
                   trials=names, k=k, unit=unit_label(kind), models=_models_text(reports),
                   program=f"{sum(map(program_seconds, reports)) / len(reports):.4g}")
    elif sd is not None:
        source = _("{trials}: run phase over {k} measured requests (latency mean {mean} s, sd "
                   "{sd} s)", trials=names, k=k, mean=f"{lat:.4g}", sd=f"{sd:.3g}")
    else:
        source = _("{trials}: run phase over {k} measured requests (latency mean {mean} s)",
                   trials=names, k=k, mean=f"{lat:.4g}")
    if len(views) > len(trials):
        source += "; " + _("in {n} fresh processes", n=len(views))
    if once:
        source += "; " + _("a fresh process's first {unit} took {extra} s longer than the rest "
                           "(mean of {n}), counted once for the block, which runs in one",
                           unit=unit_label(kind) if kind else _("request"),
                           extra=f"{once:.3g}", n=len(views))
    return {"k": k, "mean": mean, "unit": unit_label(kind) if kind else _("request"),
            "once": once,
            "trial_means": trial_means, "within": within * scale ** 2, "windows": windows,
            "sd": sd * scale if sd is not None else None, "source": source, "names": names}


def _within(r: Json) -> tuple[float, int]:
    """The sum of squares and degrees of freedom of one trial's run-to-run
    spread: for a recipe, per model (a draft's and a target's calls are two
    distributions; their difference is not noise)."""
    models = (r.get("units") or {}).get("models") if unit_kind(r) else None
    groups = ([(g["count"], g.get("stdev")) for g in models] if models else
              [(r["latency"]["count"], r["latency"].get("stdev"))])
    return (sum((c - 1) * (sd or 0.0) ** 2 for c, sd in groups),
            sum(c - 1 for c, _sd in groups))


def _models_text(reports: list[Json]) -> str:
    """Each model's calls apart, from the first trial: `LlamaForCausalLM#2
    (1.1M params) 96 × 12.3 ms`."""
    parts = []
    for g in (reports[0].get("units") or {}).get("models") or []:
        size = _(" ({n} params)", n=f"{g['params']:,}") if g.get("params") else ""
        parts.append(_("{model}{size} {count} × {mean} ms", model=g.get("model") or "",
                       size=size, count=g["count"],
                       mean=f"{(g.get('mean') or 0) * 1e3:.3g}").strip())
    return "; ".join(parts)


def _per_sample(trials: list[Json], views: list[Json], unit: str,
                source: Callable[[str, int, float, float | None, Json], str]) -> Json:
    """One sample a process (a trial that ran in one): a recipe's run phase,
    or its whole program."""
    reports = [t["report"] for t in trials]
    names = ", ".join(t["trial"] for t in trials)
    samples = [v["run"] for v in views]
    k = len(samples)
    mean = sum(samples) / k
    sd = math.sqrt(_var(samples)) if k > 1 else None
    return {"k": k, "mean": mean, "sd": sd, "unit": unit, "trial_means": samples,
            "within": 0.0, "windows": [[] for _ in samples], "names": names,
            "source": source(names, len(trials), mean, sd, reports[0]) + _in_processes(
                views, trials)}


def _in_processes(views: list[Json], trials: list[Json]) -> str:
    """Where the trials ran in several fresh processes, how many in all."""
    if len(views) <= len(trials):
        return ""
    return "; " + _("{n} fresh processes, one value each", n=len(views))


def _phase_source(names: str, k: int, mean: float, sd: float | None, first: Json) -> str:
    return (_("{trials}: run phase of {k} trial(s), mean {mean} s, sd {sd} s", trials=names,
              k=k, mean=f"{mean:.4g}", sd=f"{sd:.3g}") if sd is not None else
            _("{trials}: run phase of {k} trial(s), mean {mean} s", trials=names, k=k,
              mean=f"{mean:.4g}"))


def _program_source(names: str, k: int, mean: float, sd: float | None, first: Json) -> str:
    inside = _models_text([first])
    values = dict(trials=names, k=k, mean=f"{mean:.4g}", sd=f"{sd:.3g}" if sd else "",
                  inside=inside)
    text = (_("{trials}: the whole program, start to exit, of {k} trial(s), mean {mean} s, "
              "sd {sd} s", **values) if sd is not None else
            _("{trials}: the whole program, start to exit, of {k} trial(s), mean {mean} s",
              **values))
    return text + ("; " + _("inside it: {inside}", inside=inside) if inside else "")


def _pooled(mean: float, between: float, dof: int, past: Json | None,
            parts: list[str]) -> tuple[float, int]:
    """The spread between processes pooled, relative to the mean, with the
    worker's earlier trials' (`history`): three degrees of freedom alone read
    it anywhere from nearly 0 to twice its size."""
    if not past or not past["dof"]:
        return between, dof
    rel = (dof * between / mean ** 2 + past["dof"] * past["rel"]) / (dof + past["dof"])
    parts.append(_("pooled with the spread between processes of {n} earlier trial(s) of this "
                   "config on this worker ({dof} degrees of freedom in all)",
                   n=sum(n > 1 for _m, n in past["means"]), dof=dof + past["dof"]))
    return rel * mean ** 2, dof + past["dof"]


def _satterthwaite(parts: list[tuple[float, int]]) -> int:
    """The degrees of freedom of a sum of variance components (Welch-Satterthwaite),
    rounded down: never more than their sum."""
    total = sum(v for v, _d in parts)
    denom = sum(v * v / d for v, d in parts if d)
    return max(1, min(sum(d for _v, d in parts), int(total * total / denom))) if denom else 1


def spread(pr: Json, trials: int, level_name: str | None = None,
           past: Json | None = None) -> Json:
    """The variance of a future block's mean time per run, by component, and
    its degrees of freedom. A long block sits at some level of the machine's
    speed; the trial saw that level wander between its windows and, with
    several trials, between trials. Each level's own excess over the noise
    below it is one component (never negative), plus the uncertainty of the
    mean measured. Returns {"level": variance per run², "dof", "parts",
    "missing"}; `within` (per run²) is added per block as within/runs. With
    fresh processes, `trials` counts the processes (`level_name` names them):
    a process is the level a one-process run of the block sits at; `past`
    (`history`) pools the worker's earlier spread between processes with
    theirs and adds the drift between trials at other times."""
    parts, missing = [], []
    win = [w for w in pr["windows"] if len(w) >= 2]
    drift = 0.0
    if win:
        # Pooled variance of window means around each trial's own mean, less
        # what the requests' own spread puts into a window's mean.
        dof_w = sum(len(w) - 1 for w in win)
        pooled = sum(_var(w) * (len(w) - 1) for w in win) / dof_w
        per_window = pr["k"] / sum(len(w) for w in pr["windows"] if w) if pr["k"] else 1
        drift = max(0.0, pooled - pr["within"] / per_window)
        parts.append(_("drift between the run phase's windows ({n} windows per trial)",
                       n=len(win[0])) if len(win) > 1 else
                     _("drift between the run phase's windows ({n} windows)", n=len(win[0])))
    else:
        dof_w, pooled = 0, 0.0
        missing.append(_("drift inside the run phase (a report from before windows)"))
    means = pr["trial_means"]
    if trials >= 2:
        between, dof = _var(means), trials - 1
        parts.append(level_name or _("the spread between {n} trials", n=trials))
        between, dof = _pooled(pr["mean"], between, dof, past, parts)
        # A trial mean already holds a share of the noise below it (window drift,
        # or the requests' spread); the rest is drift between trials.
        below = pooled / len(win[0]) if win else pr["within"] * trials / max(1, pr["k"])
        level = drift + max(0.0, between - below) + between / trials
        long_rel, long_dof = _long_drift(past, means, between / pr["mean"] ** 2) if past else (
            0.0, 0)
        if long_dof:
            # The block runs at a level of its own and the trial ran at one: two draws.
            extra = 2 * long_rel * pr["mean"] ** 2
            dof = _satterthwaite([(level, dof), (extra, long_dof)])
            level += extra
            parts.append(_("drift between {n} trials of this config at other times",
                           n=long_dof + 1))
    else:
        missing.append(_("drift over longer than the trial's run phase (trials at other times, "
                         "trial=T12,T13, measure it)"))
        if win:  # the level wanders by the drift; its mean is known to pooled/W
            level, dof = drift + pooled / len(win[0]), dof_w
        else:  # requests alone: the mean's uncertainty from their spread
            level, dof = pr["within"] / max(1, pr["k"]), max(0, pr["k"] - 1)
    if pr["k"] > trials:
        parts.insert(0, _("the run-to-run spread"))
    return {"level": level, "dof": dof, "parts": parts, "missing": missing}
