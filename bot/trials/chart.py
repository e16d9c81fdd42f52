"""The memory timeline of a trial as a PNG (matplotlib, Agg backend): every
sampled series, labelled with how it was measured, phases shaded, the gaps
between them hatched, the peak marked. Pure: a report in, PNG bytes out.

The chart says which run of the trial it shows (a CPU trial under malloc=auto
runs a memory pass and a time pass, and its timeline is the time pass's), and
the peak it writes is the report's own figure: where the report's comes from
another pass, or fell between samples, both are shown and told apart."""
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
# Each series' peak as the report states it (worker/summary.py shows these)
REPORTED = {"allocated": "peak_allocated", "reserved": "peak_reserved",
            "device_used": "device_used_peak", "process_used": "process_used_peak",
            "host_rss": "host_rss_peak"}
SUMMED = {"process_used", "host_rss"}  # the columns that add up every rank's processes
RANK0 = {"allocated", "reserved"}  # sampled inside the trial's process, which is rank 0
LEVELS = 5  # rows of phase labels; a label that fits none goes to the key below the axes
GAP = 1e-3  # seconds: a smaller space between two phases is no gap
# Each rank's peak line its own dashes and marker, the markers at staggered
# places: two ranks with the same peak draw one line, and both still show.
RANK_DASHES = ("--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)))
RANK_MARKERS = ("o", "s", "^", "D", "v", "P")


def has_timeline(report: Mapping[str, Any]) -> bool:
    tl = report.get("timeline") or {}
    return any(tl.get(part, {}).get("rows") for part in ("sampled", "allocator"))


def png(report: Json) -> bytes:
    from matplotlib import pyplot as plt
    fig = figure(report)
    out = io.BytesIO()
    fig.savefig(out, format="png", bbox_inches="tight", pad_inches=0.1)  # no blank margin
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
                 "processes; the report's table gives each rank's own peak (the lines with "
                 "markers).", fontsize=7, gid="ranks-note")
    top = _mark_peak(ax, peak, report) if peak else 0.0
    title = report.get("trial") or "trial"
    what = f"recipe {report['recipe']}" if report.get("recipe") else report.get("workload")
    ax.set_title(f"{title} {what}: memory over time (sampled ~100 Hz)\n{which_run(report)}",
                 fontsize=10)
    ax.set_xlabel("seconds since the trial started")
    ax.set_ylabel("GiB")
    # Headroom: the rows of phase labels sit above the peak.
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], top * 1.6))
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.88, bottom=0.2)
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


def _series(ax: Axes, tl: Json, t0: float, world: int
            ) -> tuple[float, float, str, str] | None:
    """A line per memory series the timeline has; the highest point:
    (GiB, seconds, label, column)."""
    peak: tuple[float, float, str, str] | None = None
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
                peak = (top[1], top[0], label, column)
    return peak


def which_run(report: Json) -> str:
    """Which run of the trial the timeline is: a malloc=auto trial on a CPU runs
    a memory pass and then a time pass (worker/launcher/passes.py)."""
    passes = report.get("passes") or []
    ran = {p.get("pass"): p for p in passes if p.get("status") != "not run"}
    if "time" in ran:
        memory = ran.get("memory") or {}
        return (f"the time pass (malloc={ran['time'].get('malloc')}); the report's host RSS "
                f"peak is the memory pass's (malloc={memory.get('malloc', 'live')})")
    if "memory" in ran:
        return (f"the memory pass (malloc={ran['memory'].get('malloc')}); the time pass "
                "did not run")
    malloc = (passes[0].get("malloc") if passes
              else (report.get("params") or {}).get("malloc"))
    return ("one pass" + (f" (malloc={malloc})" if malloc else "")
            + ": the report's figures are this run's")


def _reported(report: Json, column: str) -> tuple[float | None, str]:
    """The report's own peak for a series' column, and which pass supplied it."""
    key = REPORTED[column]
    value = (report.get("memory") or {}).get(key)
    source = next((p for p in report.get("passes") or []
                   if p.get("pass") == "memory" and key in (p.get("supplied") or [])), None)
    where = f", memory pass, malloc={source.get('malloc')}" if source else ""
    if not isinstance(value, (int, float)) or not _finite(value) or value < 0:
        return None, where  # a figure stored before the bot refused such ones
    return float(value), where


def _mark_peak(ax: Axes, peak: tuple[float, float, str, str], report: Json) -> float:
    """The highest sample marked, and the peak written as the report states it.
    Returns the highest figure drawn, in GiB."""
    value, at, label, column = peak
    reported, where = _reported(report, column)
    ax.plot([at], [value], marker="v", color="black", ms=7, ls="none", gid="highest-sample")
    right = at > (ax.get_xlim()[0] + ax.get_xlim()[1]) / 2  # write it towards the middle
    if reported is None:
        text = (f"peak {size(value * 2**30)}, {label}, at {at:.2f} s\n"
                "(the highest sample: the report states no peak for it)")
    elif size(reported) == size(value * 2**30):
        text = f"peak {size(reported)}, {label}, at {at:.2f} s"
    else:  # another pass's figure, or a peak that fell between samples
        ax.axhline(reported / 2**30, color="black", ls=(0, (1, 3)), lw=1, gid="reported-peak",
                   label=f"{label}: peak {size(reported)} as reported{where}")
        text = (f"peak {size(reported)} as reported ({label}{where})\n"
                f"this run's highest sample: {size(value * 2**30)} at {at:.2f} s")
    ax.annotate(text, (at, value), xytext=(-6 if right else 6, 5), textcoords="offset points",
                fontsize=8, ha="right" if right else "left", gid="peak")
    top: float = max(value, (reported or 0) / 2**30)
    return top


def _rank_peaks(ax: Axes, report: Json) -> None:
    """A multi-rank trial's table gives each rank's peak: a line at each figure,
    so the summed series and the table can be read together."""
    for i, r in enumerate((report.get("training") or {}).get("ranks") or []):
        value = r.get("peak_allocated") or r.get("host_rss_peak")
        if _finite(value) and value > 0:
            # x in axes fractions: the line spans the axes, its marker at its own
            # place on the left (the legend sits at the lower right)
            ax.plot([0, 0.02 + 0.04 * (i % 10), 1], [value / 2**30] * 3,
                    transform=ax.get_yaxis_transform(), ls=RANK_DASHES[i % len(RANK_DASHES)],
                    marker=RANK_MARKERS[i % len(RANK_MARKERS)], markevery=[1], ms=5, lw=1,
                    color=f"C{(i + 5) % 10}", gid="rank-peak",
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
