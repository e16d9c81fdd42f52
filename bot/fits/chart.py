"""A sweep's fit as a PNG (matplotlib, Agg backend): per panel (peak memory,
time) the measured points, the fitted line with its prediction band, the
held-out point, and the asked prediction with its interval. Batch and length
sweeps plot against the varied axis, depth sweeps against layers. Pure: the
fit in, PNG bytes out.

The chart draws what the fit's text says: a prediction the text calls
unusable gets no star (a dotted line marks where it was asked, and why), and
nothing is drawn below zero, where no time or size lies (a band cut there says
so)."""
from __future__ import annotations

import io
import math
import textwrap
from typing import TYPE_CHECKING, TypedDict

from bot.fits import depth, ols, scaling, usable
from bot.states import Json
from worker.api import duration, size
from worker.i18n import using

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
    fig.savefig(out, format="png", bbox_inches="tight", pad_inches=0.1)  # no blank margin
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

    with using("en"):  # the fits' own words (a verdict, a refusal) in the chart's language
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100)
        method = memory_method(fit)
        time = ("time per request" if fit.get("workload") in ("llm-infer", "hf-infer")
                else "time of the run phase")
        panels = [(f"peak memory — {method}" + _pass(fit, method),
                   (fit.get("memory") or {}).get(method), "bytes"),
                  (time + _pass(fit, "time"), fit.get("time"), "s")]
        axis = _axis(fit)
        asked, why_not = _asked(fit, params)
        for ax, (title, model, unit) in zip(axes, panels):
            _panel(ax, fit, axis, title, model, unit, asked)
        what = f"recipe {fit['recipe']}" if fit.get("recipe") else (fit.get("workload") or "?")
        fig.suptitle(f"Sweep S{sweep} — {what}: measured points and least-squares fit "
                     f"(band: {LEVEL:.0%} prediction interval)", fontsize=10)
        if why_not:
            fig.text(0.06, 0.02, f"No prediction drawn: {why_not}.", fontsize=7,
                     gid="no-prediction")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.2, top=0.86, wspace=0.25)
    return fig


def _pass(fit: Json, figure: str | None) -> str:
    """" (malloc=live, memory pass)": which run of the trials a host figure or
    the time came from (a CPU trial under malloc=auto measures them in two)."""
    used = (fit.get("allocators") or {}).get(figure or "")
    return f" ({' and '.join(used)})" if used else ""


def _axis(fit: Json) -> Json:
    """What the x axis is: layers for a depth sweep, else the batch when it
    varied, else the summed length; `other` is the coordinate held per line;
    `param` the name a verdict's advice uses (as the fit's text does)."""
    if fit.get("kind") == "depth":
        return {"x": 0, "label": "layers", "name": "layers", "param": "layers"}
    vars_ = fit.get("variables") or {}
    points = fit.get("points") or []
    if vars_.get("batch") and len({p["b"] for p in points}) > 1:
        name = vars_["batch"]
        return {"x": 0, "label": name if name == "batch" else f"batch ({name})", "name": name,
                "param": name}
    length = "+".join(vars_.get("length") or []) or "length"
    return {"x": 1, "label": f"length ({length})", "name": length, "param": vars_.get("batch")}


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


def _judged(fit: Json, model: Json, axis: Json, asked: tuple[float, float]
            ) -> tuple[float | None, Json]:
    """The prediction at the asked config and its verdict, as the fit's text judges it
    (a model that cannot say: None, and why)."""
    try:
        value = ols.predict_model(model, *asked)[0]
    except ValueError as exc:  # a model without a batch (length) term, asked at another
        return None, {"usable": False, "problem": str(exc).rstrip("."), "cause": None}
    return value, usable.verdict(model, fit.get("points") or [], (*asked, value), axis["param"])


def _panel(ax: Axes, fit: Json, axis: Json, title: str, model: Json | None, unit: str,
           asked: tuple[float, float] | None) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(axis["label"])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # batch, length, layers: whole
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
    value, verdict = _judged(fit, model, axis, asked) if asked else (None, None)
    drawn = asked if verdict and verdict["usable"] else None  # the text's usable prediction
    values = [y for _, y in points] + ([value] if drawn else [])
    scale, label = _scale(unit, max(values))
    ax.set_ylabel(label)
    groups = sorted({c[other] for c, _ in points})[:MAX_LINES]
    if drawn and drawn[other] not in groups:
        groups.append(drawn[other])
    xs_measured = [c[x] for c, _ in points]
    lo, hi = min(xs_measured), max(xs_measured + ([drawn[x]] if drawn else []))
    form = fit.get("kind") != "depth"  # a depth fit's text has no form error yet
    cut = False
    for i, g in enumerate(groups):
        cut |= _line(ax, model, (x, g, form), (lo, hi, max(xs_measured)), scale,
                     (i, len(groups)), _group_label(fit, axis, g, len(groups)))
    ax.scatter(xs_measured, [y / scale for _, y in points], color="black", s=18, zorder=3,
               label="measured", gid="measured")
    _held_out(ax, model, x, scale)
    if drawn:
        _prediction(ax, model, drawn, (x, form), scale, axis)
    elif asked and verdict:
        _not_predicted(ax, asked[x], axis, verdict, value, unit)
    if cut:  # a band or line that fell below zero is cut there, and says so
        ax.plot([], [], color="none", label="cut at 0: no time or size is below it",
                gid="cut-at-zero")
    v = model.get("verdict") or {}
    ax.set_title(title + (f" — not usable ({v['cause']})" if v and not v["usable"] else ""),
                 fontsize=9)
    ax.ticklabel_format(axis="y", useOffset=False)  # no "1e-11+1e1" over the axis
    if max(values) - min(values) <= 1e-6 * max(values):  # a flat fit: show it from zero
        ax.set_ylim(0, max(values) / scale * 1.25)
    ax.set_ylim(bottom=max(0.0, ax.get_ylim()[0]))  # the autoscale's margin not below 0 either
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _held_out(ax: Axes, model: Json, x: int, scale: float) -> None:
    held = model.get("held_out")
    if not held:
        return
    hx = held["b"] if x == 0 else held["s"]
    err = held["relative_error"]
    below = held["predicted"] < 0  # not drawn, as nothing below zero is
    ax.scatter([hx], [held["measured"] / scale], marker="D", s=60, facecolors="none",
               edgecolors="red", zorder=4, gid="held-out",
               label=f"held out {held['trial']} ("
                     + ("the refit without it predicts below 0" if below
                        else "× = the refit without it")
                     + (f", error {err:+.1%})" if err is not None else ")"))
    if not below:
        ax.scatter([hx], [held["predicted"] / scale], marker="x", color="red", zorder=4,
                   gid="held-out-predicted")


def _group_label(fit: Json, axis: Json, g: float, count: int) -> str:
    if count == 1 or fit.get("kind") == "depth":
        return "fit"
    held = "length" if axis["x"] == 0 else "batch"
    return f"fit at {held} {g:g}"


class _Style(TypedDict):  # a fitted line's, passed to matplotlib as keywords
    color: str
    lw: float
    zorder: float


def _line(ax: Axes, model: Json, where: tuple[int, float, bool],
          span: tuple[float, float, float], scale: float, nth: tuple[int, int],
          label: str) -> bool:
    """The fitted line from the smallest point to the largest asked x: solid
    over what was measured, dashed past it (an extrapolation), banded by the PI.
    `where`: (the x axis, the other axis's value, whether the band holds the
    form's error); `span`: (first x, last x, the largest measured x); `nth`:
    (this line, of how many). Nothing below zero is drawn: True when the line
    or its band was cut there."""
    x, g, form = where
    lo, hi, top = span
    n = 60
    grid = [lo + (hi - lo) * i / (n - 1) for i in range(n)] if hi > lo else [lo]
    ys, bands, cut = [], [], False
    for at in grid:
        b, s = (at, g) if x == 0 else (g, at)
        try:
            band = ols.band(model, b, s, LEVEL, form)
        except ValueError:  # the model holds at the measured lengths only
            return False
        cut |= band.value < 0 or (band.low is not None and band.low < 0)
        ys.append(band.value / scale if band.value >= 0 else math.nan)
        bands.append((max(band.low, 0) / scale, max(band.high, 0) / scale)
                     if band.low is not None and band.high is not None else None)
    # Lines that coincide (a time that does not change with length) stay apart:
    # each earlier line wider and under the next, so every colour shows.
    nth_line, count = nth
    style: _Style = {"color": f"C{nth_line}", "lw": 1.4 + 1.0 * (count - 1 - nth_line),
                     "zorder": 2 + nth_line / 10}
    inside = [i for i, at in enumerate(grid) if at <= top]
    past = [i for i, at in enumerate(grid) if at >= top]
    ax.plot([grid[i] for i in inside], [ys[i] for i in inside], label=label, gid="fit-line",
            **style)
    if len(past) > 1:
        ax.plot([grid[i] for i in past], [ys[i] for i in past], ls="--",
                label="extrapolated (dashed)" if nth_line == 0 else None,
                gid="fit-extrapolated", **style)
    shown = [b for b in bands if b is not None]
    if len(shown) == len(bands):
        ax.fill_between(grid, [b[0] for b in shown], [b[1] for b in shown], color=style["color"],
                        alpha=0.12, lw=0, gid="band")
    return cut


def _prediction(ax: Axes, model: Json, asked: tuple[float, float], where: tuple[int, bool],
                scale: float, axis: Json) -> None:
    """The asked config's prediction (one the text calls usable, so above zero):
    a star, its interval as an error bar (cut at 0); the figures in the legend,
    where no label runs off the panel or under the legend."""
    x, form = where
    band = ols.band(model, *asked, level=LEVEL, form=form)
    value, at = band.value, asked[x]
    fmt = duration if model["unit"] == "s" else size
    if band.half is not None:
        yerr = [[min(band.half, value) / scale], [band.half / scale]]  # the bar stops at 0
        label = (f"predicted at {axis['name']}={at:g}: {fmt(value)} ± {fmt(band.half)} "
                 f"({LEVEL:.0%} PI, dof {band.dof}"
                 + (", with the form's leave-one-out error)" if form else ")"))
    else:
        yerr = None
        label = f"predicted at {axis['name']}={at:g}: {fmt(value)} (no interval)"
    bars = ax.errorbar([at], [value / scale], yerr=yerr, fmt="*", ms=11, color="purple",
                       capsize=5, zorder=5, label=textwrap.fill(label, 64))
    bars.lines[0].set_gid("prediction")


def _not_predicted(ax: Axes, at: float, axis: Json, verdict: Json, value: float | None,
                   unit: str) -> None:
    """Where the question was asked, and why the fit gives no prediction there."""
    said = "" if value is None else duration(value) if unit == "s" else size(value)
    why = verdict.get("problem") or f"cause: {verdict['cause']}"
    if verdict.get("cause"):  # a verdict's, not a model that cannot say
        why = f"the fit there is unusable: {why}" + ("" if said in why else f" (it says {said})")
    label = textwrap.fill(f"asked {axis['name']}={at:g}: no prediction drawn, as {why}", 64)
    ax.axvline(at, color="purple", ls=":", lw=1.2, label=label, gid="not-predicted")
