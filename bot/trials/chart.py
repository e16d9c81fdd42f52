"""The memory timeline of a trial as a PNG (matplotlib, Agg backend): every
sampled series, labelled with how it was measured, phases shaded, the gaps
between them hatched, the peak marked. Pure: a report in, PNG bytes out."""
from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bot.states import Json
from worker.api import duration, size

if TYPE_CHECKING:  # matplotlib is imported when the first chart is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox

# The chart's labels stay English in every language: no Korean font is installed for
# matplotlib, which would draw Hangul as empty boxes. The message that carries the
# chart (bot/trials/views.py chart) is translated.

SERIES = (  # (timeline part, column, label)
    ("allocator", "allocated", "torch allocated (CUDA allocator)"),
    ("allocator", "reserved", "torch reserved (CUDA allocator)"),
    ("sampled", "device_used", "NVML device used"),
    ("sampled", "process_used", "NVML trial processes"),
    ("sampled", "host_rss", "host RSS, child tree"),
)
SUMMED = {"process_used", "host_rss"}  # the columns that add up every rank's processes
RANK0 = {"allocated", "reserved"}  # sampled inside the trial's process, which is rank 0
LEVELS = 5  # rows of phase labels; a label that fits none goes to the key below the axes
GAP = 1e-3  # seconds: a smaller space between two phases is no gap


def has_timeline(report: Mapping[str, Any]) -> bool:
    tl = report.get("timeline") or {}
    return any(tl.get(part, {}).get("rows") for part in ("sampled", "allocator"))


def png(report: Json) -> bytes:
    from matplotlib import pyplot as plt
    fig = figure(report)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def ranks(report: Json) -> int:
    return int((report.get("training") or {}).get("world") or 1)


def figure(report: Json) -> Figure:
    """The chart as a matplotlib figure (png() renders it; tests inspect it)."""
    import matplotlib  # imported when the first chart is drawn, not at bot start-up
    matplotlib.use("Agg")  # no display on a server
    from matplotlib import pyplot as plt

    tl = report["timeline"]
    t0 = report.get("started") or min(r[0] for part in tl.values() for r in part["rows"]
                                       if _finite(r[0]))
    world = ranks(report)
    fig, ax = plt.subplots(figsize=(9, 4.6), dpi=100)
    phases = _phase_bands(ax, report, t0)
    peak = _series(ax, tl, t0, world)
    if world > 1:
        _rank_peaks(ax, report)
        fig.text(0.08, 0.065, f"NVML trial processes and host RSS add up all {world} ranks' "
                 "processes; the report's table gives each rank's own peak (the dashed lines).",
                 fontsize=7, gid="ranks-note")
    if peak:
        _mark_peak(ax, peak)
    title = report.get("trial") or "trial"
    what = f"recipe {report['recipe']}" if report.get("recipe") else report.get("workload")
    ax.set_title(f"{title} {what}: memory over time (sampled ~100 Hz)", fontsize=10)
    ax.set_xlabel("seconds since the trial started")
    ax.set_ylabel("GiB")
    # Headroom: the rows of phase labels sit above the peak.
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], (peak[0] if peak else 0) * 1.6))
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.2)
    _phase_labels(fig, ax, phases, t0)
    return fig


def _phase_bands(ax: Axes, report: Json, t0: float) -> list[Json]:
    """A shaded band per phase and a hatched one per gap between phases; the phases drawn."""
    # A row or phase without finite times (stored before the bot refused them) is not drawn
    phases = sorted((p for p in report.get("phases", []) if _finite(p.get("start"))
                     and _finite(p.get("end")) and p["end"] >= p["start"]),
                    key=lambda p: p["start"])
    for i, phase in enumerate(phases):
        ax.axvspan(phase["start"] - t0, phase["end"] - t0, alpha=0.12,
                   color=f"C{i % 10}", lw=0)
    gaps = [(a["end"], b["start"]) for a, b in zip(phases, phases[1:])
            if b["start"] - a["end"] > GAP]
    for j, (start, end) in enumerate(gaps):
        ax.axvspan(start - t0, end - t0, facecolor="none", edgecolor="0.6", hatch="///",
                   lw=0, label="between phases" if j == 0 else None)
    return phases


def _series(ax: Axes, tl: Json, t0: float, world: int) -> tuple[float, float, str] | None:
    """A line per memory series the timeline has; the highest point: (GiB, seconds, label)."""
    peak: tuple[float, float, str] | None = None
    for part, column, label in SERIES:
        block = tl.get(part) or {}
        if not block.get("rows") or column not in block.get("columns", ()):
            continue
        j = block["columns"].index(column)
        points = [(r[0] - t0, r[j] / 2**30) for r in block["rows"]
                  if _finite(r[0]) and _finite(r[j]) and r[j] >= 0]
        if points and any(v for _, v in points):
            if world > 1 and column in SUMMED:
                label = f"{label} (sum of {world} ranks)"
            elif world > 1 and column in RANK0:
                label = f"{label} (rank 0 only)"
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=label, lw=1.2)
            top = max(points, key=lambda p: p[1])
            if peak is None or top[1] > peak[0]:
                peak = (top[1], top[0], label)
    return peak


def _mark_peak(ax: Axes, peak: tuple[float, float, str]) -> None:
    value, at, label = peak
    ax.plot([at], [value], marker="v", color="black", ms=7, ls="none")
    right = at > (ax.get_xlim()[0] + ax.get_xlim()[1]) / 2  # write it towards the middle
    ax.annotate(f"peak {size(value * 2**30)}, {label}, at {at:.2f} s", (at, value),
                xytext=(-6 if right else 6, 5), textcoords="offset points", fontsize=8,
                ha="right" if right else "left", gid="peak")


def _rank_peaks(ax: Axes, report: Json) -> None:
    """A multi-rank trial's table gives each rank's peak: dashed lines at the
    same figures, so the summed series and the table can be read together."""
    for i, r in enumerate((report.get("training") or {}).get("ranks") or []):
        value = r.get("peak_allocated") or r.get("host_rss_peak")
        if _finite(value) and value > 0:
            ax.axhline(value / 2**30, ls="--", lw=0.8, color=f"C{(i + 5) % 10}",
                       label=f"rank {r['rank']} peak {size(value)} (per rank, as in the table)")


def _phase_labels(fig: Figure, ax: Axes, phases: list[Json], t0: float) -> None:
    """Each phase's name at its middle, on the highest row where it overlaps no
    other label; names that fit no row are listed in a key under the axes."""
    placed: list[list[Bbox]] = [[] for _ in range(LEVELS)]  # per row: display-space boxes
    keyed = []
    for phase in phases:
        mid = (phase["start"] + phase["end"]) / 2 - t0
        text = None
        for level in range(LEVELS):
            y = 0.98 - 0.07 * level
            text = ax.text(mid, y, phase["name"], transform=ax.get_xaxis_transform(),
                           ha="center", va="top", fontsize=8, gid="phase-label")
            box = text.get_window_extent().expanded(1.05, 1.0)
            if not any(box.overlaps(b) for b in placed[level]):
                placed[level].append(box)
                break
            text.remove()
            text = None
        if text is None:
            keyed.append(f"{phase['name']} {duration(phase['end'] - phase['start'])} from "
                         f"{phase['start'] - t0:.3f} s")
    if keyed:
        fig.text(0.08, 0.02, "Phases too short to label: " + "; ".join(keyed), fontsize=7,
                 gid="phase-key", wrap=True)
