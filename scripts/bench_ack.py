#!/usr/bin/env python3
"""Ack latency of a burst of signed `/trial` requests to `trialbot serve` (issue 29):
N concurrent requests in one channel, each round in a new channel, so every
round starts with the channel check's cache cold.

The client must not take the CPU the bot needs, so it is one thread: the N
sockets are opened and the N signed bodies built before the round; then all
N are sent in one loop (the barrier) and a selector reads the answers. Each
request is timed from its send to its response's headers. The bot's CPU time
per request is its process's user + system time over the round (psutil), /N.

    python scripts/bench_ack.py [--concurrent 100] [--rounds 5]

After each round it checks that every answer was 200 and named its trial,
that N jobs were stored, and that none is left held once Slack's answer came
(the channel check runs after the ack); at the end, that Slack was asked
about each channel once.
"""
from __future__ import annotations

import argparse
import os
import selectors
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from conftest import free_port, wait_http  # noqa: E402
from slackfake import FakeSlack, signed_headers, slash_body  # noqa: E402

BIN = Path(sys.executable).parent
SECRET, TOKEN = "bench", "wbench"
QUICK = "llm-infer gen=1 repeats=1 stability=0"


def request_bytes(port: int, channel: str) -> bytes:
    body = slash_body(QUICK, channel=channel)
    head = "".join(f"{k}: {v}\r\n" for k, v in signed_headers(SECRET, body).items())
    return (f"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n{body}").encode()


def one_round(port: int, n: int, channel: str) -> tuple[list[float], list[bytes]]:
    """Send n requests at once on n open sockets; (seconds to headers, answers)."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    payloads = [request_bytes(port, channel) for _ in range(n)]
    time.sleep(0.5)  # the server has accepted every connection (a thread each)
    sel = selectors.DefaultSelector()
    sent, got, answers = [0.0] * n, [0.0] * n, [b""] * n
    for i, (s, data) in enumerate(zip(socks, payloads)):
        sent[i] = time.perf_counter()
        s.sendall(data)
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
    open_ = n
    deadline = time.monotonic() + 30
    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            i = key.data
            chunk = key.fileobj.recv(65536)
            if not got[i] and b"\r\n\r\n" in answers[i] + chunk:
                got[i] = time.perf_counter()
            answers[i] += chunk
            if not chunk or _complete(answers[i]):
                sel.unregister(key.fileobj)
                open_ -= 1
    for s in socks:
        s.close()
    return [g - s if g else float("inf") for s, g in zip(sent, got)], answers


def _complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def count(db: str, sql: str, args=()) -> int:
    with sqlite3.connect(db, timeout=30) as c:
        return c.execute(sql, args).fetchone()[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrent", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted")
    ap.add_argument("--py-spy", metavar="FILE",
                    help="record the bot with py-spy (raw, idle threads left out) over the "
                         "counted rounds into FILE")
    args = ap.parse_args()
    slack, tmp = FakeSlack(), tempfile.mkdtemp(prefix="trialbot-ack-")
    port, db = free_port(), f"{tmp}/ack.db"
    env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-bench", SLACK_SIGNING_SECRET=SECRET,
               TRIALBOT_WORKER_TOKEN=TOKEN, SLACK_API_URL=slack.api_url, TRIALBOT_DB=db,
               TRIALBOT_PORT=str(port), TRIALBOT_HOST="127.0.0.1", TRIALBOT_RUN_USERS="U1",
               TRIALBOT_ADMINS="U1")
    env.pop("SLACK_APP_TOKEN", None)
    log = open(f"{tmp}/bot.log", "ab")
    bot = subprocess.Popen([BIN / "trialbot", "serve"], env=env, stdout=log, stderr=log)
    failures, lat, cpu = [], [], []
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        proc = psutil.Process(bot.pid)
        spy = None
        for r in range(args.warmup + args.rounds):
            if r == args.warmup and args.py_spy:
                spy = subprocess.Popen(["py-spy", "record", "-p", str(bot.pid), "-f", "raw",
                                        "-o", args.py_spy, "-r", "2000"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            ms, used = timed_round(port, db, proc, args, r, failures)
            if r >= args.warmup:
                lat += list(ms)
                cpu.append(used / args.concurrent * 1000)
        if spy:
            spy.send_signal(2)  # SIGINT: py-spy writes the file
            spy.wait(30)
        totals(np.array(lat), cpu, len(slack.calls_of("conversations.info")), args, failures)
    finally:
        bot.terminate()
        bot.wait(10)
        slack.close()
    print("PASS" if not failures else f"FAIL: {', '.join(failures)}")
    return 1 if failures else 0


def timed_round(port: int, db: str, proc, args, r: int, failures: list):
    """Round `r` on a cold channel, said: (latencies in ms, the bot's CPU seconds)."""
    channel = f"CBENCH{r}"  # a channel not checked yet: the cache is cold
    before = sum(proc.cpu_times()[:2])
    took, answers = one_round(port, args.concurrent, channel)
    used = sum(proc.cpu_times()[:2]) - before
    ms = np.array(took) * 1000
    ok = sum(a.startswith(b"HTTP/1.1 200") and b"Queued as *T" in a for a in answers)
    deadline = time.monotonic() + 10
    while count(db, "select count(*) from jobs where channel = ? and status = 'held'",
                [channel]) and time.monotonic() < deadline:
        time.sleep(0.05)
    made = count(db, "select count(*) from jobs where channel = ?", [channel])
    held = count(db, "select count(*) from jobs where channel = ? and status = 'held'",
                 [channel])
    counted = r >= args.warmup
    print(f"{'round' if counted else 'warm-up'} {r + 1 - args.warmup if counted else r + 1}"
          f": {ok}/{args.concurrent} answered 200, p50 {np.percentile(ms, 50):.1f} ms, "
          f"p99 {np.percentile(ms, 99):.1f} ms, max {ms.max():.1f} ms; bot CPU "
          f"{used / args.concurrent * 1000:.2f} ms/request; jobs {made}, left held {held}")
    if ok != args.concurrent or made != args.concurrent or held:
        failures.append(f"round {r + 1}")
    return ms, used


def totals(lat, cpu: list, asked: int, args, failures: list) -> None:
    """The counted rounds together, and Slack asked once per channel."""
    if asked != args.warmup + args.rounds:  # once per channel, however many waited
        failures.append(f"conversations.info asked {asked} times")
    print(f"all {args.rounds} rounds of {args.concurrent}: p50 {np.percentile(lat, 50):.1f} ms,"
          f" p99 {np.percentile(lat, 99):.1f} ms, max {lat.max():.1f} ms; bot CPU "
          f"{np.median(cpu):.2f} ms/request (median of rounds); "
          f"conversations.info calls {asked} (channels {args.warmup + args.rounds})")


if __name__ == "__main__":
    raise SystemExit(main())
