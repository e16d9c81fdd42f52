#!/usr/bin/env python3
"""Issue 6's delivery target: with the (fake) Slack Web API answering 429 and
500 for a while, every stored message is delivered exactly once, in order,
afterwards — through the real Outbox thread, SlackTransport and slack_sdk's
RateLimitErrorRetryHandler, over loopback HTTP.

    python scripts/bench_outbox.py [--trials 100] [--outage 20]

Each trial stores what a real one does: its card, an in-place edit of the card
and a threaded report. The outage answers 429 (Retry-After: 1) and 500 in turn.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from bot.outbox import Outbox, SlackTransport  # noqa: E402
from bot.slack_app import web_client  # noqa: E402
from bot.store import Store  # noqa: E402
from slackfake import FakeSlack  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--outage", type=float, default=20, help="seconds of 429/500 answers")
    args = ap.parse_args()
    slack = FakeSlack()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(os.path.join(tmp, "bench.db"))
        with store.db.conn:
            for i in range(1, args.trials + 1):
                card = store._add_message({"channel": "C1", "kind": "started",
                                           "text": f"card {i}"}, i)
                store._add_message({"channel": "C1", "kind": "summary", "update_of": card,
                                    "text": f"summary {i}"}, i)
                store._add_message({"channel": "C1", "kind": "report", "thread_of": card,
                                    "text": f"report {i}"}, i)
        slack.outage = (time.monotonic() + args.outage, [429, 500])
        t0 = time.monotonic()
        box = Outbox(store, SlackTransport(web_client("xoxb-bench", slack.api_url)),
                     max_backoff=4, update_interval=0)
        box.start()
        want = 3 * args.trials
        while time.monotonic() - t0 < args.outage + 600:
            left = store.db.execute("select count(*) from outbox where sent is null").fetchone()[0]
            if not left:
                break
            time.sleep(0.2)
        took = time.monotonic() - t0
        box.stop()
        box.join(10)
        given_up = store.db.execute("select count(*) from outbox where given_up is not null"
                                    ).fetchone()[0]
    posts = [a["text"] for a in slack.posts()]
    edits = [(a["ts"], a["text"]) for a in slack.calls_of("chat.update")]
    failed = slack.calls_of("failed")
    by_ts = {a["_ts"]: a["text"] for a in slack.posts()}
    expected_posts = [t for i in range(1, args.trials + 1) for t in (f"card {i}", f"report {i}")]
    once = sorted(posts) == sorted(expected_posts) and len(edits) == args.trials
    in_order = posts == expected_posts
    edits_right = all(by_ts.get(ts) == f"card {text.split()[1]}" for ts, text in edits)
    threads = all(a["thread_ts"] and by_ts[a["thread_ts"]] == a["text"].replace("report", "card")
                  for a in slack.posts() if a["text"].startswith("report"))
    print(f"{args.trials} trials = {want} messages; outage {args.outage:g} s answering "
          f"429/500 ({sum(1 for f in failed if f['status'] == 429)}×429, "
          f"{sum(1 for f in failed if f['status'] == 500)}×500)")
    print(f"all delivered {took:.1f} s after the outage began; posts {len(posts)} "
          f"(expected {len(expected_posts)}), edits {len(edits)} (expected {args.trials}), "
          f"given up {given_up}")
    print(f"exactly once: {once}; in order: {in_order}; edits hit their card: {edits_right}; "
          f"reports threaded under their card: {threads}")
    ok = once and in_order and edits_right and threads and not given_up
    print("PASS" if ok else "FAIL")
    slack.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
