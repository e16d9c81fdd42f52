#!/usr/bin/env python3
"""Stops that hand work back, with real processes on loopback and the fake
Slack Web API (tests/slackfake.py).

(a) Workers restarted under load. `trialbot serve` and `--workers`
    `trialbot-worker`s; `--trials` quick trials queued at once; every
    `--every` s one worker (in turn) gets SIGTERM, exits, and is started again
    under its name. Once per `--grace` (the workers' --stop-grace; 0 hands
    every interrupted trial back, 6 is the default). Checked: every trial
    done, its card and its report each posted once, no trial failed, no
    attempt charged to a restart (one attempt row per trial, `ok`).
    Reported: restarts, trials handed back (their cards say so), each stop's
    seconds from SIGTERM to exit, and the exit codes.
(b) The bot restarted during delivery, `--cycles` times: `trialbot serve`
    starts, trials are queued by signed `/trial`s and leased and reported
    through the worker API (a card, its final edit and a report each), in
    `--channels` channels whose Slack answers take `--delay` s; SIGTERM
    comes as soon as a Slack call is in flight. A last start delivers the
    rest. Checked: every stored post sent exactly once, none left unsent.
    Reported: each stop's seconds from SIGTERM to exit and its exit code.

    python scripts/bench_stops.py [--trials 20] [--workers 2] [--every 10]
        [--grace 0,6] [--cycles 10] [--channels 3] [--delay 0.5]
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from conftest import free_port, wait_http  # noqa: E402
from slackfake import FakeSlack, post, signed_headers, slash_body  # noqa: E402
from worker import report as reports  # noqa: E402
from worker.client import Client  # noqa: E402

BIN = Path(sys.executable).parent
SECRET, TOKEN = "bench", "wbench"
# ~2.5 s on a quiet CPU, mostly the child's torch import: one decode of a one-layer model
TRIAL = ("llm-infer gen=1 repeats=1 stability=0 layers=1 hidden=64 heads=2 kv_heads=1 "
         "vocab=256 malloc=glibc")


class Bot:
    def __init__(self, tmp: str, slack: FakeSlack):
        self.port, self.tmp = free_port(), tmp
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-bench", SLACK_SIGNING_SECRET=SECRET,
                        TRIALBOT_WORKER_TOKEN=TOKEN, SLACK_API_URL=slack.api_url,
                        TRIALBOT_DB=f"{tmp}/bench.db", TRIALBOT_PORT=str(self.port),
                        TRIALBOT_HOST="127.0.0.1", TRIALBOT_RUN_EVERYONE="1")
        self.env.pop("SLACK_APP_TOKEN", None)
        self.log = open(f"{tmp}/bot.log", "ab")
        self.proc = None

    def start(self) -> None:
        self.proc = subprocess.Popen([BIN / "trialbot", "serve"], env=self.env,
                                     stdout=self.log, stderr=self.log)
        wait_http(self.url + "/healthz", timeout=60)

    def stop(self) -> tuple[float, int]:
        """SIGTERM: seconds until it exited, and its exit code."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(60)
        return time.monotonic() - t0, rc

    def query(self, sql: str, args=()) -> list[tuple]:
        with sqlite3.connect(self.env["TRIALBOT_DB"]) as db:
            return db.execute(sql, args).fetchall()

    def slash(self, text: str, channel: str = "C1") -> None:
        body = slash_body(text, channel=channel)
        status, reply = post(self.url + "/slack/events", body, signed_headers(SECRET, body))
        assert status == 200 and "Queued as" in reply["text"], reply


def start_worker(bot: Bot, name: str, grace: str) -> subprocess.Popen:
    log = open(f"{bot.tmp}/{name}.log", "ab")
    args = [BIN / "trialbot-worker", "--server", bot.url, "--name", name]
    if grace:
        args += ["--stop-grace", grace]
    return subprocess.Popen(args, env=dict(os.environ, TRIALBOT_WORKER_TOKEN=TOKEN),
                            stdout=log, stderr=log)


def describe(stops: list[tuple[float, int]]) -> str:
    seconds = sorted(s for s, _ in stops)
    if not seconds:
        return "no stops"
    return (f"{len(stops)} stops, SIGTERM to exit: median {seconds[len(seconds) // 2]:.2f} s, "
            f"max {seconds[-1]:.2f} s; exit codes {dict(Counter(rc for _, rc in stops))}")


def workers_restarted(args, grace: str) -> bool:
    slack, tmp = FakeSlack(), tempfile.mkdtemp(prefix="trialbot-stops-")
    bot = Bot(tmp, slack)
    bot.start()
    names = [f"w{i + 1}" for i in range(args.workers)]
    procs = {n: start_worker(bot, n, grace) for n in names}
    stops: list[tuple[float, int]] = []
    t0 = time.monotonic()
    try:
        time.sleep(2)  # registered
        for _ in range(args.trials):
            bot.slash(TRIAL)
        turn, next_stop = 0, time.monotonic() + args.every
        while bot.query("select count(*) from jobs where status in ('queued', 'running')")[0][0]:
            assert time.monotonic() - t0 < args.timeout, "trials did not end in time"
            if time.monotonic() >= next_stop:
                name = names[turn % len(names)]
                started = time.monotonic()
                procs[name].send_signal(signal.SIGTERM)
                rc = procs[name].wait(60)
                stops.append((time.monotonic() - started, rc))
                procs[name] = start_worker(bot, name, grace)
                turn, next_stop = turn + 1, next_stop + args.every
            time.sleep(0.1)
        wall = time.monotonic() - t0
        time.sleep(3)  # the last messages delivered
        print(f"(a) --stop-grace {grace or 'default'}: {args.trials} trials, {args.workers} "
              f"workers, one SIGTERMed every {args.every:g} s: all ended in {wall:.1f} s; "
              f"{describe(stops)}")
        return _check_trials(bot, slack, args.trials)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(60)
        bot.stop()
        slack.close()


def _check_trials(bot: Bot, slack: FakeSlack, n: int) -> bool:
    jobs = bot.query("select status, attempts from jobs")
    rows = bot.query("select job, status, error_class from attempts order by job, n")
    per_job = Counter(job for job, _, _ in rows)
    cards = Counter(m.group(1) for p in slack.posts() if "thread_ts" not in p
                    for m in [re.search(r"\*(T\d+)\* started on", p["text"])] if m)
    reported = Counter(m.group(1) for p in slack.posts() if "thread_ts" in p
                       for m in [re.match(r"(T\d+) llm-infer", p["text"])] if m)
    backs = sum(log.read_text().count("handed back to the queue")
                for log in Path(bot.tmp).glob("w*.log"))
    trials = set(re.findall(r"(T\d+) handed back by", Path(bot.tmp, "bot.log").read_text()))
    problems = []
    if Counter(s for s, _ in jobs) != Counter({"done": n}):
        problems.append(f"jobs by status {dict(Counter(s for s, _ in jobs))}")
    if any(a != 1 for _, a in jobs) or any(c != 1 for c in per_job.values()) \
            or len(per_job) != n or any(s != "ok" for _, s, _ in rows):
        problems.append(f"attempts charged: {[r for r in rows if r[1] != 'ok']}, leases "
                        f"counted {dict(Counter(a for _, a in jobs))}")
    if len(cards) != n or set(cards.values()) != {1}:
        problems.append(f"cards posted {dict(cards)}")
    if len(reported) != n or set(reported.values()) != {1}:
        problems.append(f"reports posted {dict(reported)}")
    print(f"    {n} trials done, {len(reported)} reports posted once each; "
          f"{backs} hand-backs at a stop (of {len(trials)} trials), "
          f"{sum(c - 1 for c in per_job.values())} attempts charged to stops")
    for p in problems:
        print(f"    PROBLEM: {p}")
    return not problems


def bot_restarted(args) -> bool:
    slack, tmp = FakeSlack(), tempfile.mkdtemp(prefix="trialbot-stops-")
    channels = [f"C{i + 1}" for i in range(args.channels)]
    bot = Bot(tmp, slack)
    stops: list[tuple[float, int]] = []
    try:
        for cycle in range(args.cycles):
            for c in channels:
                slack.delays[c] = 0  # conversations.info in the /trial ack is not slow
            bot.start()
            worker = Client(bot.url, TOKEN)
            worker.register("bench-w", {})
            for c in channels:
                bot.slash("llm-infer gen=1 repeats=1 stability=0", channel=c)
            before = len(slack.received)
            for c in channels:
                slack.delays[c] = args.delay
            for _ in channels:
                job = worker.lease("bench-w", 1)
                r = reports.new_report("llm-infer", job["spec"]["params"])
                r["status"] = "ok"
                worker.report("bench-w", job, r)
            deadline = time.monotonic() + 30
            while len(slack.received) == before:  # a Slack call in flight
                assert time.monotonic() < deadline, "nothing was sent"
                time.sleep(0.005)
            stops.append(bot.stop())
        for c in channels:
            slack.delays[c] = 0
        bot.start()
        deadline = time.monotonic() + 60
        while bot.query("select count(*) from outbox where sent is null and given_up is null"
                        )[0][0]:
            assert time.monotonic() < deadline, "the outbox was not emptied"
            time.sleep(0.1)
        stops.append(bot.stop())
        return _check_posts(bot, slack, args, stops)
    finally:
        if bot.proc and bot.proc.poll() is None:
            bot.stop()
        slack.close()


def _check_posts(bot: Bot, slack: FakeSlack, args, stops) -> bool:
    stored = Counter((c, t) for c, t in bot.query(
        "select channel, text from outbox where update_of is null and file is null"))
    posted = Counter((p["channel"], p["text"]) for p in slack.posts())
    twice = {k: v for k, v in posted.items() if v > 1}
    lost = [k for k in stored if k not in posted]
    unsent = bot.query("select count(*) from outbox where sent is null")[0][0]
    edits = len(slack.calls_of("chat.update"))
    print(f"(b) the bot SIGTERMed {args.cycles} times with a Slack call in flight "
          f"({args.channels} channels, {args.delay:g} s per answer): {sum(stored.values())} "
          f"posts stored, {sum(posted.values())} made, {len(twice)} twice, {len(lost)} lost, "
          f"{unsent} unsent; {edits} card edits; {describe(stops)}")
    return not twice and not lost and not unsent and all(rc == 0 for _, rc in stops)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--grace", default="0,6",
                    help="the workers' --stop-grace, comma-separated runs ('' = the default)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.5)
    args = ap.parse_args()
    ok = all([workers_restarted(args, g) for g in args.grace.split(",")])
    ok = bot_restarted(args) and ok
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
