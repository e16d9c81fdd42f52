#!/usr/bin/env python3
"""A trial beside one fully busy core (issue 31, item 2).

Runs the same small llm-infer trial through the worker CLI in interleaved
pairs, quiet then beside one spinner process at 100% of a core (the way
scripts/loadgen.py spins; unpinned, placed by the kernel), and compares each
pair's median request time. Two arms, interleaved too:

- `worker`: the worker's own thread choice (worker/threads.py);
- `torch default`: threads=<all usable cores>, i.e. one thread per core,
  unpinned, libgomp's default wait: what torch does by itself (the "before").

Target: the worker's per-request slowdown (busy p50 / quiet p50 of a pair)
at most 2× (today, torch's default: 10-40×). Prints each arm's median
slowdown with its range over the pairs, and `uptime`: on a shared box the
"quiet" half is not quiet.

    python scripts/bench_busy_core.py [--pairs 5] [--arms worker,default]

`--waits N` instead runs the check behind the choice of wait policy, N rounds:
a loop of parallel regions (a 256×256 matmul) with serial Python between them,
in a fresh process per variant (threads, OMP_WAIT_POLICY), alternating; its
process CPU time shows whether libgomp honours the policy (spinning threads
burn CPU between regions), and its wall time what each costs on this box.
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
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from loadgen import SPIN  # noqa: E402

# bench_ab_noise.py's config (one glibc pass), device=cpu: the target is a CPU trial
CONFIG = ["llm-infer", "hidden=256", "heads=4", "kv_heads=2", "vocab=512", "batch=2",
          "prompt=64", "gen=8", "layers=4", "warmup=1", "repeats=6", "stability=0",
          "malloc=glibc", "device=cpu"]
TARGET = 2.0


def usable() -> int:
    return len(os.sched_getaffinity(0))


ARMS = {"worker": [], "default": [f"threads={usable()}"]}


def trial(extra: list[str]) -> dict | None:
    done = subprocess.run([sys.executable, "-m", "worker.cli", "trial", *CONFIG, *extra,
                           "--json"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        print(f"  no report: {done.stderr[-300:]}")
        return None
    return report if report["status"] == "ok" else None


def p50(report: dict | None) -> float | None:
    return report["latency"]["p50"] if report else None


def pair(extra: list[str]) -> tuple[float | None, float | None, dict | None]:
    quiet = p50(trial(extra))
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.5)  # it is spinning before the trial starts
        busy_report = trial(extra)
    finally:
        spinner.kill()
        spinner.wait()
    return quiet, p50(busy_report), busy_report


def spread(values: list[float]) -> str:
    if not values:
        return "no pairs"
    return (f"median {statistics.median(values):.2f}× "
            f"(range {min(values):.2f}-{max(values):.2f}×, {len(values)} pairs)")


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms" if values else "-"


REGIONS = """
import os, time, torch
torch.set_num_threads(int(os.environ["N"]))
a = torch.randn(256, 256)
t0, w0 = time.process_time(), time.perf_counter()
for _ in range(2000):
    a @ a                  # a parallel region
    sum(range(2000))       # serial Python between regions
print(time.process_time() - t0, time.perf_counter() - w0)
"""
WAITS = {"1 thread": {"N": "1"}, "1 thread, passive": {"N": "1", "OMP_WAIT_POLICY": "PASSIVE"},
         "all cores, passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "all cores, default": {}}


def waits(rounds: int) -> None:
    got = {k: [] for k in WAITS}
    for _ in range(rounds):
        for name, env in WAITS.items():
            env = {**os.environ, "N": str(usable()), **env}
            env.pop("OMP_NUM_THREADS", None)
            out = subprocess.run([sys.executable, "-c", REGIONS], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()
            got[name].append((float(out[0]), float(out[1])))
    for name, runs in got.items():
        print(f"RESULT {name}: CPU " + ", ".join(f"{c:.2f}" for c, _ in runs) + " s; wall "
              + ", ".join(f"{w:.2f}" for _, w in runs) + " s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--arms", default="worker,default")
    ap.add_argument("--waits", type=int, default=0, help="rounds of the wait-policy check "
                    "instead of the trials")
    args = ap.parse_args()
    print(f"uptime: {os.popen('uptime').read().strip()}")
    if args.waits:
        waits(args.waits)
        return 0
    arms = args.arms.split(",")
    print(f"config: {' '.join(CONFIG)}; {usable()} usable cores; one spinner (loadgen's SPIN)")
    ratios = {a: [] for a in arms}
    quiet = {a: [] for a in arms}
    busy = {a: [] for a in arms}
    for i in range(args.pairs):
        for arm in arms:
            q, b, report = pair(ARMS[arm])
            if q is None or b is None:
                print(f"pair {i + 1} {arm}: a trial failed")
                continue
            ratios[arm].append(b / q)
            quiet[arm].append(q)
            busy[arm].append(b)
            chosen = report["threads"]
            flagged = report["contention"]["flagged"]
            print(f"pair {i + 1} {arm}: quiet p50 {q * 1000:.0f} ms, busy {b * 1000:.0f} ms: "
                  f"{b / q:.2f}× ({chosen['threads']} threads on cores {chosen['cores']}, "
                  f"busy trial {'flagged' if flagged else 'not flagged'})", flush=True)
    print(f"uptime after: {os.popen('uptime').read().strip()}")
    for arm in arms:
        # the arms' quiet halves side by side: on a shared box the "quiet" half
        # already has neighbours, and torch's default pays for them there too
        print(f"RESULT {arm}: slowdown beside one busy core {spread(ratios[arm])}; "
              f"request p50, median over pairs: quiet {ms(quiet[arm])}, busy {ms(busy[arm])}")
    ok = bool(ratios.get("worker")) and statistics.median(ratios["worker"]) <= TARGET
    print(f"target: worker's median slowdown ≤ {TARGET:g}× -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
