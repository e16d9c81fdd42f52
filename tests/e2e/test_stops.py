"""Stops that hand work back: `trialbot-worker` and `trialbot serve` stopped
by SIGTERM (docker stop, systemd) or Ctrl-C, as real processes against a real
bot and the fake Slack Web API."""
from __future__ import annotations

import signal
import sqlite3
import sys
import time

import pytest

from conftest import BIN, Proc, wait_http
from slackfake import post, signed_headers, slash_body
from worker.client import Client

# about 2.5 s on a quiet CPU, plus ~16 ms a repeat up to run_cap (3 s by default)
QUICK = ("llm-infer gen=2 stability=0 layers=1 hidden=64 heads=2 kv_heads=1 vocab=256 "
         "malloc=glibc processes=1")


def slash(url: str, text: str) -> dict:
    body = slash_body(text)
    status, reply = post(url + "/slack/events", body, signed_headers("s3cret", body))
    assert status == 200 and "Queued as" in reply["text"], reply
    return reply


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return found


def query(env: dict, sql: str) -> list[tuple]:
    with sqlite3.connect(env["TRIALBOT_DB"]) as db:
        return db.execute(sql).fetchall()


GATE = """
import os, sys, time
open(sys.argv[1], "w").close()  # running
while not os.path.exists(sys.argv[2]):  # the test says when it may end
    time.sleep(0.05)
"""


def gate_recipes(tmp_path) -> tuple[str, object, object]:
    """A recipe that runs until the test lets it end: its length is the test's
    to set on any box, and a rerun after the gate opened ends at once."""
    (tmp_path / "gate.py").write_text(GATE)
    running, open_ = tmp_path / "running", tmp_path / "open"
    recipes = tmp_path / "recipes.toml"
    recipes.write_text(f"""
[recipes.gate]
cwd = "{tmp_path}"
argv = ["{sys.executable}", "gate.py", "{running}", "{open_}"]
timeout = "2m"
""")
    return str(recipes), running, open_


def test_sigterm_mid_trial_hands_the_trial_back_and_another_worker_runs_it(
        served_bot, bot_env, start_worker, fake_slack, monkeypatch, tmp_path):
    recipes, running, open_ = gate_recipes(tmp_path)
    monkeypatch.setenv("TRIALBOT_STOP_GRACE", "60")
    w1 = start_worker(served_bot.url, "w1", "wtoken", "--recipes", recipes)
    monkeypatch.delenv("TRIALBOT_STOP_GRACE")
    wait_for(lambda: "no such topic" not in post_help(served_bot.url), 30, "w1 did not register")
    slash(served_bot.url, "recipe gate")
    assert "started on *w1*" in fake_slack.wait_posts(1)[0]["text"]
    wait_for(running.exists, 30, "the recipe did not start")  # mid-trial
    w1.p.send_signal(signal.SIGTERM)
    time.sleep(1)
    assert w1.p.poll() is None, "the grace: the trial may still end and report"
    assert query(bot_env, "select status, worker from jobs") == [("running", "w1")]
    w1.p.send_signal(signal.SIGINT)  # a second signal: stop now
    t0 = time.monotonic()
    assert w1.p.wait(10) == 0
    assert time.monotonic() - t0 < 3
    # back in the queue at once: no lease left to expire, no attempt charged
    assert query(bot_env, "select status, worker, attempts from jobs") == [("queued", None, 0)]
    assert query(bot_env, "select * from attempts") == []
    edit = wait_for(lambda: [u for u in fake_slack.calls_of("chat.update")
                             if "returned to the queue" in u["text"]], 10, "no card edit")
    assert "worker *w1* stopped (SIGTERM) before the trial ended" in edit[-1]["text"]
    assert "handed back to the queue (SIGTERM)" in w1.stop()

    open_.touch()  # the rerun may end
    start_worker(served_bot.url, "w2", "wtoken", "--recipes", recipes)
    report = fake_slack.wait_posts(2, timeout=90)[1]
    assert "T1 recipe gate ok on w2" in report["text"], report["text"]
    assert query(bot_env, "select worker, status from attempts") == [("w2", "ok")]
    assert query(bot_env, "select status, attempts from jobs") == [("done", 1)]


def post_help(url: str) -> str:
    """`/trial help recipe gate`: "no such topic" until a worker registers it."""
    body = slash_body("help recipe gate")
    return post(url + "/slack/events", body, signed_headers("s3cret", body))[1]["text"]


def test_a_trial_that_ends_within_the_grace_is_reported_as_usual(
        served_bot, bot_env, start_worker, fake_slack):
    w1 = start_worker(served_bot.url, "w1", "wtoken", "--stop-grace", "60")
    slash(served_bot.url, QUICK + " repeats=1")
    fake_slack.wait_posts(1)
    w1.p.send_signal(signal.SIGTERM)  # docker stop, as the trial runs
    assert w1.p.wait(60) == 0
    assert "T1 llm-infer ok on w1" in fake_slack.wait_posts(2)[1]["text"]
    assert query(bot_env, "select status, attempts from jobs") == [("done", 1)]
    assert query(bot_env, "select worker, status from attempts") == [("w1", "ok")]


def sending_a_card(bot_env: dict, log, fake_slack, delay: float) -> tuple[Proc, str]:
    """`trialbot serve` with a trial's card in flight: Slack answers in `delay` s."""
    url = f"http://127.0.0.1:{bot_env['TRIALBOT_PORT']}"
    bot = Proc([str(BIN / "trialbot"), "serve"], bot_env, log)
    wait_http(url + "/healthz")
    worker = Client(url, "wtoken")
    worker.register("w1", {})
    slash(url, "llm-infer")
    fake_slack.delays["C1"] = delay
    # T1 is held until Slack says the bot may post in C1 (its answer is slow too):
    # the long-poll returns once it is queued. Its card goes to the outbox.
    assert worker.lease("w1", 15)["trial"] == "T1"
    wait_for(lambda: "chat.postMessage" in fake_slack.received, 10, "the card was not sent")
    return bot, url


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_bot_stopped_mid_send_completes_the_call_and_posts_nothing_twice(
        bot_env, tmp_path, fake_slack, sig):
    bot, url = sending_a_card(bot_env, tmp_path / "bot1.log", fake_slack, 3)
    t0 = time.monotonic()
    bot.p.send_signal(sig)
    assert bot.p.wait(15) == 0, bot.stop()
    assert 1 < time.monotonic() - t0 < 6  # it waited for Slack's answer, then exited
    assert len(fake_slack.posts()) == 1
    assert query(bot_env, "select count(*) from outbox where sent is null") == [(0,)]
    bot.stop()

    fake_slack.delays["C1"] = 0
    again = Proc([str(BIN / "trialbot"), "serve"], bot_env, tmp_path / "bot2.log")
    try:
        wait_http(url + "/healthz")
        time.sleep(2)  # past the restarted outbox's first rounds
        assert len(fake_slack.posts()) == 1, "the card was posted twice"
    finally:
        again.stop()


def test_a_second_signal_stops_the_bot_at_once(bot_env, tmp_path, fake_slack):
    bot, _ = sending_a_card(bot_env, tmp_path / "bot.log", fake_slack, 10)  # a slow answer
    bot.p.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert bot.p.poll() is None  # waiting for Slack's answer
    t0 = time.monotonic()
    bot.p.send_signal(signal.SIGTERM)
    assert bot.p.wait(10) == 1 and time.monotonic() - t0 < 2
    assert "SIGTERM again: exiting now" in bot.stop()
