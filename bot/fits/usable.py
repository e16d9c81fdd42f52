"""Whether a fit can be used, and if not why and what to run instead: one
verdict for batch/length fits (scaling.py) and depth fits (depth.py). Pure.

A fit is *unusable*
* with too few points for its model (fewer configs than terms);
* when its held-out error is over HELD_OUT_BOUND;
* at a config where it predicts what cannot be: a time ≤ 0, or a peak whose
  interval lies below every measured peak at a config no smaller than the
  smallest measured (the weights and the runtime are in every peak: memory
  does not shrink as batch, length or depth grow).
The cause is named, from what the points say:
* *noisy points*: time points whose trial was UNSTABLE or ran on a busy machine
  (report["contention"]["flagged"]), by name;
* *extrapolation*: the config's leverage `h = x'(X'X)⁻¹x` is over FAR_LEVERAGE,
  so the fit's own error there outweighs a new point's scatter (se² = sd²·(1+h)):
  the distance, not the noise, decides;
* *too few points*: the held-out check refits on as many configs as terms, so
  one odd point decides it;
* *the model's shape*: quiet points, and the largest config off the trend of
  the others.
A fit with as many configs as terms is usable but unchecked (no residual).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from bot.fits import ols
from bot.states import Json
from worker.api import FIXED_BOUND, duration, size, summary
from worker.i18n import N_, _

# A verdict's `cause` is one of these codes; shown as _(cause).
CAUSES = (N_("too few points"), N_("noise"), N_("extrapolation"), N_("shape"))

# A plan multiplies a time fit's error by its run count; a fit that misses the
# one config it is checked on by over a quarter cannot tell a block from one a
# third larger. Clean sweeps hold far less (bench_depth: 0.3%, docs/benchmarks.md).
HELD_OUT_BOUND = 0.25

FAR_LEVERAGE = 1.0  # h > 1: the fit's error at the config exceeds a point's own scatter


def marks(r: Json) -> Json:
    """What a report says about its own time figures. `unstable` and `contended`
    are None when not measured (contention: reports before the probe)."""
    st = r.get("stability") or {}
    stable = st.get("stable")
    ratio = st.get("iqr_over_median")
    if stable is None and st and not st.get("threshold") and ratio is not None:
        stable = ratio < FIXED_BOUND  # a fixed count from before the worker judged it
    c = r.get("contention")
    return {"unstable": None if stable is None else not stable, "spread": ratio,
            "contended": bool(c.get("flagged")) if isinstance(c, dict) else None,
            # the worker's note in the reader's language, its English where it has none
            "contention": summary.busy_line(r) if isinstance(c, dict) else None}


def marked(model: Json, points: list[Json],
           which: tuple[str, ...] = ("unstable", "contended")) -> list[str]:
    """"T14 UNSTABLE (IQR/median 40.0%)", "T15 contended (busy machine: …)" for
    the model's own points."""
    out: list[str] = []
    for p in _own(model, points):
        m = p.get("marks") or {}
        if m.get("unstable") and "unstable" in which:
            spread = (_("IQR/median {spread}", spread=format(m["spread"], ".1%"))
                      if m.get("spread") is not None else _("spread"))
            out.append(_("{trial} UNSTABLE ({spread})", trial=p["trial"], spread=spread))
        if m.get("contended") and "contended" in which:
            out.append(_("{trial} contended ({contention})", trial=p["trial"],
                         contention=m.get("contention") or _("busy machine")))
    return out


def unmeasured(model: Json, points: list[Json]) -> list[str]:
    """The model's trials whose reports measured no contention."""
    return [p["trial"] for p in _own(model, points) if (p.get("marks") or {}).get(
        "contended") is None]


def _own(model: Json, points: list[Json]) -> list[Json]:
    trials = set(model.get("trials") or [])
    return [p for p in points if p.get("trial") in trials]


def verdict(model: Json, points: list[Json], at: tuple[float, float, float] | None = None,
            axis: str | None = None) -> Json:
    """The fit's verdict, or its prediction's at `at` = (b, s, value). `axis`
    names the b axis's parameter (batch, layers) for what to run instead."""
    out: dict[str, Any] = {
        "usable": True, "checked": True, "problem": None, "cause": None, "why": None,
        "instead": None, "marked": [], "marked_trials": [], "unmeasured": []}
    if model.get("error"):
        return {**out, "usable": False, "checked": False, "cause": "too few points",
                "problem": model["error"], "why": _("too few points for the model"),
                "instead": _add(model, axis)}
    time = model["unit"] == "s"
    if time:
        out["marked"], out["unmeasured"] = marked(model, points), unmeasured(model, points)
        out["marked_trials"] = [p["trial"] for p in _own(model, points)
                                if marked(model, [p])]
    held = model.get("held_out")
    if not model["dof"]:
        out.update(checked=False,
                   why=_("{configs} configs for {terms} terms: an exact fit, nothing checks it",
                         configs=model["distinct"], terms=len(model["features"])),
                   instead=_add(model, axis))
    elif held and held["relative_error"] is not None \
            and abs(held["relative_error"]) > HELD_OUT_BOUND:
        out.update(usable=False,
                   problem=_("held-out error {error} at {trial}, over the {bound} bound",
                             error=format(held["relative_error"], "+.1%"), trial=held["trial"],
                             bound=format(HELD_OUT_BOUND, ".0%")))
        _cause_held(out, model, axis)
    if out["usable"] and at is not None:
        _judge_at(out, model, at, axis)
    return out


def _cause_held(out: Json, model: Json, axis: str | None) -> None:
    if out["marked"]:
        _noise(out)
    elif model["distinct"] <= len(model["features"]) + 1:
        out.update(cause="too few points",
                   why=_("the check refits {terms} terms on {configs} configs, so one odd point "
                         "decides it", terms=len(model["features"]),
                         configs=model["distinct"] - 1),
                   instead=_add(model, axis))
    else:
        why = (_("no point is marked UNSTABLE or contended, so the largest config departs from "
                 "the trend of the others: the model misses a term, or the range is too wide "
                 "for it") if not out["unmeasured"] else
               _("no point is marked UNSTABLE (contention not measured), so the largest config "
                 "departs from the trend of the others: the model misses a term, or the range "
                 "is too wide for it"))
        out.update(cause="shape", why=why,
                   instead=_("sweep closer: {configs}", configs=_between(model, axis)))


def _judge_at(out: Json, model: Json, at: tuple[float, float, float], axis: str | None) -> None:
    b, s, value = at
    small = model["smallest"]  # the least config: a larger one holds at least its memory
    if model["unit"] == "s":
        if value > 0:
            return
        out["problem"] = _("predicts {time} per run, and a time is positive",
                           time=duration(value))
    else:
        # Below the smallest peak beyond the fit's own noise: the interval's top too.
        se, dof = ols.predict_model(model, b, s)[1:]
        top = value + ols.t_quantile(dof) * se if dof and not math.isnan(se) else value
        if value > 0 and not (b >= small["b"] and s >= small["s"]
                              and top < model["min"] * (1 - 1e-9)):
            return
        out["problem"] = (_("predicts {size}, below every measured peak (the least {least}) "
                            "at a config no smaller than the smallest, and memory does not "
                            "shrink as the config grows", size=size(value),
                            least=size(model["min"])) if value > 0 else
                          _("predicts {size}, and memory is positive", size=size(value)))
    out["usable"] = False
    h = ols.leverage(model, b, s)
    far = h is not None and h > FAR_LEVERAGE
    if out["marked"]:
        _noise(out)
        if far:
            out["why"] = _("{why}; and the config is far from the points (leverage {h})",
                           why=out["why"], h=format(h, ".3g"))
    elif far:
        top = model["range"]["b"][1]
        lev = f"{h:.3g}"
        why = (_("{axis}={b} is {times}× the largest measured {axis} {top}; the fit's own error "
                 "there (leverage {h}) outweighs the points' scatter: the distance, not the "
                 "noise, decides", axis=axis, b=format(b, "g"), times=format(b / top, ".3g"),
                 top=format(top, "g"), h=lev) if axis and b > top else
               _("the fit's own error there (leverage {h}) outweighs the points' scatter: the "
                 "distance, not the noise, decides", h=lev))
        out.update(cause="extrapolation", why=why,
                   instead=_("sweep closer: {configs}", configs=_toward(model, b, axis)))
    else:
        rel = (model["residual_sd"] / abs(model["mean"]) if model.get("residual_sd")
               and model.get("mean") else None)
        out.update(cause="noise",
                   why=(_("noisy points: inside the measured range the points scatter more "
                          "than the trend (residual sd {rel} of their mean)",
                          rel=format(rel, ".0%"))
                        if rel is not None else
                        _("noisy points: inside the measured range the points scatter more "
                          "than the trend")),
                   instead=_("re-run the sweep on a quiet machine, with more repeats"))


def _noise(out: Json) -> None:
    names = sorted(set(out["marked_trials"]), key=_num)
    out.update(cause="noise", why=_("noisy points: {points}", points=", ".join(out["marked"])),
               instead=_("re-run {trials} on a quiet machine (the sweep again, or with more "
                         "repeats) and fit again", trials=", ".join(names)))


def _num(trial: str) -> int:
    return int(trial[1:]) if trial and trial[1:].isdigit() else 0


def _values(model: Json) -> list[float]:
    return sorted({c[0] for c in model.get("configs") or []})


def _fmt(axis: str | None, values: Iterable[float]) -> str:
    shown = ",".join(f"{v:g}" for v in values)
    return f"`{axis}={shown}`" if axis else _("configs at b = {values}", values=shown)


def _add(model: Json, axis: str | None) -> str:
    return _("add points: {configs}", configs=_more(model, axis))


def _more(model: Json, axis: str | None) -> str:
    """A third point (or more) for a fit with none to spare."""
    vals = _values(model)
    if not vals or (model.get("range") or {}).get("b", [0, 0])[0] == model["range"]["b"][1]:
        return _("a config of another size")
    nxt = [*vals[1:], vals[-1] * 2]
    gaps = [round((a + c) / 2) for a, c in zip(vals, nxt) if round((a + c) / 2) not in vals]
    return _fmt(axis, sorted({*gaps[-2:]})) if gaps else _fmt(axis, [vals[-1] * 2])


def _between(model: Json, axis: str | None) -> str:
    """Points between the largest config and the next: where the check failed."""
    vals = _values(model)
    if len(vals) < 2:
        return _more(model, axis)
    lo, hi = vals[-2], vals[-1]
    mid = round(math.sqrt(lo * hi)) if lo > 0 else round(hi / 2)
    return _fmt(axis, sorted({mid, hi} - {lo})) if mid not in (lo, hi) else _more(model, axis)


def _toward(model: Json, b: float, axis: str | None) -> str:
    """Points from the largest measured config toward the one asked about."""
    top = model["range"]["b"][1]
    if b <= top or top <= 0:
        return _more(model, axis)
    mid = round(math.sqrt(top * b))
    return _fmt(axis, sorted({v for v in (mid, round(b)) if v > top}))


def text(v: Json) -> str:
    """"unusable: …; cause: …; instead: …" (or the unchecked note)."""
    if v["usable"]:
        return (_("unchecked: {why}; {instead}", why=v["why"], instead=v["instead"])
                if not v["checked"] else "")
    return _("unusable: {problem}; cause: {why}; instead: {instead}", problem=v["problem"],
             why=v["why"], instead=v["instead"])


def names(trials: list[str]) -> str:
    """T1, T2, T3 — or T1–T16 (16 trials) when there are many."""
    return ", ".join(trials) if len(trials) <= 4 else \
        _("{first}–{last} ({n} trials)", first=trials[0], last=trials[-1], n=len(trials))


def marks_text(v: Json, unmeasured_only: bool = False) -> str:
    """The marked and unmeasured points, for a usable fit too."""
    bits = []
    if v["marked"] and not unmeasured_only:
        bits.append(_("points marked: {points}", points=", ".join(v["marked"])))
    if v["unmeasured"]:
        bits.append(_("contention not measured for {trials}", trials=names(v["unmeasured"])))
    return "; ".join(bits)
