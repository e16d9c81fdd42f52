#!/usr/bin/env python3
"""The outbox's delivery guarantees, through the real Courier thread,
SlackTransport and slack_sdk's RateLimitErrorRetryHandler, over loopback
HTTP against the fake Slack Web API:

1. outage: with Slack answering 429 (Retry-After: 1) and 500 in turn for
   `--outage` seconds, every stored message is delivered exactly once, in
   order within its channel, afterwards;
2. one channel refusing, one slow: beside `--channels` working channels, a
   channel the bot is not in (not_in_channel) and one whose every answer takes
   `--slow` seconds. The working channels' messages are timed with and
   without the other two (interleaved, `--pairs` times; medians and spread),
   and the refused channel's messages must reach their requester through the
   response_url, the channel tried once per trial.

    python scripts/bench_outbox.py [--trials 100] [--outage 20] [--pairs 3]

Each trial stores what a real one does: its card, an in-place edit of the
card and a threaded report.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from bot.delivery.outbox import Courier  # noqa: E402
from bot.slack.app import web_client  # noqa: E402
from bot.slack.transport import SlackTransport  # noqa: E402
from bot.store import Store  # noqa: E402
from slackfake import FakeSlack  # noqa: E402


def store_trials(store: Store, trials: int, channels: list[str], url: str | None = None,
                 first: int = 1) -> None:
    """Each trial a job row (its requester, its response_url) and its three messages."""
    with store.tx():
        for i in range(first, first + trials):
            channel = channels[(i - first) % len(channels)]
            job = store.add_jobs([{"workload": "llm-infer", "params": {}}], [f"trial {i}"], "U1",
                                 channel, response_url=url and f"{url}-{i}")[0]["id"]
            card = store._add_message({"channel": channel, "kind": "started",
                                       "text": f"card {i}"}, job)
            store._add_message({"channel": channel, "kind": "summary", "update_of": card,
                                "text": f"summary {i}"}, job)
            store._add_message({"channel": channel, "kind": "report", "thread_of": card,
                                "text": f"report {i}"}, job)


def drain(store: Store, box: Courier, until, limit: float) -> float:
    t0 = time.monotonic()
    box.start()
    while time.monotonic() - t0 < limit and not until():
        time.sleep(0.05)
    took = time.monotonic() - t0
    box.stop()
    box.join(30)
    return took


def checks(slack: FakeSlack, channels: list[str], n: int) -> dict:
    """Exactly once, in order per channel, edits on their card, reports in its thread."""
    by_ts = {a["_ts"]: a["text"] for a in slack.posts()}
    out = {"once": True, "in_order": True, "edits": True, "threads": True}
    for channel in channels:
        posts = [a for a in slack.posts() if a["channel"] == channel]
        ids = [int(a["text"].split()[1]) for a in posts if a["text"].startswith("card")]
        want = [t for i in ids for t in (f"card {i}", f"report {i}")]
        out["once"] &= (sorted(a["text"] for a in posts) == sorted(want)
                        and len(set(ids)) == len(ids))
        out["in_order"] &= ids == sorted(ids) and [a["text"] for a in posts] == want
    edits = [e for e in slack.calls_of("chat.update") if e["channel"] in channels]
    out["once"] &= len(edits) == n and len({e["text"] for e in edits}) == n
    out["edits"] = all(by_ts.get(e["ts"]) == f"card {e['text'].split()[1]}" for e in edits)
    out["threads"] = all(a.get("thread_ts") and by_ts[a["thread_ts"]] == a["text"].replace(
        "report", "card") for a in slack.posts() if a["text"].startswith("report"))
    return out


def outage(trials: int, seconds: float, channels: list[str]) -> bool:
    slack = FakeSlack()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(os.path.join(tmp, "bench.db"))
        store_trials(store, trials, channels)
        slack.outage = (time.monotonic() + seconds, [429, 500])
        box = Courier(store, SlackTransport(web_client("xoxb-bench", slack.api_url)),
                      max_backoff=4, update_interval=0)
        took = drain(store, box, lambda: not store.unsent(limit=1), seconds + 600)
        given_up = store.db.execute("select count(*) from outbox where given_up is not null"
                                    ).fetchone()[0]
    failed = slack.calls_of("failed")
    c = checks(slack, channels, trials)
    print(f"1. outage: {trials} trials = {3 * trials} messages in {len(channels)} channels; "
          f"{seconds:g} s of 429/500 ({sum(f['status'] == 429 for f in failed)}×429, "
          f"{sum(f['status'] == 500 for f in failed)}×500)")
    print(f"   all delivered {took:.1f} s after the outage began; given up {given_up}; "
          + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in c.items()))
    slack.close()
    return all(c.values()) and not given_up


def beside(trials: int, good: list[str], troubled: bool, slow: float) -> tuple[float, dict]:
    """Seconds until the good channels' messages are all delivered; with
    `troubled`, a refused and a slow channel's trials are queued first."""
    slack = FakeSlack()
    slack.channel_errors["CBAD"] = "not_in_channel"
    slack.delays["CSLOW"] = slow
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(os.path.join(tmp, "bench.db"))
        if troubled:  # queued first: a global order would put them at the head
            store_trials(store, 10, ["CBAD"], slack.api_url + "respond", first=1001)
            store_trials(store, 5, ["CSLOW"], first=2001)
        store_trials(store, trials, good)
        want = 2 * trials

        def good_done():
            return sum(p["channel"] in good for p in slack.posts()) >= want

        box = Courier(store, SlackTransport(web_client("xoxb-bench", slack.api_url)),
                      max_backoff=4, update_interval=0)
        took = drain(store, box, good_done, 300)
        info = {"good": checks(slack, good, trials)}
        if troubled:
            box = Courier(store, SlackTransport(web_client("xoxb-bench", slack.api_url)),
                          max_backoff=4, update_interval=0)
            drain(store, box, lambda: not store.unsent(limit=1), 300)  # the rest
            responds = [c for m, c in slack.calls if m.startswith("respond-")]
            refused = [c for c in slack.calls_of("refused") if c["channel"] == "CBAD"]
            info.update(responds=len(responds), refused=len(refused),
                        slow=sum(p["channel"] == "CSLOW" for p in slack.posts()))
    slack.close()
    return took, info


def main() -> int:
    logging.disable(logging.ERROR)  # the outbox logs every refusal and retry it meets
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--outage", type=float, default=20, help="seconds of 429/500 answers")
    ap.add_argument("--channels", type=int, default=4, help="working channels")
    ap.add_argument("--slow", type=float, default=2.0, help="seconds per answer in CSLOW")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    good = [f"C{i}" for i in range(1, args.channels + 1)]
    ok = outage(args.trials, args.outage, good)

    alone, troubled, last = [], [], {}
    for _ in range(args.pairs):  # interleaved: the shared machine's drift hits both alike
        alone.append(beside(args.trials, good, False, args.slow)[0])
        took, last = beside(args.trials, good, True, args.slow)
        troubled.append(took)
        ok &= all(last["good"].values())
        ok &= last["responds"] == 30 and last["refused"] == 10 and last["slow"] == 10
    def spread(xs):
        return f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"

    print(f"2. {args.trials} trials in {args.channels} working channels, delivered: alone "
          f"{spread(alone)}; beside 10 trials in a channel answering not_in_channel and 5 in "
          f"one answering after {args.slow:g} s, queued ahead of them: {spread(troubled)} "
          f"({args.pairs} interleaved pairs)")
    print(f"   refused channel: tried {last['refused']} times for 10 trials; its 30 messages "
          f"reached the requester by response_url: {last['responds']}; slow channel's 10 "
          f"posts delivered: {last['slow']}; working channels "
          + "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in last["good"].items()))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
