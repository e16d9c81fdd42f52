#!/usr/bin/env python3
"""Leasing (issue 29): the real Store on a real file and the real JobQueue.

1. Starvation: 10,000 queued trials routed to a GPU box that is down
   (`label=team=gpu`, 50 users), then one plain trial from another user; an
   idle CPU worker asks once (`JobQueue.lease(worker, 0)`, what one
   `/api/lease` poll calls). It passes when that one call leases the plain
   trial. Then the same with the 10,000 put in by SQL, without their class
   (rows from before migration 10): the one call classifies them too.
2. Latency: the time of one `JobQueue.lease` (everything a poll does but the
   HTTP) with 0, 1,000, 10,000 and 100,000 trials queued: 20 users, 90%
   trials this worker can run (plain, `label=team=nlp`, two-rank training),
   10% it cannot (`label=team=gpu`). Before each timed lease one trial is
   queued, after it the leased trial is ended, so the queue keeps its size.
   The sizes take turns in rounds, so the box's noise falls on all of them.
   It passes when p50 and p99 at the largest queue are within 2x of those at
   the smallest.

The backlog goes in through the queue (JobQueue.submit_sweep, in one
transaction per 500 trials), as /trial sweep puts it there.

A lease's cost grows with the users (and needs classes) waiting, not the
trials: `--users` sets how many users the backlog has.

    python scripts/bench_lease.py [--samples 1000] [--sizes 0,1000,10000,100000]
                                  [--users 20]
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bot.app.runtime import context  # noqa: E402
from bot.store import Store  # noqa: E402
from worker.spec import parse  # noqa: E402

CPU = {"gpus": [], "gpu_memory": [], "device": "cpu", "cpus": 4, "labels": {"team": "nlp"}}
GPU = {"gpus": ["NVIDIA H100 80GB HBM3"], "gpu_memory": [85899345920], "device": "cuda",
       "cpus": 32, "labels": {"team": "gpu"}}
DOWN = {"labels": {"team": "gpu"}}
# (words, route): what the latency backlog is made of, by tenths
MIX = [("llm-infer gen=1 repeats=1", None)] * 5 + [
    ("llm-infer gen=1 repeats=1", {"labels": {"team": "nlp"}})] * 3 + [
    ("llm-train steps=2 world=2 device=cpu", None), ("llm-infer gen=1 repeats=1", DOWN)]
CHUNK = 500


def fresh(tmp: str, name: str):
    ctx = context(Store(f"{tmp}/{name}.db"))
    ctx.store.upsert_worker("cpu-box", CPU)
    ctx.store.upsert_worker("gpu-box", GPU)
    with ctx.store.tx():  # the GPU box went down three days ago
        ctx.store.db.execute("update workers set last_seen = ? where name = 'gpu-box'",
                             [time.time() - 3 * 86400])
    return ctx


def backlog(ctx, n: int, users: int, mix: list) -> None:
    """`n` queued trials, by `users` users, cycling through `mix`."""
    kinds = [(parse(w.split()), w, route) for w, route in mix]
    for start in range(0, n, CHUNK):
        size = min(CHUNK, n - start)
        by_route: dict = {}
        for i in range(start, start + size):
            spec, words, route = kinds[i % len(kinds)]
            by_route.setdefault((str(route), f"U{i % users}"), (route, []))[1].append(
                (spec, words))
        for (_, user), (route, trials) in by_route.items():
            ctx.queue.submit_sweep([s for s, _ in trials], [w for _, w in trials], user, "C1",
                                   route=route)


def end(ctx, job: dict) -> None:
    with ctx.store.tx():
        ctx.store.db.execute("update jobs set status = 'done', finished = ?, lease = null "
                             "where id = ?", [time.time(), job["id"]])
        ctx.store.db.execute("update workers set job = null where name = ?", [job["worker"]])


def starvation(tmp: str) -> bool:
    ctx = fresh(tmp, "starve")
    backlog(ctx, 10_000, 50, [("llm-infer gen=1 repeats=1", DOWN)])
    plain = ctx.queue.submit(parse(["llm-infer", "gen=1"]), "llm-infer gen=1", "UB", "C1")
    t0 = time.perf_counter()
    got = ctx.queue.lease("cpu-box", 0)
    took = time.perf_counter() - t0
    ok = bool(got) and got["id"] == plain["id"]
    print(f"1. 10,000 trials for a box that is down, then one plain trial: one lease call "
          f"({took * 1000:.1f} ms) gave {got['trial'] if got else 'nothing'} "
          f"(want {plain['trial']})")
    # the same queue as rows without their class (before migration 10, or bulk SQL)
    ended = sqlite3.connect(f"{tmp}/starve.db")
    columns = {r[1] for r in ended.execute("pragma table_info(jobs)")}
    with ended:
        ended.execute("update jobs set status = 'queued', worker = null, lease = null, "
                      "started = null where id = ?", [plain["id"]])
        if "needs" in columns:
            ended.execute("update jobs set needs = null")
    t0 = time.perf_counter()
    again = ctx.queue.lease("cpu-box", 0)
    took = time.perf_counter() - t0
    ok_sql = bool(again) and again["id"] == plain["id"]
    print(f"   the same 10,000 without their class: one lease call ({took * 1000:.0f} ms, "
          f"classifying them) gave {again['trial'] if again else 'nothing'}")
    return ok and ok_sql


def latency(tmp: str, sizes: list[int], samples: int, users: int) -> bool:
    ctxs = {}
    for n in sizes:
        t0 = time.perf_counter()
        ctxs[n] = fresh(tmp, f"q{n}")
        backlog(ctxs[n], n, users, MIX)
        print(f"   queued {n:,} in {time.perf_counter() - t0:.1f} s", flush=True)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    rounds, i = 10, 0
    for r in range(rounds + 1):  # round 0 warms each file's cache, untimed
        for n, ctx in ctxs.items():
            for _ in range(samples // rounds if r else 20):
                words, route = MIX[i % 9]  # one it can run: the queue keeps its size
                ctx.queue.submit(parse(words.split()), words, f"U{i % users}", "C1", route=route)
                i += 1
                t0 = time.perf_counter()
                job = ctx.queue.lease("cpu-box", 0)
                took = time.perf_counter() - t0
                if job is None:
                    raise SystemExit(f"FAIL: no lease at {n:,} queued")
                end(ctx, job)
                if r:
                    times[n].append(took * 1000)
    print("2. one JobQueue.lease, ms (samples each):")
    p = {n: (np.percentile(t, 50), np.percentile(t, 99)) for n, t in times.items()}
    for n in sizes:
        print(f"   {n:>7,} queued: p50 {p[n][0]:.2f}  p99 {p[n][1]:.2f}  ({len(times[n])})")
    small, large = p[sizes[0]], p[sizes[-1]]
    ratio = (large[0] / small[0], large[1] / small[1])
    print(f"   largest / smallest: p50 {ratio[0]:.2f}x, p99 {ratio[1]:.2f}x (want <= 2)")
    return max(ratio) <= 2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--sizes", default="0,1000,10000,100000")
    ap.add_argument("--users", type=int, default=20)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    tmp = tempfile.mkdtemp(prefix="trialbot-lease-")
    ok = starvation(tmp)
    ok = latency(tmp, sizes, args.samples, args.users) and ok
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
