"""The run phase in windows: its measured runs cut into a few stretches of
consecutive runs, in time order. The spread of the windows' means is drift
inside the trial (a neighbour arriving, clocks settling) that the spread of
single runs around one mean hides; the bot's interval includes it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

COUNT = 5  # windows per run phase (fewer when there are fewer runs)


def split(samples: list[dict], unit: str, count: int = COUNT) -> dict | None:
    """Samples with "t0", "t1" (Unix time) and "latency" → the report's
    `windows`, or None with fewer than two timed samples."""
    timed = [s for s in samples if s.get("t0") is not None and s.get("t1") is not None]
    if len(timed) < 2:
        return None
    rows = []
    for part in np.array_split(np.arange(len(timed)), min(count, len(timed))):
        group = [timed[i] for i in part]
        lat = np.array([s["latency"] for s in group], dtype=float)
        rows.append({"start": group[0]["t0"], "end": group[-1]["t1"], "count": len(group),
                     "mean": float(lat.mean()),
                     "sd": float(lat.std(ddof=1)) if len(group) > 1 else None,
                     "others_cpu": None, "contended": False})
    return {"unit": unit, "rows": rows,
            "what": f"the run phase's {len(timed)} {unit}s in {len(rows)} windows of "
                    f"consecutive {unit}s, in time order; others_cpu: share of all CPUs (of its "
                    "own cores, for a pinned trial) other processes used during the window "
                    "(the worker's contention probe)"}


def annotate(windows: Mapping[str, Any] | None, share, others_limit: float,
             steal_limit: float) -> None:
    """Fill each window's contention from `share(start, end)` (the probe's)."""
    for row in (windows or {}).get("rows", []):
        got = share(row["start"], row["end"])
        if got:
            row["others_cpu"] = got["others_cpu"]
            row["contended"] = got["others_cpu"] > others_limit or got["steal"] > steal_limit
