"""How long does the weekly digest take on a big database? Target: under 2 s
for 100,000 trials and 200 plans.

Builds a temporary SQLite file through the store's own schema (bulk inserts
for the trials and attempts, the store's API for plans, blocks, actuals, idle
and prices), then times the digest for one channel: the SQL, the estimates
and reviews of every plan, the text, and the chart. Exits 1 over the target.

    python scripts/bench_digest.py [--trials 100000] [--plans 200] [--weeks 26]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bot.digest import command as schedule  # noqa: E402
from bot.store import Store  # noqa: E402
from bot.trials.queue import JobQueue  # noqa: E402
from worker.report import new_report  # noqa: E402

CHANNEL = "C1"
GPU = "NVIDIA H100 80GB HBM3"


def trial_report(rng: random.Random, ok: bool, batch: int) -> dict:
    mean, count = rng.uniform(0.5, 3.0), rng.randint(5, 50)
    phases = {"setup": rng.uniform(10, 60), "weights": rng.uniform(20, 90),
              "data": rng.uniform(5, 200), "warmup": rng.uniform(1, 10), "run": mean * count}
    r = new_report("llm-infer", {"batch": batch, "prompt": 512, "gen": 64, "repeats": count})
    r.update(status="ok" if ok else "failed", seconds=sum(phases.values()) + rng.uniform(0, 3),
             phases=[{"name": n, "seconds": s, "start": 0.0, "end": s} for n, s in phases.items()],
             latency={"p50": mean, "p90": mean * 1.1, "p99": mean * 1.3, "mean": mean,
                      "stdev": mean * 0.05, "count": count},
             env={"gpu_count": 1, "gpu_name": GPU, "torch": "2.13.0", "cpu": "EPYC",
                  "device": "cuda", "host": "box", "gpu_memory": 80 * 10**9, "driver": "570",
                  "cuda": "12.8"},
             error=None if ok else {"class": "oom", "message": "CUDA out of memory",
                                    "phase": "run"})
    r["memory"].update(peak_allocated=40 * 2**30, peak_reserved=42 * 2**30,
                       host_rss_peak=2**30, process_used_peak=43 * 2**30)
    return r


def generate(store: Store, n_trials: int, n_plans: int, weeks: int, now: float,
             seed: int = 1) -> None:
    rng = random.Random(seed)
    span = weeks * 7 * 86400
    jobs, attempts = [], []
    kinds = ("baseline", "compare", "verify")
    for i in range(1, n_trials + 1):
        ok = rng.random() > 0.08
        batch = rng.choice((1, 2, 4, 8))
        r = trial_report(rng, ok, batch)
        finished = now - rng.uniform(0, span)
        plan = block = None
        if i <= n_plans * 10:  # 10 tagged actuals per plan
            plan, block = f"p{(i - 1) % n_plans}", kinds[(i // n_plans) % 3]
        jobs.append({"id": i, "workload": "llm-infer", "spec": json.dumps({"workload": "llm-infer",
                     "params": r["params"]}), "words": "llm-infer", "user": "U1",
                     "channel": CHANNEL, "status": "done" if ok else "failed",
                     "worker": f"w{i % 4}", "attempts": 1, "created": finished - r["seconds"],
                     "started": finished - r["seconds"], "finished": finished,
                     "report": json.dumps(r), "error_class": None if ok else "oom",
                     "plan": plan, "block": block})
        tries = [("failed", "oom", r["seconds"] * 0.3)] if rng.random() < 0.05 else []
        tries.append(("ok" if ok else "failed", None if ok else "oom", r["seconds"]))
        for n, (status, cls, secs) in enumerate(tries, 1):
            attempts.append({"job": i, "n": n, "worker": f"w{i % 4}", "status": status,
                             "error_class": cls, "message": "", "seconds": secs,
                             "changed": "{}", "next": None, "recorded": finished})
    with store.db.conn:
        store.db["jobs"].insert_all(jobs, batch_size=2000)
        store.db["attempts"].insert_all(attempts, batch_size=2000)
    ok_ids = [j["id"] for j in jobs if j["status"] == "done" and not j["plan"]]
    for p in range(n_plans):
        name = f"p{p}"
        store.add_plan(name, CHANNEL, "U1", {"gpu": "H100", "platform": "cuda",
                                              "paper": "arXiv 2405.01234v2"})
        base = rng.choice(ok_ids)
        for kind in kinds:
            store.put_block({"plan": name, "kind": kind, "runs": rng.randint(10, 500),
                             "configs": rng.randint(1, 3), "gpus": 1, "trials": [base],
                             "sweep": None, "predict": {}, "handoff": None, "note": None,
                             "user": "U1"})
        store.add_actual({"plan": name, "block": "verify", "hours": 2.0, "parts": {"prep": 0.2},
                          "runs": 40, "note": "cluster", "user": "U1"})
    for w in range(4):
        store.upsert_worker(f"w{w}", {"gpus": [GPU]})
        store.add_idle(f"w{w}", {(dt.date.fromtimestamp(now) - dt.timedelta(days=d)).isoformat():
                                 rng.uniform(0, 7200) for d in range(weeks * 7)})
    today = dt.date.fromtimestamp(now)
    store.add_price({"item": "H100", "kind": "rent", "value": 2.49, "unit": "per GPU-hour",
                     "currency": "$", "source": "https://provider.example/pricing",
                     "date": (today - dt.timedelta(days=3)).isoformat(), "user": "U1"})
    store.add_price({"item": "electricity", "kind": "electricity", "value": 0.12,
                     "unit": "per kWh", "currency": "$", "source": "bill",
                     "date": (today - dt.timedelta(days=45)).isoformat(), "user": "U1"})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--plans", type=int, default=200)
    ap.add_argument("--weeks", type=int, default=26, help="the trials' finish times span this")
    ap.add_argument("--target", type=float, default=2.0, help="seconds")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        now = time.time()
        t0 = time.perf_counter()
        store = Store(path)
        generate(store, args.trials, args.plans, args.weeks, now)
        # A running bot's writes are small and checkpointed as they go; the bulk
        # insert left everything in the WAL, which a bot's file would not have.
        store.db.execute("pragma wal_checkpoint(truncate)")
        store.db.conn.close()
        print(f"generated {args.trials} trials, {args.plans} plans over {args.weeks} weeks in "
              f"{time.perf_counter() - t0:.1f} s ({os.path.getsize(path) / 2**20:.0f} MiB)")
        ctx = JobQueue(Store(path))  # a fresh connection, as a restarted bot has
        sched = {"channel": CHANNEL, "weekday": "mon", "hour": 9, "minute": 0,
                 "tz": "Asia/Seoul"}
        from bot.digest import build as digest_build
        end = digest_build.last_fire(sched, dt.datetime.fromtimestamp(now, dt.timezone.utc))
        t0 = time.perf_counter()  # a process-start cost, not the digest's: timed apart
        import matplotlib.pyplot  # noqa: F401
        import scipy.stats  # noqa: F401
        print(f"imports matplotlib.pyplot and scipy.stats: {time.perf_counter() - t0:.2f} s "
              "(once per bot process, apart from the figure below)")
        runs = []
        for _ in range(2):  # the first on a cold connection, as a weekly digest runs
            t0 = time.perf_counter()
            messages = schedule.build(ctx, CHANNEL, end, digest_build.week_key(end))
            runs.append(time.perf_counter() - t0)
        took = runs[0]
        print(f"week {digest_build.week_key(end)}: {messages[0]['text'].splitlines()[1]}")
        print(f"digest (SQL, every plan's estimate and review, text, chart): {took:.3f} s on "
              f"a cold connection, {runs[1]:.3f} s again; text {len(messages[0]['text'])} "
              f"chars, chart {len(messages[1]['content'])} bytes (target < {args.target:g} s)")
    if took > args.target:
        print(f"FAIL: {took:.3f} s is over the {args.target:g} s target", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
