#!/usr/bin/env python3
"""What the extra processes cost: the wall time of one trial, start to report,
with several fresh processes against one (issue 31).

For `llm-infer` at its defaults (malloc=auto: a one-process memory pass, then
the time pass in the default `processes=` against `processes=1`) and for the
example recipe `paper-infer` (examples/recipes.toml; recipes default to one
process, so `processes=3` against the default), it runs interleaved pairs, the
order alternating (A B, B A, ...) so a drift of the box falls on both, each
trial a fresh `trialbot-worker trial ... --json` as a user's is, and prints
the medians, the range and the median of the pairs' ratios.

    python scripts/bench_trial_wall.py [--pairs 5] [--only llm-infer|recipe]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from worker.catalog import PROCESSES  # noqa: E402

RECIPES = os.path.join(ROOT, "examples", "recipes.toml")
CASES = {
    "llm-infer": (["llm-infer"], [], ["processes=1"]),
    "recipe": (["recipe", "paper-infer", "device=cpu"], ["processes=3"], []),
}


def wall(words: list[str]) -> tuple[float, dict]:
    """One trial through the worker's CLI: its wall time and its report."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "worker.cli", "--recipes", RECIPES, "trial",
                           *words, "--json"], capture_output=True, text=True, cwd=ROOT,
                          timeout=1800)
    took = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"trial failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if report["status"] != "ok":
        raise SystemExit(f"trial failed: {report['error']}")
    return took, report


def case(name: str, pairs: int) -> None:
    head, many, one = CASES[name]
    runs = {"many": [], "one": []}
    for i in range(pairs):
        order = [("many", many), ("one", one)] if i % 2 == 0 else [("one", one), ("many", many)]
        for key, extra in order:
            took, report = wall(head + extra)
            runs[key].append(took)
            count = (report.get("processes") or {}).get("count", 1)
            print(f"{name} pair {i + 1}: {' '.join(head + extra) or name}: {took:.1f} s "
                  f"({count} process(es) in the time pass)", flush=True)
    ratios = [a / b for a, b in zip(runs["many"], runs["one"])]
    label = {"llm-infer": f"processes={PROCESSES} (default)", "recipe": "processes=3"}[name]
    base = {"llm-infer": "processes=1", "recipe": "processes=1 (a recipe's default)"}[name]
    print(f"RESULT {name}: {label} median {statistics.median(runs['many']):.1f} s "
          f"(range {min(runs['many']):.1f}-{max(runs['many']):.1f}), {base} median "
          f"{statistics.median(runs['one']):.1f} s (range {min(runs['one']):.1f}-"
          f"{max(runs['one']):.1f}); per pair {label} / {base}: median "
          f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}), "
          f"{pairs} interleaved pairs", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--only", choices=sorted(CASES))
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start")
    for name in [args.only] if args.only else CASES:
        case(name, args.pairs)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
