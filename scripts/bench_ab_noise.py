#!/usr/bin/env python3
"""Does the A/B's verdict hold beyond the noise of a shared machine? (issue 17)

Runs A/Bs as the bot would (ABBA order, ab.order(): A B B A A B B A for 4
rounds, as real trials through the worker CLI, one after another as one worker
runs them) under a noisy neighbour (scripts/loadgen.py, on for the whole bench
unless --quiet), and asks the bot's own comparison (bot/trials/ab.py's paired
test over bot/fits/compare.py) for each verdict. Targets:

- an A/B of two identical configs says "no measurable difference" in ≥ 9 of 10;
- an A/B of layers=4 against layers=8 (about 2× the time) finds B slower in ≥ 9 of 10.

    python scripts/bench_ab_noise.py [--runs 10] [--rounds 4] [--quiet] [--seed 7]
        [--threads 0] [--save FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from loadgen import LoadGenerator  # noqa: E402

from bot.fits import compare  # noqa: E402
from bot.trials import ab  # noqa: E402

# malloc=glibc: one pass per trial (a default CPU trial adds a memory pass the
# time comparison does not use).
CONFIG = ["llm-infer", "hidden=256", "heads=4", "kv_heads=2", "vocab=512", "batch=2",
          "prompt=64", "gen=8", "warmup=1", "repeats=6", "stability=0", "malloc=glibc"]


def trial(words: list[str], threads: int) -> dict | None:
    # The worker chooses and pins the intra-op threads (worker/threads.py); an
    # inherited OMP_NUM_THREADS no longer reaches the child, so a count is a param.
    extra = [f"threads={threads}"] if threads else []
    done = subprocess.run([sys.executable, "-m", "worker.cli", "trial", *words, *extra,
                           "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if not done.stdout.strip():
        print(f"  no report: {done.stderr[-300:]}")
        return None
    return json.loads(done.stdout)


def run_phase(r: dict | None) -> tuple[float, float] | None:
    run = next((p for p in (r or {}).get("phases", []) if p["name"] == "run"), None)
    return (run["start"], run["end"]) if run else None


def unmarked(r: dict | None) -> dict | None:
    if not r:
        return r
    r = dict(r, contention={"flagged": False, "summary": None})
    if r.get("windows"):
        r["windows"] = dict(r["windows"], rows=[dict(w, contended=False)
                                                for w in r["windows"]["rows"]])
    return r


def one_ab(a: list[str], b: list[str], rounds: int, first: int, load,
           threads: int, save) -> tuple[dict, dict]:
    """The arms in ABBA order as trials T<first>…; → (the bot's test, its posted message)."""
    lines = [" ".join(a if arm == "A" else b) for arm in ab.order(rounds)]
    jobs, reports = [], []
    for i, line in enumerate(lines):
        started = time.time()
        r = trial(line.split(), threads)
        name = f"T{first + i}"
        if r:
            r.update(trial=name, worker="bench")
        jobs.append({"id": first + i, "trial": name, "words": line, "channel": "bench",
                     "worker": "bench", "started": started})
        reports.append(r)
    test = ab.time_test(jobs, reports)
    # the same test with the contention marks taken off: the test alone, apart from
    # the probe's refusals (what a machine as busy as this one would otherwise get)
    bare = ab.time_test(jobs, [unmarked(r) for r in reports])
    test["unmarked"] = bare["verdict"]
    print(f"  the test alone (contention marks ignored): {compare.phrase(bare)}")
    if save:
        save.write(json.dumps({"lines": lines, "reports": reports}) + "\n")
        save.flush()
    if load:
        spans = [run_phase(r) for r in reports]
        busy = [f"{load.overlap(*s) / (s[1] - s[0]):.0%}" if s else "—" for s in spans]
        print(f"  load on during each run phase: {', '.join(busy)}")
    return test, ab.message(jobs, reports)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10, help="A/Bs of each kind")
    ap.add_argument("--rounds", type=int, default=ab.ROUNDS)
    ap.add_argument("--quiet", action="store_true", help="no load generator")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--save", help="write every A/B's reports here, one JSON line each")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads=N for the trials (0: the worker's own choice)")
    args = ap.parse_args()
    # a kill unwinds through the LoadGenerator's exit, so no spinner is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    a = CONFIG + ["layers=4"]
    kinds = {"identical": (a, a, "same"), "2x": (a, CONFIG + ["layers=8"], "slower")}
    print(f"config: {' '.join(CONFIG)}; A/B rounds={args.rounds} "
          f"({' '.join(ab.order(args.rounds))}); "
          f"threads={args.threads or 'chosen by the worker'}; "
          f"{'no load' if args.quiet else f'LoadGenerator(seed={args.seed}) on all cores'}")
    got = {k: {} for k in kinds}  # verdict (None: no verdict) -> count
    bare = {k: {} for k in kinds}  # the same, contention marks ignored
    save = open(args.save, "w") if args.save else None
    t0, first = time.monotonic(), 1
    with contextlib.nullcontext() if args.quiet else LoadGenerator(seed=args.seed) as load:
        for i in range(args.runs):
            for kind, (wa, wb, want) in kinds.items():
                test, msg = one_ab(wa, wb, args.rounds, first, load, args.threads, save)
                first += 2 * args.rounds
                got[kind][test["verdict"]] = got[kind].get(test["verdict"], 0) + 1
                bare[kind][test["unmarked"]] = bare[kind].get(test["unmarked"], 0) + 1
                print(f"{kind} {i + 1}: {msg['text'].splitlines()[1].lstrip('• ')}", flush=True)
        duty = f", load on {load.duty():.0%} of the time" if load else ""
    print(f"whole bench: {time.monotonic() - t0:.0f} s{duty}")
    ok = all(got[k].get(want, 0) >= 0.9 * args.runs for k, (_, _, want) in kinds.items())
    said = {"same": "no measurable difference", "faster": "B faster", "slower": "B slower",
            None: "no verdict"}

    def line(counts: dict) -> str:
        def part(kind: str) -> str:
            want = kinds[kind][2]
            other = [f"{n} {said[v]}" for v, n in counts[kind].items() if v != want]
            return (f"{said[want]} in {counts[kind].get(want, 0)}/{args.runs}"
                    + (f" ({', '.join(other)})" if other else ""))
        return f"identical configs: {part('identical')}; layers=4 vs layers=8: {part('2x')}"

    where = "quiet" if args.quiet else "under load"
    print(f"RESULT: {line(got)} (targets ≥ 9 in 10 each; {args.rounds} rounds in ABBA order, "
          f"paired test, {where}) -> "
          f"{'PASS' if ok else 'FAIL'}")
    print(f"RESULT with the contention marks ignored (the test alone, not what the bot "
          f"posts): {line(bare)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
