#!/usr/bin/env python3
"""Routing (issue 8): 3 workers with different hardware and labels take leases
over the real worker API on loopback; 30 mixed trials (gpu=, min_mem=, label=,
none) are queued; each worker reports at once. Prints where each kind of trial
ran and how many ran on a worker that does not match (must be 0).

    python scripts/bench_routing.py [--trials 30]
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import threading
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bot.app import config  # noqa: E402
from bot.app.console import ConsoleTransport  # noqa: E402
from bot.app.runtime import Runtime  # noqa: E402
from bot.trials import command as trial_command  # noqa: E402
from bot.trials import routing  # noqa: E402
from worker import report as reports  # noqa: E402
from worker.client import Client  # noqa: E402

WORKERS = {
    "h100-box": {"gpus": ["NVIDIA H100 80GB HBM3"] * 2, "gpu_memory": [85899345920] * 2,
                 "device": "cuda", "cpus": 32, "labels": {"team": "vision"}},
    "a100-box": {"gpus": ["NVIDIA A100-SXM4-40GB"], "gpu_memory": [42949672960],
                 "device": "cuda", "cpus": 16, "labels": {"team": "nlp"}},
    "cpu-box": {"gpus": [], "gpu_memory": [], "device": "cpu", "cpus": 4,
                "labels": {"team": "nlp", "tier": "cheap"}},
}
ASKS = ["gpu=H100", "gpu=A100", "label=team=nlp", "min_mem=60GB", "label=tier=cheap", ""]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="trialbot-routing-")
    rt = Runtime(f"{tmp}/r.db", "wtoken", ConsoleTransport(io.StringIO(), True, tmp),
                 policy=config.load_access({"TRIALBOT_RUN_EVERYONE": "1"}))
    rt.start()
    url = rt.server.url
    clients = {name: Client(url, "wtoken") for name in WORKERS}
    for name, info in WORKERS.items():
        clients[name].register(name, info)
    for i in range(args.trials):
        _, job = trial_command.handle(rt.ctx, f"llm-infer gen=1 repeats=1 {ASKS[i % len(ASKS)]}",
                               f"U{i % 3}", "C1")
        assert job, f"trial {i} was not queued"
    ran: dict[int, str] = {}
    lock = threading.Lock()

    def drain(name: str) -> None:
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 2:
            job = clients[name].lease(name, 0.5)
            if not job:
                continue
            idle_since = time.monotonic()
            r = reports.new_report("llm-infer", job["spec"]["params"])
            r.update(status="ok", seconds=0.0)
            clients[name].report(name, job, r)
            with lock:
                ran[job["id"]] = name

    t0 = time.monotonic()
    threads = [threading.Thread(target=drain, args=(n,)) for n in WORKERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0 - 2
    wrong, where = 0, Counter()
    for job_id, name in ran.items():
        route = rt.store.job(job_id)["spec"].get("route")
        wrong += not routing.matches(WORKERS[name], route)
        where[(routing.describe(route or {}) or "(no constraint)", name)] += 1
    rt.stop()
    print(f"{len(ran)} of {args.trials} trials ran in {took:.1f} s on 3 workers; "
          f"on a worker that does not match: {wrong}")
    for (ask, name), n in sorted(where.items()):
        print(f"  {ask:<22} -> {name}: {n}")
    ok = wrong == 0 and len(ran) == args.trials
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
