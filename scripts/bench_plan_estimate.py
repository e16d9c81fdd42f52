#!/usr/bin/env python3
"""Does a single short trial predict a longer experiment? (issue 4's target)

For each round: run a short trial (few repeats), estimate a block of N runs from
it with the planner, then run the reference experiment: the same config for N
runs in one process, and compare its measured wall time with the estimate and
its 90% prediction interval. Target: within ±10%, interval contains it.

    python scripts/bench_plan_estimate.py [--runs 40] [--rounds 3] [--short 5]

Runs real child processes through the worker CLI, as a worker would.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bot.plans import estimate  # noqa: E402

CONFIG = ["llm-infer", "layers=4", "hidden=512", "heads=8", "kv_heads=4", "batch=2",
          "prompt=128", "gen=32", "warmup=1", "stability=0"]


def trial(words: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "worker.cli", "trial", *words, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"trial failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if report["status"] != "ok":
        raise SystemExit(f"trial failed: {report['error']}")
    return report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40, help="runs (requests) in the reference")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--short", type=int, default=5, help="repeats of the short trial")
    args = ap.parse_args()
    print(f"config: {' '.join(CONFIG)}; short trial repeats={args.short}; "
          f"reference runs={args.runs}")
    errors, inside = [], 0
    for i in range(args.rounds):
        short = trial(CONFIG + [f"repeats={args.short}"])
        job = {"id": 1, "trial": "short", "status": "done", "report": short}
        block = {"kind": "baseline", "runs": args.runs, "configs": 1, "gpus": 1,
                 "handoff": None, "note": None, "sweep": None}
        est = estimate.estimate_block(block, [job], {1: short["attempts"]}, {}, pays_prep=True)
        total = sum(c["seconds"] for c in est["components"])
        lo, hi = total - est["half"], total + est["half"]
        ref = trial(CONFIG + [f"repeats={args.runs}", "run_cap=3600"])
        measured = ref["seconds"]
        err = (total - measured) / measured
        errors.append(err)
        inside += lo <= measured <= hi
        parts = ", ".join(f"{c['name']} {c['seconds']:.2f} s" for c in est["components"])
        print(f"round {i + 1}: estimate {total:.2f} s [90% {lo:.2f}..{hi:.2f}] ({parts}); "
              f"reference measured {measured:.2f} s ({ref['latency']['count']} runs, mean "
              f"{ref['latency']['mean']:.4f} s vs short {short['latency']['mean']:.4f} s); "
              f"error {err:+.1%}; {'inside' if lo <= measured <= hi else 'OUTSIDE'} the interval")
    worst = max(errors, key=abs)
    # A 90% interval should miss about one round in ten; more misses mean it is too narrow.
    ok = all(abs(e) <= 0.10 for e in errors) and inside >= 0.9 * args.rounds
    print(f"RESULT: worst error {worst:+.1%} (target ±10%), interval contained the measured "
          f"total in {inside}/{args.rounds} rounds (a 90% interval: expect about 9 in 10) -> "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
