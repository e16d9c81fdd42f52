"""Plans that learn from their actuals (docs/plans-and-advice.md, "Calibration").
Pure: the service (bot/plans/service.py) builds the pairs from the store.

A *pair* is one past block: its uncalibrated estimate, recomputed from its
trials, against its recorded actual. `calibrate(pairs)` turns the pairs of one
scope into multipliers for a new estimate by split-conformal prediction:

    l_i   = log(actual_i / estimate_i)
    c     = median(l)                      the centre (the scope's usual bias)
    s_i   = |l_i − median(l without i)|    leave-one-out score
    q     = the k-th smallest s_i, k = ceil((n + 1) · level)
    new   = estimate × [exp(c − q), exp(c + q)]

k ≤ n is needed for a finite bound, so the fewest pairs is the smallest n with
ceil((n + 1) · level) ≤ n: 9 at 90%. The centre is fitted on the same pairs, so
the coverage is close to the level, not guaranteed (exact only with c fixed at
0); the leave-one-out scores measure each pair as a new block would be
measured, against a centre it did not help fit.

A pair is a plain dict (the lead's bench calls `calibrate` with such dicts):

    {"estimate": 3600.0,          # GPU-seconds, the uncalibrated point estimate
     "actual": 4100.0,            # GPU-seconds recorded
     "estimate_parts": {"prep": 300.0, "runs": 3300.0, ...},  # optional, per component
     "actual_parts": {"prep": 280.0, "runs": 3820.0, ...},    # optional
     "plan": "adkv", "block": "baseline",                    # optional: which pair
     "name": "round 3",           # optional: instead of plan and block
     "scope": "1× NVIDIA H100 80GB HBM3 · llm-infer",        # optional: stated
     "contended": ["T12"],        # optional: trials that flagged contention (or a bool)
     "unmeasured": ["T9"],        # optional: trials with no contention measured
     "interval": (0.9, 1.1),      # optional: the block's own interval, × its estimate
     "recorded": 1700000000.0}    # optional: when the actual was recorded (for `record`)

It answers {"calibrated", "low", "high", "n", "needed", "text", "used", "left_out",
"scope", "level", "centre"}: the new interval is estimate × [low, high].
"""
from __future__ import annotations

import math

import numpy as np

from bot.states import Json
from worker.i18n import N_, _

LEVEL = 0.90
COMPONENTS = ("prep", "runs", "retries", "data", "idle")
# What a component's excess is called when it explains a miss.
CAUSES = {"runs": (N_("slower runs"), N_("faster runs")),
          "prep": (N_("longer prep"), N_("shorter prep")),
          "retries": (N_("more retries"), N_("fewer retries")),
          "data": (N_("longer data prep"), N_("shorter data prep")),
          "idle": (N_("more idle"), N_("less idle"))}


def scope_of(est: Json) -> str:
    """The scope a block is calibrated in: its environment kind (GPU count and
    name, or the CPU) and its workload (a recipe by its name)."""
    cfg = est.get("config") or {}
    return f"{est['env']} · {cfg.get('recipe') or cfg.get('workload')}"


def pair_of(plan: str, est: Json, row: Json) -> Json | None:
    """A block's pair from its estimate (bot/plans/estimate.py, in hours) and its
    review row (bot/plans/review.py); None without an actual."""
    if row.get("actual") is None:
        return None
    interval = None
    own = own_interval(est, row["estimate"])
    if own and row["estimate"] > 0:
        interval = tuple(x / row["estimate"] for x in own)
    return {"plan": plan, "block": est["kind"], "scope": scope_of(est),
            "estimate": row["estimate"] * 3600, "actual": row["actual"] * 3600,
            "estimate_parts": row.get("estimate_parts") or {},
            "actual_parts": row.get("actual_parts") or {},
            "contended": row.get("contended") or [], "unmeasured": row.get("unmeasured") or [],
            "interval": interval, "recorded": row.get("recorded")}


def own_interval(est: Json, compared: float) -> tuple[float, float] | None:
    """The block's own 90% interval, in GPU-hours, around `compared`: the
    estimate as review compares it with the actual (idle left out when the
    actual does not give it). The interval is the runs' spread, so it keeps its
    width in hours whatever idle or hand-off is added or left out."""
    if not est.get("interval"):
        return None
    below = float(est["hours"] - est["interval"][0])
    above = float(est["interval"][1] - est["hours"])
    return max(0.0, compared - below), compared + above


def scaled(compared: float, multipliers: tuple[float, float],
           declared: float = 0.0) -> tuple[float, float]:
    """`compared` × the calibrated multipliers, a declared hand-off inside it
    (GPU-hours) added once, unscaled: it is a figure given, not measured."""
    base = compared - declared
    low, high = multipliers
    return base * low + declared, base * high + declared


def min_pairs(level: float = LEVEL) -> int:
    """The fewest pairs whose conformal bound is finite: ceil((n + 1)·level) ≤ n."""
    if not 0 < level < 1:
        raise ValueError(f"level {level} is not between 0 and 1")
    n = 1
    while _rank(n, level) > n:
        n += 1
    return n


def _rank(n: int, level: float) -> int:
    # (n + 1)·level in floating point can land a hair above a whole number.
    return math.ceil(round((n + 1) * level, 9))


def ratios(pair: Json) -> Json:
    """actual / estimate for the block and for each component both sides have
    (None where the estimate of a component is 0: no ratio to speak of)."""
    out = {"block": pair["actual"] / pair["estimate"] if pair["estimate"] > 0 else None}
    est, act = pair.get("estimate_parts") or {}, pair.get("actual_parts") or {}
    for name in COMPONENTS:
        if name in est and name in act:
            out[name] = act[name] / est[name] if est[name] > 0 else None
    return out


def usable(pairs: list[Json]) -> tuple[list[Json], list[str]]:
    """Pairs with a ratio, and why the others were left out."""
    good, left = [], []
    for p in pairs:
        if not (p["estimate"] > 0 and p["actual"] > 0
                and math.isfinite(p["estimate"]) and math.isfinite(p["actual"])):
            left.append(_("{name}: estimate {estimate} s, actual {actual} s has no ratio",
                          name=_name(p), estimate=f"{p['estimate']:.4g}",
                          actual=f"{p['actual']:.4g}"))
        else:
            good.append(p)
    return good, left


def calibrate(pairs: list[Json], level: float = LEVEL, scope: str | None = None) -> Json:
    """The calibrated multipliers for a new estimate from one scope's pairs, or
    why there are none. `low`/`high` multiply the new block's point estimate."""
    good, left = usable(pairs)
    need, n = min_pairs(level), len(good)
    where = f" ({scope})" if scope else ""
    used = [_name(p) for p in good]
    out = {"calibrated": False, "n": n, "needed": need, "level": level, "scope": scope,
           "used": used, "left_out": left, "low": None, "high": None, "centre": None}
    if n < need:
        out["text"] = _("uncalibrated: {n} of the {needed} pairs needed{where} ({more} more "
                        "recorded actuals)", n=n, needed=need, where=where, more=need - n)
        return out
    logs = np.log([p["actual"] / p["estimate"] for p in good])
    c = float(np.median(logs))
    scores = np.array([abs(logs[i] - np.median(np.delete(logs, i))) for i in range(n)])
    k = _rank(n, level)
    q = float(np.sort(scores)[k - 1])
    lo, hi = math.exp(c - q), math.exp(c + q)
    out.update(calibrated=True, low=lo, high=hi, centre=math.exp(c), rank=k, score=q,
               text=_("calibrated on {n} past blocks{where}: {level} of actuals fell within "
                      "×{low}–×{high} of their estimate", n=n, where=where,
                      level=f"{level:.0%}", low=f"{lo:.2f}", high=f"{hi:.2f}"))
    return out


def scoped(pairs: list[Json], scope: str | None,
           exclude: tuple[str, str] | None = None) -> list[Json]:
    """The pairs of one scope only (another GPU kind or workload is never mixed
    in), less `exclude` (plan, block): a block is not calibrated on itself."""
    return [p for p in pairs if p.get("scope") == scope
            and (exclude is None or (p.get("plan"), p.get("block")) != exclude)]


def inside(pair: Json, multipliers: tuple[float, float] | None) -> bool | None:
    """Did the actual fall inside estimate × [lo, hi]? None without an interval."""
    if multipliers is None or not pair["estimate"] > 0:
        return None
    lo, hi = multipliers
    held: bool = pair["estimate"] * lo <= pair["actual"] <= pair["estimate"] * hi
    return held


def cause(pair: Json) -> str:
    """Why an actual differs from its estimate: contention when a trial on
    either side flagged it, else the component whose actual − estimate is the
    largest in the direction of the miss."""
    over = pair["actual"] >= pair["estimate"]
    est, act = pair.get("estimate_parts") or {}, pair.get("actual_parts") or {}
    deltas = {k: act.get(k, 0.0) - est.get(k, 0.0) for k in COMPONENTS if k in est or k in act}
    text = _("components not recorded")
    if deltas:
        name = max(deltas, key=lambda k: deltas[k] if over else -deltas[k])
        text = (_(CAUSES[name][0 if deltas[name] >= 0 else 1])
                + f" ({deltas[name] / 3600:+.3g} GPU-h)")
    if pair.get("contended"):
        trials = pair["contended"]
        if isinstance(trials, (list, tuple)):
            return _("contention on {trials}; {cause}", trials=", ".join(trials), cause=text)
        return _("contention (flagged); {cause}", cause=text)
    if pair.get("unmeasured"):
        return _("{cause}; contention not measured on {trials}", cause=text,
                 trials=", ".join(pair["unmeasured"]))
    return text


def record(pairs: list[Json], level: float = LEVEL) -> Json:
    """How the bot's intervals did: each pair, in the order its actual was
    recorded, against the interval the bot would have shown for it then (the
    calibrated one from the earlier pairs of its scope once there were enough,
    else its own). k of n held it, the median absolute error, the worst miss."""
    good, left = usable(pairs)
    good = sorted(good, key=lambda p: p.get("recorded") or 0.0)
    rows = []
    for i, p in enumerate(good):
        before = scoped(good[:i], p.get("scope"))
        cal = calibrate(before, level)
        shown = (cal["low"], cal["high"]) if cal["calibrated"] else p.get("interval")
        rows.append({"pair": p, "name": _name(p), "ratio": p["actual"] / p["estimate"],
                     "interval": shown, "calibrated": cal["calibrated"],
                     "held": inside(p, shown)})
    judged = [r for r in rows if r["held"] is not None]
    errors = [abs(r["ratio"] - 1) for r in rows]
    worst = max(rows, key=lambda r: abs(math.log(r["ratio"])), default=None)
    return {"rows": rows, "n": len(judged), "held": sum(r["held"] for r in judged),
            "no_interval": len(rows) - len(judged), "left_out": left,
            "median_error": float(np.median(errors)) if errors else None,
            "worst": dict(worst, cause=cause(worst["pair"])) if worst else None}


def _name(p: Json) -> str:
    name: str | None = p.get("name")
    if name:
        return name
    return f"{p.get('plan') or '?'} {p.get('block') or '?'}"
