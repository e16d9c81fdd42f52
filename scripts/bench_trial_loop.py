#!/usr/bin/env python3
"""Measure the trial loop as a user meets it, on loopback with real processes:

1. ack latency of a signed `/trial` POST to `trialbot serve` (HTTP mode),
2. time from `/trial` to the report arriving at the (fake) Slack Web API for the
   default CPU trial, over a few sequential runs,
3. ack latency of N concurrent slash commands, a read (`status`) and a write
   that queues a job (Bolt dispatched from a thread per request, so they
   should not queue behind each other).

    python scripts/bench_trial_loop.py [--runs 5] [--concurrent 100]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import free_port, wait_http  # noqa: E402
from slackfake import FakeSlack, post, signed_headers, slash_body  # noqa: E402

BIN = Path(sys.executable).parent


def describe(name: str, xs: list[float]) -> str:
    a = np.asarray(xs) * 1000
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return (f"{name}: n={a.size} p50 {p50:.1f} ms, p90 {p90:.1f} ms, p99 {p99:.1f} ms, "
            f"max {a.max():.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--concurrent", type=int, default=100)
    args = ap.parse_args()
    slack, tmp = FakeSlack(), tempfile.mkdtemp(prefix="trialbot-bench-")
    port = free_port()
    env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-bench", SLACK_SIGNING_SECRET="bench",
               TRIALBOT_WORKER_TOKEN="wbench", SLACK_API_URL=slack.api_url,
               TRIALBOT_DB=f"{tmp}/bench.db", TRIALBOT_PORT=str(port),
               TRIALBOT_HOST="127.0.0.1")
    env.pop("SLACK_APP_TOKEN", None)
    url = f"http://127.0.0.1:{port}"
    log = open(f"{tmp}/procs.log", "wb")
    bot = subprocess.Popen([BIN / "trialbot", "serve"], env=env, stdout=log, stderr=log)
    worker = subprocess.Popen([BIN / "trialbot-worker", "--server", url, "--name", "bench"],
                              env=dict(os.environ, TRIALBOT_WORKER_TOKEN="wbench"),
                              stdout=log, stderr=log)
    try:
        wait_http(url + "/healthz")
        time.sleep(1)  # let the worker register and start its long-poll
        acks, loops = [], []
        for _ in range(args.runs):
            before = len(slack.posts())
            body = slash_body("llm-infer")
            t0 = time.monotonic()
            status, reply = post(url + "/slack/events", body, signed_headers("bench", body))
            acks.append(time.monotonic() - t0)
            assert status == 200 and "Queued" in reply["text"], reply
            slack.wait_posts(before + 2, timeout=300)
            loops.append(time.monotonic() - t0)
        print("default CPU trial: `/trial llm-infer` (batch=1 prompt=64 gen=16 layers=2 "
              "hidden=256; at least 5 measured requests, until IQR/median < 5% or 3 s)")
        print(describe("ack latency, one at a time", acks))
        print(f"/trial -> report posted: n={len(loops)} mean {np.mean(loops):.2f} s, "
              f"min {min(loops):.2f} s, max {max(loops):.2f} s")

        def one(text):
            body = slash_body(text)
            t0 = time.monotonic()
            status, _ = post(url + "/slack/events", body, signed_headers("bench", body))
            assert status == 200
            return time.monotonic() - t0
        for text in ("status T1", "llm-infer gen=1 repeats=1 stability=0"):
            with ThreadPoolExecutor(args.concurrent) as pool:
                lat = list(pool.map(one, [text] * args.concurrent))
            print(describe(f"ack latency, {args.concurrent} concurrent `/trial {text}`", lat))
    finally:
        for p in (worker, bot):
            p.terminate()
            p.wait(10)
        slack.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
