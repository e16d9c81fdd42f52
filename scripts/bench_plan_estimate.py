#!/usr/bin/env python3
"""Does a short trial predict a longer experiment, and does the plan's 90%
interval hold beside a noisy neighbour? (issues 4 and 17)

A seeded load generator (scripts/loadgen.py: one CPU-bound process per core,
switched on and off at random) runs for the whole bench. Each round runs a
short trial, estimates a block of N runs from it with the planner, then runs
the reference experiment (the same config for N runs in one process) and
compares. It reports:

- detection: every short trial the load overlapped must be flagged contended.
  The generator pins one spinner to each core, so while it is on, the cores the
  worker pinned the trial to have a neighbour too; "overlapped" is at least
  OVERLAPPED seconds of load inside the trial's span (a shorter graze is listed
  apart: it may fall between its processes or in one 0.5 s span of the probe);
- coverage: for the trials not flagged, how often the 90% interval held the
  reference's measured total, and the median absolute error;
- calibration: from round 11 on, the interval calibrated on the rounds before
  (split-conformal, bot/plans/calibration.py) — flagged trials included;
- width: the median half-width of the uncalibrated interval, as a % of the
  estimate (an interval wide enough to hold everything is not the goal).

The short trial runs at the worker's default `processes=` (--processes to
change it); the reference is one user run, so one process (processes=1).
Each round's estimate also reads the earlier rounds' trials (short and
reference), as the planner reads the worker's earlier trials of the config from its store
(bot/plans/perrun.history); --no-history estimates from the round's trial alone.

    python scripts/bench_plan_estimate.py [--rounds 20] [--quiet] [--seed 17] [--processes N]
        [--no-history] [--save FILE.jsonl] [--replay FILE.jsonl]

--save writes each round's two reports; --replay estimates again from saved
rounds with the current code, running nothing (the figures to quote come from
a live run: a replay is for seeing what a change of the estimate does).

--quiet runs the same rounds without the load generator. Runs real child
processes through the worker CLI, as a worker would.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from loadgen import LoadGenerator  # noqa: E402

from bot.plans import calibration, estimate, perrun  # noqa: E402

# malloc=glibc: one pass per trial. A default (auto) CPU trial adds a memory pass
# whose seconds no plan counts; the bench measures time, so it skips that pass.
CONFIG = ["llm-infer", "layers=4", "hidden=512", "heads=8", "kv_heads=4", "batch=2",
          "prompt=128", "gen=32", "warmup=1", "stability=0", "malloc=glibc"]
CALIBRATE_FROM = 10  # rounds recorded before the calibrated interval is judged
OVERLAPPED = 1.0  # seconds of load inside a trial's span that must get it flagged


def trial(words: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "worker.cli", "trial", *words, "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"trial failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if report["status"] != "ok":
        raise SystemExit(f"trial failed: {report['error']}")
    return report


def block_estimate(short: dict, runs: int, earlier: list[dict]) -> dict:
    job = {"id": 1, "trial": "short", "status": "done", "report": short}
    block = {"kind": "baseline", "runs": runs, "configs": 1, "gpus": 1, "handoff": None,
             "note": None, "sweep": None}
    return estimate.estimate_block(block, [job], {1: short["attempts"]}, {}, pays_prep=True,
                                   earlier=earlier[::-1][:perrun.HISTORY])


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40, help="runs (requests) in the reference")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--short", type=int, default=10, help="repeats of the short trial")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--quiet", action="store_true", help="no load generator")
    ap.add_argument("--processes", type=int, default=None,
                    help="the short trial's processes= (default: the worker's default)")
    ap.add_argument("--no-history", action="store_true",
                    help="estimate from the round's short trial alone")
    ap.add_argument("--save", help="write each round's reports to this JSON-lines file")
    ap.add_argument("--replay", help="estimate again from a --save file; run nothing")
    return ap.parse_args()


def main() -> int:
    args = _args()
    if args.replay:
        with open(args.replay) as f:
            saved = [json.loads(line) for line in f]
        args.quiet = saved[0]["quiet"]
        args.rounds = len(saved)
    load = (contextlib.nullcontext() if args.quiet or args.replay
            else LoadGenerator(seed=args.seed, pin=True))
    save = open(args.save, "w") if args.save else None
    short_words = CONFIG + [f"repeats={args.short}"] + (
        [f"processes={args.processes}"] if args.processes else [])
    print(f"config: {' '.join(CONFIG)}; short trial repeats={args.short}, processes="
          f"{args.processes or 'default'}; reference processes=1, "
          f"runs={args.runs}; load generator: "
          + ("off (--quiet)" if args.quiet else f"seed {args.seed}, on 1-6 s, off 4-20 s, "
             f"{os.cpu_count()} spinners, one pinned to each core"))
    rounds, pairs, earlier = [], [], []
    with load as gen:
        for i in range(args.rounds):
            if args.replay:
                short, ref = saved[i]["short"], saved[i]["ref"]
            else:
                short = trial(short_words)
            est = block_estimate(short, args.runs, [] if args.no_history else earlier)
            total = sum(c["seconds"] for c in est["components"])
            lo, hi = total - est["half"], total + est["half"]
            if not args.replay:
                ref = trial(CONFIG + [f"repeats={args.runs}", "run_cap=3600", "processes=1"])
            earlier += [short, ref]  # the worker's store holds both
            actual = ref["seconds"]
            cal = calibration.calibrate(pairs) if i >= CALIBRATE_FROM else None
            row = {"est": total, "lo": lo, "hi": hi, "actual": actual, "half": est["half"] / total,
                   "err": (total - actual) / actual, "inside": lo <= actual <= hi,
                   "flagged": short["contention"]["flagged"],
                   "ref_flagged": ref["contention"]["flagged"],
                   "overlap": gen.overlap(short["started"], short["finished"]) if gen else 0.0,
                   "ref_overlap": gen.overlap(ref["started"], ref["finished"]) if gen else 0.0}
            if args.replay:
                row.update(overlap=saved[i]["overlap"], ref_overlap=saved[i]["ref_overlap"])
            if save:
                save.write(json.dumps({"quiet": args.quiet, "short": short, "ref": ref,
                                       "overlap": row["overlap"],
                                       "ref_overlap": row["ref_overlap"]}) + "\n")
                save.flush()
            if cal and cal.get("calibrated"):
                row["cal"] = (total * cal["low"], total * cal["high"])
                row["cal_inside"] = row["cal"][0] <= actual <= row["cal"][1]
            rounds.append(row)
            pairs.append({"estimate": total, "actual": actual, "scope": "bench",
                          "name": f"round {i + 1}", "contended": row["flagged"]})
            show(i, row, short)
        duty = gen.duty() if gen else 0.0
    if save:
        save.close()
    return report(rounds, args, duty)


def show(i: int, row: dict, short: dict) -> None:
    cal_text = (f"; calibrated [{row['cal'][0]:.2f}..{row['cal'][1]:.2f}] "
                f"{'inside' if row['cal_inside'] else 'OUTSIDE'}" if "cal" in row else "")
    print(f"round {i + 1}: estimate {row['est']:.2f} s [90% {row['lo']:.2f}.."
          f"{row['hi']:.2f}], reference {row['actual']:.2f} s, error {row['err']:+.1%}, "
          f"{'inside' if row['inside'] else 'OUTSIDE'} (±{row['half']:.1%}); short "
          f"trial {short['seconds']:.1f} s one run, "
          f"{(short.get('processes') or {}).get('seconds', short['seconds']):.1f} s "
          f"in all; load overlap "
          f"{row['overlap']:.1f} s -> {'FLAGGED' if row['flagged'] else 'not flagged'}; "
          f"reference overlap {row['ref_overlap']:.1f} s"
          f"{' (flagged)' if row['ref_flagged'] else ''}{cal_text}", flush=True)


def report(rounds: list[dict], args, duty: float) -> int:
    touched = [r for r in rounds if r["overlap"] >= OVERLAPPED]
    missed = [i + 1 for i, r in enumerate(rounds)
              if r["overlap"] >= OVERLAPPED and not r["flagged"]]
    grazed = [(i + 1, r["flagged"]) for i, r in enumerate(rounds)
              if 0 < r["overlap"] < OVERLAPPED]
    extra = [i + 1 for i, r in enumerate(rounds) if r["overlap"] == 0 and r["flagged"]]
    clean = [r for r in rounds if not r["flagged"]]
    held = sum(r["inside"] for r in clean)
    quiet_ref = [r for r in clean if not r["ref_flagged"]]
    mae = statistics.median(abs(r["err"]) for r in clean) if clean else float("nan")
    cal = [r for r in rounds if "cal" in r]
    print(f"load on {duty:.0%} of the time" if not args.quiet else "no load generator")
    print(f"RESULT detection: {len(touched) - len(missed)} of {len(touched)} short trials the "
          f"load overlapped for {OVERLAPPED:g} s or more were flagged (missed rounds: "
          f"{missed or 'none'}); grazed under {OVERLAPPED:g} s (round, flagged): "
          f"{grazed or 'none'}; flagged without the load (the machine's own neighbours): "
          f"{extra or 'none'}")
    print(f"RESULT coverage: for the {len(clean)} trials not flagged the 90% interval held the "
          f"reference in {held} of {len(clean)} (target >= 90%); median absolute error "
          f"{mae:.1%} (target <= 10%); of those, {len(quiet_ref)} references were themselves "
          f"quiet and the interval held {sum(r['inside'] for r in quiet_ref)} of them")
    if clean:
        print(f"RESULT width: median half-width of the uncalibrated 90% interval "
              f"{statistics.median(r['half'] for r in clean):.1%} of the estimate (target "
              "<= 15%)")
    if cal:
        held_cal = sum(r["cal_inside"] for r in cal)
        print(f"RESULT calibration: the calibrated 90% interval held {held_cal} of the "
              f"{len(cal)} actuals after round {CALIBRATE_FROM} (flagged included; "
              "target >= 9 of 10)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
