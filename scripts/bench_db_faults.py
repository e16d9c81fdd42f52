#!/usr/bin/env python3
"""The database's faults against a running `trialbot serve` (issue 29). Needs
root (a tmpfs mount, chattr):

1. full: the database on a 4 MiB tmpfs that another file fills;
2. locked: another process holds BEGIN EXCLUSIVE (an open `sqlite3` session);
3. read-only: the database's files made immutable (chattr +i) while the bot
   has them open: its writes fail as on a filesystem gone read-only.

Each lasts --seconds (30). A signed /trial goes every 2 s during it (the
operator's 13 in 30 s), then one every 0.25 s once it ends. Every answer must
come within 3 s and be true: "Queued as *Tn*" only for a trial that is
stored (and then queued), "Nothing was queued" only where nothing was
stored. /healthz must answer 503 with the reason during the fault and 200
after it; the bot is never restarted, and the recovery is the seconds from
the fault's end to the first trial queued.

    sudo python scripts/bench_db_faults.py [--seconds 30] [--only full|locked|read-only]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from conftest import free_port, wait_http  # noqa: E402
from slackfake import FakeSlack, post, signed_headers, slash_body  # noqa: E402

BIN = Path(sys.executable).parent
SECRET = "bench"
QUICK = "llm-infer gen=1 repeats=1 stability=0"
ANSWER_BY = 3.0  # Slack's limit for a slash command's answer
HOLD = ("import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('begin exclusive')\n"
        "print('held', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n")


class Bot:
    def __init__(self, db: str, slack: FakeSlack, log: str):
        self.db, self.port = db, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-bench", SLACK_SIGNING_SECRET=SECRET,
                   TRIALBOT_WORKER_TOKEN="wbench", SLACK_API_URL=slack.api_url,
                   TRIALBOT_DB=db, TRIALBOT_PORT=str(self.port), TRIALBOT_HOST="127.0.0.1",
                   TRIALBOT_RUN_USERS="U1", TRIALBOT_ADMINS="U1")
        env.pop("SLACK_APP_TOKEN", None)
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([BIN / "trialbot", "serve"], env=env, stdout=self.log,
                                     stderr=self.log)
        wait_http(self.url + "/healthz")

    def trial(self) -> tuple[float, str]:
        body = slash_body(QUICK, channel="CFAULT")
        t0 = time.monotonic()
        status, reply = post(self.url + "/slack/events", body, signed_headers(SECRET, body))
        took = time.monotonic() - t0
        return took, reply["text"] if status == 200 and isinstance(reply, dict) \
            else f"HTTP {status}: {reply}"

    def health(self) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def stored(db: str) -> dict[int, str]:
    with contextlib.closing(sqlite3.connect(db, timeout=60)) as c:  # closed: the umount
        return dict(c.execute("select id, status from jobs where channel = 'CFAULT'"))


def run(name: str, bot: Bot, start, end, seconds: float) -> list[str]:
    """Send /trial during the fault and after it; the failures found."""
    bot.trial()  # the channel's first trial: Slack is asked, after which trials queue at once
    deadline = time.monotonic() + 10
    while "held" in stored(bot.db).values() and time.monotonic() < deadline:
        time.sleep(0.1)
    before = set(stored(bot.db))
    answers, failures = [], []
    start()
    t_end = time.monotonic() + seconds
    health = None
    while time.monotonic() < t_end:
        answers.append(bot.trial())
        if health is None and len(answers) == 3:
            health = bot.health()
        time.sleep(max(0.0, 2.0 - answers[-1][0]))
    end()
    ended, recovered = time.monotonic(), None
    while time.monotonic() - ended < 120:
        answers.append(bot.trial())
        if "Queued as" in answers[-1][1]:
            recovered = time.monotonic() - ended
            break
        time.sleep(0.25)
    after = bot.health()
    deadline = time.monotonic() + 30
    while "held" in stored(bot.db).values() and time.monotonic() < deadline:
        time.sleep(0.1)
    told = {int(m.group(1)) for _, text in answers
            if (m := re.search(r"Queued as \*T(\d+)\*", text))}
    refused = [text for _, text in answers if "Nothing was queued" in text]
    others = [text for _, text in answers if "Queued as" not in text
              and "Nothing was queued" not in text]
    jobs = stored(bot.db)
    new = set(jobs) - before
    slow = [took for took, _ in answers if took > ANSWER_BY]
    reasons = sorted({re.sub(r"\s+", " ", t.split(":", 3)[-1])[:70] for t in refused})
    print(f"{name}: {len(answers)} /trial, answered in {min(a for a, _ in answers):.2f}-"
          f"{max(a for a, _ in answers):.2f} s; told queued {len(told)}, told not queued "
          f"{len(refused)}, other {len(others)}; stored {len(new)} "
          f"({sorted(set(jobs[i] for i in new))})")
    print(f"  refusals said: {reasons}")
    print(f"  /healthz during: {health}; after: {after}")
    print("  recovery: " + (f"{recovered:.2f} s after the fault ended, no restart"
                            if recovered is not None else "none within 120 s"))
    if slow:
        failures.append(f"{name}: {len(slow)} answers over {ANSWER_BY} s")
    if new != told:
        failures.append(f"{name}: told queued {sorted(told)}, stored {sorted(new)}")
    if any(jobs[i] == "held" for i in new):
        failures.append(f"{name}: trials left held")
    if others:
        failures.append(f"{name}: answers that say neither: {others[:2]}")
    if not health or health[0] != 503 or after[0] != 200 or recovered is None:
        failures.append(f"{name}: health {health} then {after}, recovery {recovered}")
    return failures


def full(tmp: str, slack: FakeSlack, seconds: float) -> list[str]:
    mount = f"{tmp}/full"
    os.makedirs(mount)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount], check=True)
    try:
        bot = Bot(f"{mount}/bot.db", slack, f"{tmp}/full.log")
        filler = f"{mount}/filler"

        def fill():
            with open(filler, "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:  # ENOSPC: the disk is full
                    pass
        try:
            return run("full", bot, fill, lambda: os.remove(filler), seconds)
        finally:
            bot.stop()
    finally:
        subprocess.run(["umount", mount], check=False)


def locked(tmp: str, slack: FakeSlack, seconds: float) -> list[str]:
    bot = Bot(f"{tmp}/locked.db", slack, f"{tmp}/locked.log")
    holder = []

    def hold():
        holder.append(subprocess.Popen([sys.executable, "-c", HOLD, bot.db, str(seconds)],
                                       stdout=subprocess.PIPE, text=True))
        assert holder[0].stdout.readline() == "held\n"
    try:
        return run("locked", bot, hold, lambda: holder[0].wait(), seconds)
    finally:
        bot.stop()


def read_only(tmp: str, slack: FakeSlack, seconds: float) -> list[str]:
    os.makedirs(f"{tmp}/ro")
    bot = Bot(f"{tmp}/ro/bot.db", slack, f"{tmp}/ro.log")
    files = [f"{tmp}/ro/{f}" for f in ("bot.db", "bot.db-wal", "bot.db-shm")]
    try:
        return run("read-only", bot, lambda: subprocess.run(["chattr", "+i", *files], check=True),
                   lambda: subprocess.run(["chattr", "-i", *files], check=True), seconds)
    finally:
        subprocess.run(["chattr", "-i", *files], check=False)
        bot.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--only", choices=("full", "locked", "read-only"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_db_faults: run as root (a tmpfs mount and chattr)", file=sys.stderr)
        return 2
    slack, tmp = FakeSlack(), tempfile.mkdtemp(prefix="trialbot-faults-", dir="/var/tmp")
    failures = []
    try:
        for name, scenario in (("full", full), ("locked", locked), ("read-only", read_only)):
            if args.only in (None, name):
                failures += scenario(tmp, slack, args.seconds)
    finally:
        slack.close()
    for failure in failures:
        print("FAIL", failure)
    print("PASS" if not failures else f"FAIL ({len(failures)})")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
