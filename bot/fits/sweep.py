"""Which fit a sweep gets: a sweep of llm-infer's `layers` is a depth sweep
(depth.py), any other a batch/length sweep (scaling.py). Pure."""
from __future__ import annotations

from bot.fits import depth, ols, scaling, usable
from bot.states import Json


def fit_sweep(reports: list[Json]) -> Json:
    """The sweep's fit (scaling.fit_sweep's or depth.fit_depth's JSON)."""
    reports = [r for r in reports if r]
    if depth.is_depth_sweep(reports):
        return depth.fit_depth(reports)
    return scaling.fit_sweep(reports)


def predict_seconds(fit: Json, params: Json) -> tuple[float, float, int]:
    """(seconds per request, standard error of a new observation, dof) from
    either kind of fit; for a recipe, seconds of one run phase."""
    if fit.get("kind") != "depth":
        return scaling.predict_seconds(fit, params)
    if fit.get("error"):
        raise ValueError(fit["error"])
    model = fit.get("time")
    if model is None or model.get("error"):
        raise ValueError("the sweep has no time fit" + (f": {model['error']}" if model else ""))
    return ols.predict_model(model, depth.question_layers(fit, params), 1)


def judge_seconds(fit: Json, params: Json, seconds: float) -> Json:
    """The time fit's verdict at a question's config (bot/fits/usable.py)."""
    if fit.get("kind") == "depth":
        at, axis = (depth.question_layers(fit, params), 1), "layers"
    else:
        at, axis = scaling.point(fit, params), fit["variables"]["batch"]
    return usable.verdict(fit["time"], fit.get("points") or [], (*at, seconds), axis)
