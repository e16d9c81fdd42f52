"""Adaptive repetition of the measured `run` phase, in the spirit of
torch.utils.benchmark's adaptive_autorange: measure at least `minimum` times,
then keep going until IQR/median falls under `threshold` or `cap` seconds pass.
The caller's clock is passed in, so this stays testable without waiting."""
from __future__ import annotations

import time

from worker import stats

MAX_COUNT = 100_000


def adaptive(measure, minimum: int, threshold: float, cap: float,
             clock=time.perf_counter) -> tuple[list, dict]:
    """Call `measure()` (returns a sample dict with a "latency" key) until stable.
    threshold 0 means exactly `minimum` samples. Returns (samples, stability)."""
    samples, t0 = [], clock()
    stopped_by = "count"
    while True:
        start = time.time()  # wall stamps: the windows and the contention probe share them
        sample = measure()
        samples.append({**sample, "t0": start, "t1": time.time()})
        n = len(samples)
        if n < minimum:
            continue
        if threshold <= 0:
            break
        ratio = stats.iqr_ratio([s["latency"] for s in samples])
        if n >= 4 and ratio is not None and ratio < threshold:  # IQR needs a few points
            stopped_by = "stable"
            break
        if clock() - t0 >= cap:
            stopped_by = "time cap"
            break
        if n >= MAX_COUNT:
            stopped_by = "max count"
            break
    ratio = stats.iqr_ratio([s["latency"] for s in samples])
    return samples, {
        "count": len(samples), "iqr_over_median": ratio, "threshold": threshold or None,
        "stopped_by": stopped_by, "seconds": clock() - t0,
        # Unstable: we asked for stability and did not reach it.
        "stable": None if threshold <= 0 else bool(ratio is not None and ratio < threshold),
    }
