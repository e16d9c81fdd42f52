"""A sweep's fit as a PNG (matplotlib, Agg backend): per panel (peak memory,
time) the measured points, the fitted line with its prediction band, the
held-out point, and the asked prediction with its interval. Batch and length
sweeps plot against the varied axis, depth sweeps against layers. Pure: the
fit in, PNG bytes out."""
from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING

from bot.fits import depth, ols, scaling
from bot.states import Json

if TYPE_CHECKING:  # matplotlib is imported when the first chart is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LEVEL = 0.90  # as in the sweep messages
MAX_LINES = 4  # a sweep of batch and length: one line per length, the smallest few
# Labels stay English in every channel's language: matplotlib has no Korean font
# here (a missing glyph draws as a box), and the message beside the chart is translated.


def png(fit: Json, sweep: int, params: Json | None = None) -> bytes:
    from matplotlib import pyplot as plt
    fig = figure(fit, sweep, params)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def memory_method(fit: Json) -> str | None:
    """The memory figure the chart shows: the GPU one the answers use, else the first fitted."""
    good = [m for m, model in (fit.get("memory") or {}).items() if not model.get("error")]
    return scaling.gpu_method(fit) or (good[0] if good else None)


def figure(fit: Json, sweep: int, params: Json | None = None) -> Figure:
    """The chart as a matplotlib figure (png() renders it; tests inspect it)."""
    import matplotlib  # imported when the first chart is drawn, not at bot start-up
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100)
    method = memory_method(fit)
    panels = [(f"peak memory — {method}", (fit.get("memory") or {}).get(method), "bytes"),
              ("time per request" if fit.get("workload") in ("llm-infer", "hf-infer")
               else "time of the run phase", fit.get("time"), "s")]
    axis = _axis(fit)
    asked, why_not = _asked(fit, params)
    for ax, (title, model, unit) in zip(axes, panels):
        _panel(ax, fit, axis, title, model, unit, asked)
    what = f"recipe {fit['recipe']}" if fit.get("recipe") else (fit.get("workload") or "?")
    fig.suptitle(f"Sweep S{sweep} — {what}: measured points and least-squares fit "
                 f"(band: {LEVEL:.0%} prediction interval)", fontsize=10)
    if why_not:
        fig.text(0.06, 0.02, f"No prediction drawn: {why_not}.", fontsize=7, gid="no-prediction")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.2, top=0.86, wspace=0.25)
    return fig


def _axis(fit: Json) -> Json:
    """What the x axis is: layers for a depth sweep, else the batch when it
    varied, else the summed length; `other` is the coordinate held per line."""
    if fit.get("kind") == "depth":
        return {"x": 0, "label": "layers", "name": "layers"}
    vars_ = fit.get("variables") or {}
    points = fit.get("points") or []
    if vars_.get("batch") and len({p["b"] for p in points}) > 1:
        name = vars_["batch"]
        return {"x": 0, "label": name if name == "batch" else f"batch ({name})", "name": name}
    length = "+".join(vars_.get("length") or []) or "length"
    return {"x": 1, "label": f"length ({length})", "name": length}


def _coords(fit: Json, point: Json) -> tuple[float, float]:
    """A measured point as the model's (b, s)."""
    return (point["layers"], 1) if fit.get("kind") == "depth" else (point["b"], point["s"])


def _asked(fit: Json, params: Json | None) -> tuple[tuple[float, float] | None, str | None]:
    """The question's (b, s), or why there is none to draw."""
    if not params or fit.get("error"):
        return None, None
    try:
        if fit.get("kind") == "depth":
            return (depth.question_layers(fit, params), 1), None
        return scaling.point(fit, params), None
    except ValueError as exc:
        return None, str(exc).rstrip(".")


def _scale(unit: str, top: float) -> tuple[float, str]:
    if unit == "bytes":
        return (2**30, "GiB") if top >= 2**30 else (2**20, "MiB")
    return (1.0, "s") if top >= 1 else (1e-3, "ms")


def _panel(ax: Axes, fit: Json, axis: Json, title: str, model: Json | None, unit: str,
           asked: tuple[float, float] | None) -> None:
    ax.set_xlabel(axis["label"])
    if not model or model.get("error"):
        ax.set_title(title, fontsize=9)
        ax.text(0.5, 0.5, f"no fit: {(model or {}).get('error') or 'not measured'}",
                ha="center", va="center", transform=ax.transAxes, fontsize=8, wrap=True)
        return
    key = "seconds" if unit == "s" else model["target"]
    points = [(_coords(fit, p), p["seconds"] if unit == "s" else p["memory"].get(key))
              for p in fit.get("points") or []]
    points = [(c, y) for c, y in points if y is not None]
    x, other = axis["x"], 1 - axis["x"]
    values = [y for _, y in points] + ([ols.predict_model(model, *asked)[0]] if asked else [])
    scale, label = _scale(unit, max(values))
    ax.set_ylabel(label)
    groups = sorted({c[other] for c, _ in points})[:MAX_LINES]
    if asked and asked[other] not in groups:
        groups.append(asked[other])
    xs_measured = [c[x] for c, _ in points]
    lo, hi = min(xs_measured), max(xs_measured + ([asked[x]] if asked else []))
    form = fit.get("kind") != "depth"  # a depth fit's text has no form error yet
    for i, g in enumerate(groups):
        _line(ax, model, (x, g, form), lo, hi, max(xs_measured), scale,
              f"C{i}", _group_label(fit, axis, g, len(groups)), first=i == 0)
    ax.scatter(xs_measured, [y / scale for _, y in points], color="black", s=18, zorder=3,
               label="measured", gid="measured")
    held = model.get("held_out")
    if held:
        hx = held["b"] if x == 0 else held["s"]
        err = held["relative_error"]
        ax.scatter([hx], [held["measured"] / scale], marker="D", s=60, facecolors="none",
                   edgecolors="red", zorder=4, gid="held-out",
                   label=f"held out {held['trial']} (× = the refit without it"
                         + (f", error {err:+.1%})" if err is not None else ")"))
        ax.scatter([hx], [held["predicted"] / scale], marker="x", color="red", zorder=4,
                   gid="held-out-predicted")
    if asked:
        _prediction(ax, model, asked, (x, form), scale, axis)
    v = model.get("verdict") or {}
    ax.set_title(title + (f" — not usable ({v['cause']})" if v and not v["usable"] else ""),
                 fontsize=9)
    ax.ticklabel_format(axis="y", useOffset=False)  # no "1e-11+1e1" over the axis
    if max(values) - min(values) <= 1e-6 * max(values):  # a flat fit: show it from zero
        ax.set_ylim(0, max(values) / scale * 1.25)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _group_label(fit: Json, axis: Json, g: float, count: int) -> str:
    if count == 1 or fit.get("kind") == "depth":
        return "fit"
    held = "length" if axis["x"] == 0 else "batch"
    return f"fit at {held} {g:g}"


def _line(ax: Axes, model: Json, where: tuple[int, float, bool], lo: float, hi: float, top: float,
          scale: float, color: str, label: str, first: bool = True) -> None:
    """The fitted line from the smallest point to the largest asked x: solid
    over what was measured, dashed past it (an extrapolation), banded by the PI.
    `where`: (the x axis, the other axis's value, whether the band holds the
    form's error)."""
    x, g, form = where
    n = 60
    grid = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if hi > lo else [lo]
    ys, bands = [], []
    for at in grid:
        b, s = (at, g) if x == 0 else (g, at)
        try:
            band = ols.band(model, b, s, LEVEL, form)
        except ValueError:  # the model holds at the measured lengths only
            return
        ys.append(band.value / scale)
        bands.append((band.low / scale, band.high / scale)
                     if band.low is not None and band.high is not None else None)
    inside = [i for i, at in enumerate(grid) if at <= top]
    past = [i for i, at in enumerate(grid) if at >= top]
    ax.plot([grid[i] for i in inside], [ys[i] for i in inside], color=color, lw=1.4,
            label=label, gid="fit-line")
    if len(past) > 1:
        ax.plot([grid[i] for i in past], [ys[i] for i in past], color=color, lw=1.4, ls="--",
                label="extrapolated (dashed)" if first else None, gid="fit-extrapolated")
    shown = [b for b in bands if b is not None]
    if len(shown) == len(bands):
        ax.fill_between(grid, [b[0] for b in shown], [b[1] for b in shown], color=color,
                        alpha=0.12, lw=0)


def _prediction(ax: Axes, model: Json, asked: tuple[float, float], where: tuple[int, bool],
                scale: float, axis: Json) -> None:
    x, form = where
    band = ols.band(model, *asked, level=LEVEL, form=form)
    value, at = band.value, asked[x]
    if band.half is not None:
        yerr = [[band.half / scale], [band.half / scale]]
        label = (f"predicted at {axis['name']}={at:g} ({LEVEL:.0%} PI, dof {band.dof}"
                 + (", with the form's leave-one-out error)" if form else ")"))
    else:
        yerr = None
        label = f"predicted at {axis['name']}={at:g} (no interval)"
    bars = ax.errorbar([at], [value / scale], yerr=yerr, fmt="*", ms=11, color="purple",
                       capsize=5, zorder=5, label=label)
    bars.lines[0].set_gid("prediction")
    if not math.isnan(value):
        ax.annotate(f"{value / scale:.3g}", (at, value / scale), xytext=(8, -3),
                    textcoords="offset points", fontsize=8, color="purple")
