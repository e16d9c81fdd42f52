"""The digest's PNG: GPU-hours by component per day, and planned against
actual GPU-hours per block. Pure: the digest's figures in, PNG bytes out."""
from __future__ import annotations

import io

from bot.digest.build import COMPONENTS

MAX_BLOCKS = 12  # the blocks with the largest variance; more bars are unreadable


def png(m: dict, plans: list[dict], title: str) -> bytes:
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

    rows = sorted(((s["name"], r) for s in plans for r in s.get("rows") or []),
                  key=lambda x: -abs(x[1]["actual"] - x[1]["estimate"]))[:MAX_BLOCKS]
    if rows:
        names = [f"{p}/{r['kind']}" for p, r in rows]
        xs = range(len(rows))
        right.bar([x - 0.2 for x in xs], [r["estimate"] for _, r in rows], 0.4,
                  label="planned (estimate)", color="C7")
        right.bar([x + 0.2 for x in xs], [r["actual"] for _, r in rows], 0.4,
                  label="actual so far", color="C3")
        right.set_xticks(list(xs), names, fontsize=7, rotation=30, ha="right")
        right.legend(fontsize=7)
    else:
        right.text(0.5, 0.5, "no block has an actual yet", ha="center", va="center",
                   transform=right.transAxes)
        right.set_xticks([])
    right.set_title(f"planned vs actual GPU-hours per block (largest {MAX_BLOCKS} variances)",
                    fontsize=9)
    right.set_ylabel("GPU-hours")
    right.grid(alpha=0.3, axis="y")
    fig.suptitle(title, fontsize=10)
    # Fixed margins: tight_layout draws the figure twice, a third of the chart's time.
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.27, top=0.86, wspace=0.22)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
