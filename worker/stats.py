"""Summary statistics of measured samples (numpy, no clock)."""
from __future__ import annotations

import numpy as np


def summary(samples: list[float]) -> dict:
    """p50/p90/p99, mean, sample stdev and count. Percentiles use numpy's
    default linear interpolation; with few samples p99 is close to the max."""
    a = np.asarray(samples, dtype=float)
    if a.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "stdev": None, "count": 0}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean()),
            "stdev": float(a.std(ddof=1)) if a.size > 1 else None, "count": int(a.size)}


def iqr_ratio(samples: list[float]) -> float | None:
    """Interquartile range over median: the spread measure adaptive repetition
    stops on (robust to the odd outlier, unlike stdev/mean)."""
    if len(samples) < 2:
        return None
    q1, med, q3 = np.percentile(np.asarray(samples, dtype=float), [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else None
