"""The digest's PNG: GPU-hours (or CPU hours) by component per day, and
planned against actual hours per block, in each plan's unit. Pure: the
digest's figures in, PNG bytes out."""
from __future__ import annotations

import io

from bot.digest.build import COMPONENTS

# Labels stay English in every channel's language: matplotlib has no Korean font
# here (a missing glyph draws as a box), and the message beside the chart is translated.

MAX_BLOCKS = 12  # the blocks with the largest variance; more bars are unreadable


def png(m: dict, plans: list[dict], title: str) -> bytes:
    from matplotlib import pyplot as plt
    fig = figure(m, plans, title)
    out = io.BytesIO()
    fig.savefig(out, format="png", bbox_inches="tight", pad_inches=0.1)  # no blank margin
    plt.close(fig)
    return out.getvalue()


def figure(m: dict, plans: list[dict], title: str):
    """The chart as a matplotlib figure (png() renders it; tests inspect it)."""
    import matplotlib  # imported when the first chart is drawn, not at bot start-up
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    # CPU-only weeks (the console, a CPU worker) show CPU hours rather than an empty chart.
    kind = "gpu" if any(m["gpu"]["seconds"].values()) or not any(m["cpu"]["seconds"].values()) \
        else "cpu"
    unit = "GPU-hours" if kind == "gpu" else "CPU hours (no GPU trials this week)"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    days = m["days"]
    labels = [d.strftime("%a %m-%d") for d in days]
    bottom = [0.0] * len(days)
    for i, c in enumerate(COMPONENTS):
        ys = [m[kind]["per_day"][d][c] / 3600 for d in days]
        left.bar(labels, ys, bottom=bottom, label=c, color=f"C{i}")
        bottom = [b + y for b, y in zip(bottom, ys)]
    left.set_title(f"{unit} by component per day (idle by UTC day)", fontsize=9)
    left.set_ylabel("hours")
    left.set_ylim(bottom=0)
    left.tick_params(axis="x", labelsize=7, rotation=30)
    left.legend(fontsize=7)
    left.grid(alpha=0.3, axis="y")
    if not any(bottom):
        left.text(0.5, 0.5, "no hours this week", ha="center", va="center",
                  transform=left.transAxes, gid="no-hours")

    _blocks(right, plans)
    fig.suptitle(title, fontsize=10)
    # Margins and the gap between the panels fitted to the labels (the block names
    # vary in length); measured at about 0.1 s of the chart's time.
    fig.tight_layout(pad=0.6, w_pad=1.5)
    return fig


def is_cpu(plan: dict) -> bool:
    """A plan whose target is the CPU: its hours are CPU hours, as the digest's text says."""
    return str(plan.get("gpu") or "").strip().lower() == "cpu"


def unit_of(plans: list[dict]) -> str:
    kinds = {is_cpu(p) for p in plans}
    return ("CPU hours" if kinds == {True} else "GPU-hours" if kinds == {False}
            else "hours (GPU-hours; CPU hours for a gpu=cpu plan)" if kinds else "hours")


def _blocks(ax, plans: list[dict]) -> None:
    """Planned against actual per block as horizontal bars, each labelled with
    its value: a block of 0.09 h stays readable next to one of 40 h."""
    rows = sorted(((s, r) for s in plans for r in s.get("rows") or []),
                  key=lambda x: -abs(x[1]["actual"] - x[1]["estimate"]))[:MAX_BLOCKS]
    used = [s for s, _ in rows] or plans
    unit = unit_of(used)
    if rows:
        mixed = len({is_cpu(s) for s, _ in rows}) > 1
        names = [f"{s['name']}/{r['kind']}" + (" (CPU)" if mixed and is_cpu(s) else "")
                 for s, r in rows]
        ys = range(len(rows))
        for offset, key, label, color in ((-0.2, "estimate", "planned (estimate)", "C7"),
                                          (0.2, "actual", "actual so far", "C3")):
            values = [float(r[key]) for _, r in rows]
            bars = ax.barh([y + offset for y in ys], values, 0.4, label=label, color=color)
            ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=7, padding=2,
                         gid=f"value-{key}")
        ax.set_yticks(list(ys), names, fontsize=7)
        ax.invert_yaxis()  # the largest variance on top
        ax.set_xlim(right=ax.get_xlim()[1] * 1.15)  # room for the labels
        ax.legend(fontsize=7, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no block has an actual yet", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_title(f"planned vs actual per block (largest {MAX_BLOCKS} variances)", fontsize=9)
    ax.set_xlabel(unit)
    ax.grid(alpha=0.3, axis="x")
