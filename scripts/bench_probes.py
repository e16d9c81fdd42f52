#!/usr/bin/env python3
"""Measure the probes against issue 3's targets, on this machine:

1. overhead: the same llm-infer trial with worker-side sampling on (100 Hz) and
   off, alternating, as a ratio of wall times over several repetitions;
2. host peak vs the kernel: a program that allocates and touches 500 MB; the
   sampled RSS peak against the kernel's max RSS for the child (wait4 rusage);
3. a 50 ms spike: a program that holds 500 MB for 50 ms between idle periods;
   is it visible in the sampled peak?

    python scripts/bench_probes.py [--reps 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from worker import launcher, recipes  # noqa: E402
from worker.spec import parse  # noqa: E402
from worker.timeline import sampled_host_peak  # noqa: E402

MB = 2**20
PROGRAM = textwrap.dedent("""
    import sys, time
    size, hold = int(sys.argv[1]) * 2**20, float(sys.argv[2])
    time.sleep(0.3)
    print("TRIALBOT_PHASE alloc", flush=True)
    b = bytearray(size)
    for i in range(0, size, 4096):  # touch every page: RSS is what is touched
        b[i] = 1
    time.sleep(hold)
    del b
    print("TRIALBOT_PHASE after", flush=True)
    time.sleep(0.3)
""")


def recipe_book(tmp: str) -> dict:
    Path(tmp, "alloc.py").write_text(PROGRAM)
    Path(tmp, "recipes.toml").write_text(textwrap.dedent("""
        [recipes.alloc]
        cwd = "."
        argv = ["{python}", "alloc.py", "{mb}", "{hold}"]
        [recipes.alloc.params]
        mb = { type = "int", min = 1, max = 4096, default = 500 }
        hold = { type = "float", min = 0.001, max = 60, default = 1.0 }
        """))
    return recipes.load(os.path.join(tmp, "recipes.toml"))


def alloc(book, mb: int, hold: float) -> dict:
    spec = parse(["recipe", "alloc", f"mb={mb}", f"hold={hold}"],
                 {"alloc": book["alloc"].workload()})
    r = launcher.run_trial(spec, recipes=book)
    assert r["status"] == "ok", r["error"]
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    spec = parse(["llm-infer", "batch=4", "prompt=128", "gen=32", "repeats=20", "stability=0"])
    on, off, cpu, run_on, run_off = [], [], [], [], []
    for i in range(args.reps):
        for hz, out, run in (((100, on, run_on), (0, off, run_off)) if i % 2 == 0
                             else ((0, off, run_off), (100, on, run_on))):
            r = launcher.run_trial(spec, hz=hz)
            out.append(r["seconds"])
            run.append(next(p["seconds"] for p in r["phases"] if p["name"] == "run"))
            if hz:
                cpu.append(r["probe"]["sampler_cpu_seconds"] / r["seconds"])
    ratio = statistics.median(on) / statistics.median(off)
    run_ratio = statistics.median(run_on) / statistics.median(run_off)
    print(f"1. overhead: llm-infer batch=4 prompt=128 gen=32 repeats=20, {args.reps} reps each, "
          f"alternating: wall median on {statistics.median(on):.3f} s, off "
          f"{statistics.median(off):.3f} s -> ratio {ratio:.4f} ({(ratio - 1) * 100:+.2f}%); "
          f"per-run on {[f'{x:.2f}' for x in on]}, off {[f'{x:.2f}' for x in off]}")
    print(f"   run phase only (no interpreter start-up noise): median on "
          f"{statistics.median(run_on):.3f} s, off {statistics.median(run_off):.3f} s -> "
          f"ratio {run_ratio:.4f} ({(run_ratio - 1) * 100:+.2f}%)")
    # Each on/off pair ran back to back, so its ratio cancels the machine's drift.
    pairs = sorted(a / b for a, b in zip(run_on, run_off))
    q1, q3 = pairs[len(pairs) // 4], pairs[(3 * len(pairs)) // 4]
    print(f"   paired run-phase ratios: median {statistics.median(pairs):.4f} "
          f"({(statistics.median(pairs) - 1) * 100:+.2f}%), IQR {q1:.3f}..{q3:.3f}")
    print(f"   sampler thread CPU time / trial wall time: median {statistics.median(cpu):.2%}, "
          f"max {max(cpu):.2%} (of one core; this machine has {os.cpu_count()})")

    with tempfile.TemporaryDirectory() as tmp:
        book = recipe_book(tmp)
        diffs = []
        for _ in range(args.reps):
            r = alloc(book, 500, 1.0)
            m, peak = r["memory"], sampled_host_peak(r)
            diffs.append((peak - m["host_rss_peak_kernel"]) / m["host_rss_peak_kernel"])
            print(f"   500 MB touched: sampled peak {peak / MB:.1f} MiB, kernel "
                  f"max RSS {m['host_rss_peak_kernel'] / MB:.1f} MiB")
        worst = max(diffs, key=abs)
        print(f"2. host peak vs kernel: worst difference {worst * 100:+.2f}% over {args.reps} "
              f"runs (target within 2%)")

        seen = 0
        for _ in range(args.reps):
            r = alloc(book, 500, 0.05)
            rows = r["timeline"]["sampled"]["rows"]
            baseline = min(row[1] for row in rows if row[1])
            rise = sampled_host_peak(r) - baseline
            seen += rise >= 450 * MB
            print(f"   50 ms spike of 500 MB: sampled peak {rise / MB:.0f} MiB above the "
                  f"baseline, kernel max RSS {r['memory']['host_rss_peak_kernel'] / MB:.0f} MiB")
        print(f"3. 50 ms spike visible (>= 450 MiB above baseline) in {seen}/{args.reps} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
