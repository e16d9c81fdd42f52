"""Ordinary least squares for the scaling fits, with the checks a fit is
judged by: a held-out point, leave-one-out errors, and a Student-t prediction
interval for a new observation. Pure (numpy; scipy for the t quantile).

For a new config `x` the prediction is `x·β` and its standard error as a new
observation `sd·sqrt(1 + x'(X'X)⁻¹x)`, with `sd` the residual standard
deviation on `dof = n − p` degrees of freedom; a `t(dof)` quantile turns it
into an interval. With `dof = 0` (2 points and a line) there is no residual:
the standard error is NaN and nothing checks the fit.

Checks: *held out* — refit without the largest config (largest `b·s`) and
predict it (needs 3 distinct configs); *leave-one-out* — the same for every
config. A richer model replaces the default only when it has `p + 2` distinct
configs and cuts the leave-one-out error by RICHER_FACTOR.

The form's error (band()): the residuals hold the points' spread, not how far
the fitted form itself is off away from them. Leave-one-out measures that: the
error predicting each config from the others is read as a curve the form lacks,
so it grows as a line's error under a curve does (Lagrange's remainder): with
`u = b·s`, `|u − u_lo|·|u − u_hi|` over the configs the prediction rests on. Each
left-out error divided by its own reach gives a curvature; their RMS times the
question's reach is the form's half-width, added in quadrature to the residuals'
t interval (two independent errors).
Exact for a quadratic truth fitted by a line, zero for a straight one; with 3
configs a noisy point reads as a curve too (they cannot be told apart), so the
band is wide until a config nearer the question is measured.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from bot.states import Json
from worker.i18n import _

RICHER_FACTOR = 0.8  # a richer model must cut the leave-one-out error by 20%...

NEGLIGIBLE = 1e-6    # ...of a default whose error is not already negligible (rounding)

FEATURES: dict[str, Callable[[float, float], float]] = {
    "1": lambda b, s: 1.0,
    "b": lambda b, s: float(b),
    "s": lambda b, s: float(s),
    "s^2": lambda b, s: float(s) ** 2,
    "b*s": lambda b, s: float(b) * s,
    "b*s^2": lambda b, s: float(b) * s * s,
}

CANDIDATES = {
    "memory": {"b": [["1", "b"]],
               "s": [["1", "s"], ["1", "s", "s^2"]],
               "bs": [["1", "b*s"], ["1", "b", "b*s"], ["1", "b*s", "b*s^2"]]},
    "time": {"b": [["1", "b"]],
             "s": [["1", "s"], ["1", "s", "s^2"]],
             "bs": [["1", "b", "b*s"], ["1", "b*s"], ["1", "b", "b*s", "b*s^2"]]},
}

# One measured point: batch, length, the measured value, its trial ("T12").
Point = tuple[float, float, float, str | None]
Config = tuple[float, float]  # batch, length


def design(features: list[str], bs: list[tuple[float, float]]) -> np.ndarray:
    return np.array([[FEATURES[f](b, s) for f in features] for b, s in bs], dtype=float)

def _lstsq(X: np.ndarray, y: np.ndarray
           ) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """Least squares on column-scaled X (b·s² can be 1e10 next to 1); returns
    (coef, (X'X)⁻¹, rank)."""
    scale = np.linalg.norm(X, axis=0)
    scale[scale == 0] = 1.0
    Z = X / scale
    coef, _residuals, rank, _sv = np.linalg.lstsq(Z, y, rcond=None)
    if rank < X.shape[1]:
        return None, None, rank
    cov = np.linalg.pinv(Z.T @ Z) / np.outer(scale, scale)
    return coef / scale, cov, rank

def _fit_rows(features: list[str], rows: Sequence[Point]) -> tuple[np.ndarray, np.ndarray] | None:
    """rows: [(b, s, y, trial)] → (coef, cov) or None when rank-deficient."""
    X = design(features, [(r[0], r[1]) for r in rows])
    coef, cov, _rank = _lstsq(X, np.array([r[2] for r in rows], dtype=float))
    return None if coef is None or cov is None else (coef, cov)

def _configs(rows: Sequence[Point]) -> list[Config]:
    return sorted({(r[0], r[1]) for r in rows}, key=lambda c: (c[0] * c[1], c[0], c[1]))

def _left_out(features: list[str], rows: Sequence[Point]
              ) -> list[tuple[Config, float, list[Config]]] | None:
    """Leave each distinct config out, refit, predict it: [(config, predicted,
    the other configs)], or None when some refit cannot determine the form."""
    out = []
    for config in _configs(rows):
        rest = [r for r in rows if (r[0], r[1]) != config]
        fit = _fit_rows(features, rest) if len(_configs(rest)) >= len(features) else None
        if fit is None:
            return None
        out.append((config, float(design(features, [config])[0] @ fit[0]), _configs(rest)))
    return out


def _loo(features: list[str], rows: Sequence[Point]) -> Json | None:
    """Leave-one-out's relative errors, each trial against its config's prediction."""
    errors = [predicted / r[2] - 1 for config, predicted, _rest in _left_out(features, rows) or []
              for r in rows if (r[0], r[1]) == config and r[2]]
    if not errors:
        return None
    e = np.array(errors)
    return {"max_relative": float(np.max(np.abs(e))), "rms_relative": float(np.sqrt(np.mean(e**2))),
            "count": len(errors)}

def _reach(u: float, us: list[float]) -> float:
    """How a missing curve's error grows at u from configs spanning `us`."""
    return abs(u - min(us)) * abs(u - max(us))


def _form(features: list[str], rows: Sequence[Point]) -> tuple[Json | None, str | None]:
    """The form's error from leave-one-out (module doc): {curvature, count,
    points, u}, or None and why there is none."""
    configs = _configs(rows)
    if len(configs) <= len(features):
        return None, _("{n} configs for a {p}-term form leave none to predict from the others "
                       "(leave-one-out needs {need})", n=len(configs), p=len(features),
                       need=len(features) + 1)
    left_out = _left_out(features, rows)
    if left_out is None:
        return None, _("the configs left after leaving one out cannot determine the form")
    curvatures = []
    for config, predicted, rest in left_out:
        reach = _reach(config[0] * config[1], [c[0] * c[1] for c in rest])
        measured = float(np.mean([r[2] for r in rows if (r[0], r[1]) == config]))
        if reach > 0:  # a config at the same b·s as another says nothing about a curve
            curvatures.append(abs(predicted - measured) / reach)
    if not curvatures:
        return None, _("every config shares its b·s with another: no curve to read")
    return {"curvature": float(np.sqrt(np.mean(np.square(curvatures)))),
            "count": len(curvatures), "points": len(rows),
            "u": [configs[0][0] * configs[0][1], configs[-1][0] * configs[-1][1]]}, None


def _held_out(features: list[str], rows: Sequence[Point]) -> tuple[Json | None, str | None]:
    configs = _configs(rows)
    if len(configs) < 3:
        return None, _("needs 3 distinct configs, the sweep has {n}: a line through 2 points "
                       "has nothing left to check it with", n=len(configs))
    largest = configs[-1]
    rest = [r for r in rows if (r[0], r[1]) != largest]
    if len(_configs(rest)) < len(features):
        return None, _("the {n}-term model needs {n} configs besides the largest",
                       n=len(features))
    fit = _fit_rows(features, rest)
    if fit is None:
        return None, _("the configs besides the largest cannot determine the model")
    held = [r for r in rows if (r[0], r[1]) == largest]
    measured = float(np.mean([r[2] for r in held]))
    predicted = float(design(features, [largest])[0] @ fit[0])
    return {"trial": held[0][3], "b": largest[0], "s": largest[1], "predicted": predicted,
            "measured": measured,
            "relative_error": predicted / measured - 1 if measured else None}, None

def fit_target(rows: Sequence[Point], kind: str, varied: str, target: str, unit: str,
               what: str) -> Json:
    """Fit one target. rows: [(b, s, y, trial)]; kind: "memory" | "time";
    varied: "b" | "s" | "bs". Returns a model dict, or {"error": ...}."""
    configs = _configs(rows)
    if len(configs) < 2:
        return {"target": target, "error": _("{n} distinct config measured: at least 2 are "
                                             "needed to fit anything", n=len(configs))}
    tried: list[Json] = []
    for features in CANDIDATES[kind][varied]:
        if len(configs) < len(features):
            continue
        fit = _fit_rows(features, rows)
        if fit is None:
            continue
        tried.append({"features": features,
                      "loo": _loo(features, rows) if len(configs) > len(features) else None})
    if not tried:
        return {"target": target,
                "error": _("the measured configs cannot determine even a line")}
    chosen, why = tried[0], _("the default model for what the sweep varied")
    base = (chosen["loo"] or {}).get("rms_relative")
    for cand in tried[1:]:
        err = (cand["loo"] or {}).get("rms_relative")
        if (len(configs) >= len(cand["features"]) + 2 and base is not None and err is not None
                and base > NEGLIGIBLE and err < RICHER_FACTOR * base):
            chosen, why = cand, _("{terms}: leave-one-out error {error} against {base} for the "
                                  "default", terms=" + ".join(cand["features"]),
                                  error=format(err, ".1%"), base=format(base, ".1%"))
            base = err
    features = chosen["features"]
    fitted = _fit_rows(features, rows)
    assert fitted is not None  # the same rows fitted as a candidate above
    coef, cov = fitted
    X = design(features, [(r[0], r[1]) for r in rows])
    y = np.array([r[2] for r in rows], dtype=float)
    resid = y - X @ coef
    dof = len(rows) - len(features)
    sd = float(np.sqrt(resid @ resid / dof)) if dof > 0 else None
    held, held_why = _held_out(features, rows)
    form, form_why = _form(features, rows)
    small = configs[0]
    return {
        "target": target, "unit": unit, "what": what, "features": features,
        "coef": [float(c) for c in coef], "n": len(rows), "distinct": len(configs), "dof": dof,
        "residual_sd": sd, "cov_unscaled": cov.tolist(),
        "held_out": held, "held_out_why": held_why,
        "loo": chosen["loo"], "form": form, "form_why": form_why,
        "candidates": [{"features": c["features"],
                        "loo_rms_relative": (c["loo"] or {}).get("rms_relative")}
                       for c in tried],
        "why": why,
        "range": {"b": [min(c[0] for c in configs), max(c[0] for c in configs)],
                  "s": [min(c[1] for c in configs), max(c[1] for c in configs)]},
        # What bot/fits/usable.py judges a fit by: its points, their size, the smallest.
        "trials": [r[3] for r in rows], "mean": float(np.mean(y)), "min": float(np.min(y)),
        "configs": [list(c) for c in configs],
        "smallest": {"b": small[0], "s": small[1],
                     "measured": float(np.mean([r[2] for r in rows if (r[0], r[1]) == small]))},
    }

def predict_model(model: Json, b: float, s: float) -> tuple[float, float, int]:
    """(value, standard error of a new observation, dof) at batch b, length s.
    A model without a batch (length) term only holds at the batch (length) the
    sweep measured: asking elsewhere raises ValueError."""
    for axis, value in (("b", b), ("s", s)):
        lo, hi = model["range"][axis]
        if not any(axis in f for f in model["features"]) and not lo <= value <= hi:
            at = f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"
            values = dict(at=at, target=model["target"], value=format(value, "g"))
            raise ValueError(_("the sweep measured batch {at} only, so its {target} fit cannot "
                               "say what happens at batch {value}: sweep the batch too", **values)
                             if axis == "b" else
                             _("the sweep measured length {at} only, so its {target} fit cannot "
                               "say what happens at length {value}: sweep the length too",
                               **values))
    x = design(model["features"], [(b, s)])[0]
    value = float(x @ np.array(model["coef"]))
    if not model["dof"] or model["residual_sd"] is None:
        return value, math.nan, 0
    leverage = float(x @ np.array(model["cov_unscaled"]) @ x)
    return value, model["residual_sd"] * math.sqrt(1 + max(leverage, 0.0)), model["dof"]

@dataclass(frozen=True)
class Band:
    """A prediction and its interval: the residuals' t interval (`noise`, the
    half-width) and the form's leave-one-out error (`form`), two independent
    errors added in quadrature; `low` and `high` None, with `why`, when there is
    none."""
    value: float
    dof: int
    noise: float | None = None
    form: float | None = None
    points: int = 0  # the points the form's error rests on
    why: str | None = None

    @property
    def half(self) -> float | None:
        return None if self.noise is None or self.form is None else math.hypot(self.noise,
                                                                                 self.form)

    @property
    def low(self) -> float | None:
        return None if self.half is None else self.value - self.half

    @property
    def high(self) -> float | None:
        return None if self.half is None else self.value + self.half


def band(model: Json, b: float, s: float, level: float = 0.90, form: bool = True) -> Band:
    """The prediction at (b, s) with an interval holding the points' spread and
    the fitted form's error (module doc); none with too few points for either.
    `form=False`: the residuals' interval alone (a depth fit's, for now)."""
    value, se, dof = predict_model(model, b, s)
    if not dof or math.isnan(se):
        return Band(value, 0, why=_("{n} points, {p} terms: dof 0", n=model["n"],
                                    p=len(model["features"])))
    noise = t_quantile(dof, level) * se
    if not form:
        return Band(value, dof, noise=noise, form=0.0)
    loo = model["form"]
    if loo is None:
        return Band(value, dof, why=model["form_why"])
    return Band(value, dof, noise=noise, form=loo["curvature"] * _reach(b * s, loo["u"]),
                points=loo["points"])


def leverage(model: Json, b: float, s: float) -> float | None:
    """x'(X'X)⁻¹x at (b, s): how far the config is from the points in the fit's
    own terms (about p/n inside them, growing with the square of the distance
    outside); None for a model without one."""
    if not model.get("cov_unscaled"):
        return None
    x = design(model["features"], [(b, s)])[0]
    return max(0.0, float(x @ np.array(model["cov_unscaled"]) @ x))

@functools.lru_cache(maxsize=512)  # scipy's ppf costs ~0.3 ms; a digest asks it per block
def t_quantile(dof: int, level: float = 0.90) -> float:
    """Two-sided Student-t quantile (scipy when present; normal as a floor)."""
    if not dof:
        return math.nan
    try:
        from scipy import stats
        return float(stats.t.ppf(0.5 + level / 2, dof))
    except ImportError:  # the worker side has no scipy; 1.645 understates small dof
        return 1.6448536269514722

def interval(value: float, se: float, dof: int, level: float = 0.90) -> tuple[float, float] | None:
    if not dof or math.isnan(se):
        return None
    half = t_quantile(dof, level) * se
    return value - half, value + half
