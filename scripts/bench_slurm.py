#!/usr/bin/env python3
"""Measure the Slurm executor on the idle test cluster (scripts/slurm-test-cluster):

1. lease → running: from the moment the worker hands a leased trial to the
   executor to the job's entry starting inside its allocation (sbatch, the
   scheduler's pass, slurmd launching the batch script, Python starting),
2. the overhead the executor adds to a trial's wall time: the same trial run
   as a plain worker does (attempts.run, a child process here) and through
   Slurm, wall time from call to report, paired run by run.

    SLURM_CONF=/tmp/trialbot-slurm/slurm.conf python scripts/bench_slurm.py [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from worker import attempts  # noqa: E402
from worker.slurm import SlurmExecutor  # noqa: E402
from worker.spec import parse, resolve  # noqa: E402

TRIAL = "llm-infer gen=2 repeats=1 stability=0"


def describe(name: str, xs: list[float]) -> str:
    return (f"{name}: n={len(xs)} median {statistics.median(xs):.2f} s, "
            f"min {min(xs):.2f} s, max {max(xs):.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partition", default="debug")
    args = parser.parse_args()
    os.environ.setdefault("SLURM_CONF", "/tmp/trialbot-slurm/slurm.conf")
    spec = resolve(parse(TRIAL.split()))
    with tempfile.TemporaryDirectory() as shared:
        ex = SlurmExecutor(args.partition, shared_dir=shared, mem="2G", gpus="0")
        ex(spec)  # warm the page cache (Python, torch) for both sides alike
        attempts.run(spec)
        to_running, submit, queue, local, slurm, inner = [], [], [], [], [], []
        for _ in range(args.runs):
            t = time.time()
            r = attempts.run(spec)
            local.append(time.time() - t)
            t = time.time()
            r = ex(spec)
            slurm.append(time.time() - t)
            assert r["status"] == "ok", r.get("error")
            job = r["slurm"]["jobs"][0]
            submit.append(job["submit_s"])
            queue.append(job["queue_wait_s"])
            to_running.append(job["submit_s"] + job["queue_wait_s"])
            inner.append(r["slurm"]["wall_s"] - r["seconds"])
    print(f"trial: {TRIAL}, partition {args.partition}, {args.runs} runs")
    print(describe("lease → job running", to_running))
    print(describe("  of which sbatch", submit))
    print(describe("  of which queue wait (sbatch accepted → entry started)", queue))
    print(describe("plain worker wall", local))
    print(describe("Slurm executor wall", slurm))
    print(describe("overhead (Slurm − plain, paired)", [s - p for s, p in zip(slurm, local)]))
    print(describe("executor wall − the trial's own seconds", inner))
    return 0


if __name__ == "__main__":
    sys.exit(main())
