"""Summary statistics of measured samples (numpy, no clock)."""
from __future__ import annotations

import math

import numpy as np

# np.percentile imports numpy.ma on its first call: 0.01-0.1 s that landed inside a
# run phase (after its last request), +6% per run on 3 requests (issue 31).
import numpy.ma  # noqa: F401


def finite(x: float) -> float | None:
    """A model's output as the report holds it: a NaN or infinity (an fp16
    overflow, a diverged loss) is null, since JSON has neither."""
    return x if math.isfinite(x) else None


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


# A fixed count (stability=0, or llm-train's steps) still gets a verdict: the
# spread is judged against llm-infer's default stop rule (stability=5 in
# worker/spec.py), so a 1460% spread is never shown as if it were fine.
FIXED_BOUND = 0.05


def judged(st: dict, bound: float = FIXED_BOUND) -> dict:
    """A stability block whose count was fixed, with `stable` judged against
    `bound` (None when too few samples to judge). An adaptive block (one with a
    threshold) is returned as it is: its own stop rule judged it."""
    if st.get("threshold"):
        return st
    ratio = st.get("iqr_over_median")
    return {**st, "bound": bound, "stable": None if ratio is None else ratio < bound}


def fixed_stability(samples: list[float], seconds: float) -> dict:
    """The stability block of a fixed number of measured samples (llm-train's
    steps), in adaptive repetition's shape (worker/repeat.py)."""
    return judged({"count": len(samples), "iqr_over_median": iqr_ratio(samples),
                   "threshold": None, "stopped_by": "count", "seconds": seconds,
                   "stable": None})
