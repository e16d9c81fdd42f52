"""The memory timeline of a trial as a PNG (matplotlib, Agg backend): every
sampled series, labelled with how it was measured, phases shaded. Pure: a
report in, PNG bytes out."""
from __future__ import annotations

import io

SERIES = (  # (timeline part, column, label)
    ("allocator", "allocated", "torch allocated (CUDA allocator)"),
    ("allocator", "reserved", "torch reserved (CUDA allocator)"),
    ("sampled", "device_used", "NVML device used"),
    ("sampled", "process_used", "NVML trial processes"),
    ("sampled", "host_rss", "host RSS, child tree"),
)


def has_timeline(report: dict) -> bool:
    tl = report.get("timeline") or {}
    return any(tl.get(part, {}).get("rows") for part in ("sampled", "allocator"))


def png(report: dict) -> bytes:
    import matplotlib  # imported when the first chart is drawn, not at bot start-up
    matplotlib.use("Agg")  # no display on a server
    from matplotlib import pyplot as plt

    tl = report["timeline"]
    t0 = report.get("started") or min(r[0] for part in tl.values() for r in part["rows"])
    fig, ax = plt.subplots(figsize=(9, 4), dpi=100)
    for i, phase in enumerate(report.get("phases", [])):
        ax.axvspan(phase["start"] - t0, phase["end"] - t0, alpha=0.12,
                   color=f"C{i % 10}", lw=0)
        ax.text((phase["start"] + phase["end"]) / 2 - t0, 0.98, phase["name"],
                transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8,
                rotation=90 if phase["end"] - phase["start"] < 0.5 else 0)
    for part, column, label in SERIES:
        block = tl.get(part) or {}
        if not block.get("rows") or column not in block.get("columns", ()):
            continue
        j = block["columns"].index(column)
        points = [(r[0] - t0, r[j] / 2**30) for r in block["rows"] if r[j] is not None]
        if points and any(v for _, v in points):
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=label, lw=1.2)
    title = report.get("trial") or "trial"
    what = f"recipe {report['recipe']}" if report.get("recipe") else report.get("workload")
    ax.set_title(f"{title} {what}: memory over time (sampled ~100 Hz)", fontsize=10)
    ax.set_xlabel("seconds since the trial started")
    ax.set_ylabel("GiB")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    plt.close(fig)
    return out.getvalue()
