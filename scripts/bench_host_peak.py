#!/usr/bin/env python3
"""How much the host peak of one config scatters from process to process: the
100 Hz sampler's against the kernel's high-water mark (issue #31, the batch
sweep's interval; docs/design.md §2 "Memory, by method").

Each round runs llm-infer at every batch as a `malloc=auto` memory pass runs
it (malloc=live, no warmup, 2 measured requests) in a fresh child through the
worker's launcher, and reads both figures of that one child: the sampler's
(the largest sample of its timeline, which keeps each bucket's maximum) and
the kernel's (`wait4` ru_maxrss). It prints each batch's range over the rounds
and what a line through batches 1, 2, 4 predicts at 16 from each.

    python scripts/bench_host_peak.py [--rounds 8]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from worker import launcher  # noqa: E402
from worker.spec import parse  # noqa: E402
from worker.timeline import sampled_host_peak  # noqa: E402

MODEL = ["prompt=256", "gen=8", "layers=4", "hidden=512", "heads=8", "kv_heads=4"]
MEMORY_PASS = ["malloc=live", "warmup=0", "repeats=2", "stability=0", "processes=1"]
BATCHES = (1, 2, 4, 8, 16)
MiB = 2**20


def peaks(batch: int) -> tuple[float, float]:
    """(sampled, kernel) host peak in MiB of one child at this batch."""
    r = launcher.run_trial(parse(["llm-infer", f"batch={batch}", *MODEL, *MEMORY_PASS]))
    if r["status"] != "ok":
        sys.exit(f"batch {batch} failed: {r['error']}")
    kernel = r["memory"]["host_rss_peak_kernel"]
    if kernel is None:
        sys.exit(r["memory"]["method"]["host_rss_peak_kernel"])
    return (sampled_host_peak(r) or 0) / MiB, kernel / MiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    rounds = []
    for i in range(a.rounds):
        rounds.append({b: peaks(b) for b in BATCHES})
        print(f"round {i + 1}: " + ", ".join(f"batch {b} {s:.1f} / {k:.1f} MiB"
                                             for b, (s, k) in rounds[-1].items()), flush=True)
    for which, name in ((0, "sampled (100 Hz)"), (1, "kernel (ru_maxrss)")):
        print(f"{name}:")
        for b in BATCHES:
            values = [r[b][which] for r in rounds]
            print(f"  batch {b:2}: {min(values):.1f}–{max(values):.1f} MiB "
                  f"(range {max(values) - min(values):.1f} MiB)")
        errors = []
        for r in rounds:
            slope, intercept = np.polyfit([1, 2, 4], [r[b][which] for b in (1, 2, 4)], 1)
            errors.append((intercept + 16 * slope) / r[16][which] - 1)
        print(f"  a line through 1, 2, 4 at 16: {min(errors):+.1%} … {max(errors):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
