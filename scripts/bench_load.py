#!/usr/bin/env python3
"""Load and fault scenarios against real processes on loopback (issue 7):

1. N concurrent signed `/trial` requests to `trialbot serve`: ack p50/p99, and
   exactly N jobs created;
2. requests that must be refused: forged, unsigned, stale and stale-replayed
   (401), a fresh replay of one request (deduplicated by its trigger_id);
3. W workers draining J queued jobs through the real worker API (each "trial"
   reports at once: this measures the queue, not torch), with the bot killed
   with SIGKILL part-way and restarted: every job ends exactly once.

Bounded: about a minute on a 2-core box with the defaults.

    python scripts/bench_load.py [--concurrent 100] [--jobs 1000] [--workers 4]
"""
from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from conftest import free_port, wait_http  # noqa: E402
from slackfake import FakeSlack, post, signed_headers, slash_body  # noqa: E402
from worker import report as reports  # noqa: E402
from worker.client import ApiError, Client  # noqa: E402

BIN = Path(sys.executable).parent
SECRET, TOKEN = "bench", "wbench"
QUICK = "llm-infer gen=1 repeats=1 stability=0"


def start_bot(env: dict, log) -> subprocess.Popen:
    bot = subprocess.Popen([BIN / "trialbot", "serve"], env=env, stdout=log, stderr=log)
    wait_http(f"http://127.0.0.1:{env['TRIALBOT_PORT']}/healthz")
    return bot


def slash(url: str, text: str, headers=None, body=None) -> tuple[int, float]:
    body = body or slash_body(text)
    t0 = time.monotonic()
    status, _ = post(url + "/slack/events", body, headers or signed_headers(SECRET, body))
    return status, time.monotonic() - t0


def count(db: str, sql: str) -> int:
    with sqlite3.connect(db, timeout=30) as c:
        return c.execute(sql).fetchone()[0]


def drain(url: str, name: str, stop: threading.Event, done: list) -> None:
    """A worker that reports every leased job at once; retries while the bot is down."""
    client = Client(url, TOKEN)
    while not stop.is_set():
        try:
            client.register(name, {"cpus": 1})
            job = client.lease(name, 1)
            if job is None:
                continue
            r = reports.new_report("llm-infer", job["spec"]["params"])
            r.update(status="ok", seconds=0.0)
            client.report(name, job, r)
            done.append(job["id"])
        except ApiError as exc:
            if exc.status < 500 and exc.status != 409:
                raise
        except OSError:
            time.sleep(0.2)  # the bot is down: try again


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrent", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    slack, tmp = FakeSlack(), tempfile.mkdtemp(prefix="trialbot-load-")
    port = free_port()
    db = f"{tmp}/load.db"
    env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-bench", SLACK_SIGNING_SECRET=SECRET,
               TRIALBOT_WORKER_TOKEN=TOKEN, SLACK_API_URL=slack.api_url, TRIALBOT_DB=db,
               TRIALBOT_PORT=str(port), TRIALBOT_HOST="127.0.0.1", TRIALBOT_RUN_USERS="U1",
               TRIALBOT_ADMINS="U1", TRIALBOT_LEASE_SECONDS="5")
    env.pop("SLACK_APP_TOKEN", None)
    url = f"http://127.0.0.1:{port}"
    log = open(f"{tmp}/bot.log", "ab")
    bots = [start_bot(env, log)]  # the last one runs: part 3 kills and restarts it
    failures = []
    try:
        made = concurrent_trials(url, db, args.concurrent, failures)
        after = refusals(url, db, made, failures)
        drain_through_kill(url, db, args, after, (env, log, bots), failures)
    finally:
        bots[-1].terminate()
        bots[-1].wait(10)
        slack.close()
    print("PASS" if not failures else f"FAIL: {', '.join(failures)}")
    return 1 if failures else 0


def concurrent_trials(url: str, db: str, n: int, failures: list) -> int:
    """1. `n` concurrent /trial: each acked, each a job. The jobs made."""
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: slash(url, QUICK), range(n)))
    lat = np.array([s for _, s in results]) * 1000
    made = count(db, "select count(*) from jobs")
    acked = sum(s == 200 for s, _ in results)
    print(f"1. {n} concurrent signed /trial: acked {acked}"
          f", p50 {np.percentile(lat, 50):.0f} ms, p99 {np.percentile(lat, 99):.0f} ms, "
          f"max {lat.max():.0f} ms; jobs created {made} (want {n})")
    if made != n or max(lat) > 3000:
        failures.append("concurrent /trial")
    return made


def refusals(url: str, db: str, made: int, failures: list) -> int:
    """2. Refused and deduplicated requests. The jobs after."""
    body = slash_body(QUICK)
    forged = signed_headers("wrong", body)
    unsigned = {"Content-Type": "application/x-www-form-urlencoded"}
    stale = signed_headers(SECRET, body, timestamp=int(time.time()) - 600)
    refused = [slash(url, "", h, body)[0] for h in (forged, unsigned, stale)]
    replay_body = slash_body(QUICK)
    first = slash(url, "", None, replay_body)[0]
    replays = [slash(url, "", None, replay_body)[0] for _ in range(5)]
    after = count(db, "select count(*) from jobs")
    print(f"2. refused: forged/unsigned/stale -> {refused} (want 401 each); one request "
          f"sent 6 times -> {[first, *replays]}, jobs +{after - made} (want +1)")
    if refused != [401] * 3 or after - made != 1:
        failures.append("refusals")
    return after


def drain_through_kill(url: str, db: str, args, after: int, bot: tuple, failures: list) -> None:
    """3. Queue J jobs, drain with W workers, SIGKILL the bot part-way.
    `bot`: (env, log, the bots started), the restarted one appended."""
    env, log, bots = bot
    with sqlite3.connect(db) as c:
        spec = c.execute("select spec, words from jobs limit 1").fetchone()
        c.executemany("insert into jobs (workload, spec, words, user, channel, status, "
                      "created) values ('llm-infer', ?, ?, 'U1', 'C1', 'queued', ?)",
                      [(spec[0], spec[1], time.time())] * (args.jobs - after))
    total = count(db, "select count(*) from jobs")
    stop, done = threading.Event(), []
    threads = [threading.Thread(target=drain, args=(url, f"w{i}", stop, done), daemon=True)
               for i in range(args.workers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while count(db, "select count(*) from jobs where status = 'done'") < total // 3:
        time.sleep(0.05)
    bots[-1].send_signal(signal.SIGKILL)
    bots[-1].wait()
    killed_at = count(db, "select count(*) from jobs where status = 'done'")
    bots.append(start_bot(env, log))
    deadline = time.monotonic() + 300
    while count(db, "select count(*) from jobs where status in ('queued', 'running')"):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    took = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(10)
    _drain_result(db, args.workers, total, took, killed_at, done, failures)


def _drain_result(db: str, workers: int, total: int, took: float, killed_at: int,
                  done: list, failures: list) -> None:
    ended = count(db, "select count(*) from jobs where status = 'done'")
    lost = total - ended
    twice = count(db, "select count(*) from (select job from attempts where status = 'ok' "
                      "group by job having count(*) > 1)")
    leased_twice = len(done) - len(set(done))
    print(f"3. {workers} workers drained {total} jobs in {took:.1f} s "
          f"({total / took:.0f} jobs/s), the bot SIGKILLed after {killed_at} and restarted: "
          f"ended {ended}, lost {lost}, reported twice {twice}, "
          f"accepted by the bot twice {leased_twice}")
    if lost or twice or leased_twice:
        failures.append("drain")


if __name__ == "__main__":
    raise SystemExit(main())
