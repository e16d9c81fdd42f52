#!/usr/bin/env python3
"""The optimization ladder on a model whose activations dominate (issue 5's
targets): the four steps as trials in child processes, then the table and the
recommendation the bot would post, and the two checks:

- ZeRO-1 over 2 ranks: optimizer-state bytes per rank within 1% of theory;
- checkpointing lowers the peak, with the measured saving and its time change
  by the bot's test (bot/fits/compare.py), and the recommended configuration.

    python scripts/bench_ladder.py [--budget 1GB] [words for llm-train ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bot.fits import compare  # noqa: E402
from bot.trials import ladder, ladderfit  # noqa: E402

DEFAULT = ["llm-train", "layers=8", "hidden=128", "heads=2", "kv_heads=1", "vocab=512",
           "seq=1024", "batch=8", "steps=2", "warmup=1"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="1GB")
    ap.add_argument("words", nargs="*", help="llm-train and its parameters")
    args = ap.parse_args()
    words = (args.words or DEFAULT) + [f"budget={args.budget}"]
    steps, budget = ladder.parse(words)
    reports, jobs = [], []
    t0 = time.monotonic()
    for i, (name, _, line) in enumerate(steps, start=1):
        report = trial(line)
        if report:
            report["trial"] = f"T{i}"
        reports.append(report)
        jobs.append({"id": i, "trial": f"T{i}", "channel": "bench"})
        print(f"{name}: {line} -> {report['status'] if report else 'no report'}", flush=True)
    print(f"whole ladder: {time.monotonic() - t0:.0f} s\n")
    print(ladder.message(jobs, reports, budget)["text"])
    rows = ladder.rows(list(ladder.STEPS), reports)
    table = {r["step"]: r for r in rows if r["ok"]}
    ok = True
    if "zero-1" in table:
        z = table["zero-1"]
        worst = max(abs(b - z["zero_theory"]) / z["zero_theory"] for _, b in z["zero"])
        print(f"\nZeRO-1 states vs theory: worst rank {worst:.3%} (target 1%) -> "
              f"{'PASS' if worst <= 0.01 else 'FAIL'}")
        ok &= worst <= 0.01
    if "checkpointing" in table and table["checkpointing"].get("dmem_prev") is not None:
        c = table["checkpointing"]
        # the time change is judged by the bot's own test, never by the bare ratio
        print(f"checkpointing: peak {c['dmem_prev']:+.1%}, step time {c['dtime_prev']:+.1%}, "
              f"time {compare.phrase(c['time_test'])} -> "
              f"{'PASS' if c['dmem_prev'] < 0 else 'FAIL'} (lower peak)")
        ok &= c["dmem_prev"] < 0
    if budget and "zero-1" in table and table["zero-1"]["memory"] > budget:
        ok &= confirm_goal(table["zero-1"], ladderfit.per_sequence(rows), steps[-1][2], budget)
    return 0 if ok else 1


def trial(line: str) -> dict | None:
    done = subprocess.run([sys.executable, "-m", "worker.cli", "trial", *line.split(), "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if not done.stdout.strip():
        print(done.stderr[-300:])
        return None
    return json.loads(done.stdout)


def confirm_goal(row: dict, per_seq: int | None, line: str, budget: int) -> bool:
    """Run the redefined goal's batch and seq: does each fit the budget?"""
    g = ladderfit.goal(row, budget, per_seq)
    ok = True
    for key in ("batch", "seq"):
        if not g[key]:
            print(f"redefined {key}: none predicted to fit")
            continue
        words = [w for w in line.split() if not w.startswith(f"{key}=")] + [f"{key}={g[key]}"]
        report = trial(" ".join(words))
        mem = ladder.peak(report)[0] if report and report["status"] == "ok" else None
        if not mem:
            print(f"redefined {key}={g[key]}: the trial did not measure a peak -> FAIL")
            ok = False
            continue
        print(f"redefined {key}={g[key]} (predicted to fit): measured peak {mem / 2**20:.0f} "
              f"MiB, {(mem - budget) / budget:+.1%} against the budget {budget / 2**20:.0f} MiB "
              f"-> {'PASS' if mem <= budget else 'FAIL'}")
        ok &= mem <= budget
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
