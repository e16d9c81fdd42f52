"""From a signed `/trial` POST to the report at the (fake) Slack Web API,
through `trialbot serve` and `trialbot-worker` as separate real processes."""
from __future__ import annotations

import json
import os
import subprocess
import time

from conftest import BIN, ROOT
from slackfake import post, signed_headers, slash_body


def test_trial_from_slash_command_to_threaded_report(served_bot, start_worker, fake_slack):
    start_worker(served_bot.url, "gpu-a")
    body = slash_body("llm-infer batch=2 prompt=32 gen=8 repeats=3 stability=0")
    t0 = time.monotonic()
    status, reply = post(served_bot.url + "/slack/events", body,
                         signed_headers("s3cret", body))
    ack_seconds = time.monotonic() - t0
    assert status == 200, reply
    assert ack_seconds < 3, "Slack drops acks after 3 seconds"
    assert reply["response_type"] == "ephemeral"
    assert "Queued as *T1*" in reply["text"]

    started, report = fake_slack.wait_posts(2, timeout=90)
    assert started["channel"] == "C1"
    assert "T1* started on *gpu-a*" in started["text"]
    assert "thread_ts" not in started
    assert report["thread_ts"] == started["_ts"]  # threaded under "started"
    assert "T1 llm-infer ok on gpu-a" in report["text"]
    blocks = json.loads(report["blocks"]) if isinstance(report["blocks"], str) else report["blocks"]
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert any(f.startswith("*Latency per request*\np50") for f in fields)
    assert any(f.startswith("*Host RSS peak*") for f in fields)

    body = slash_body("status T1")
    status, reply = post(served_bot.url + "/slack/events", body, signed_headers("s3cret", body))
    assert "*done* on gpu-a" in reply["text"]
    assert "host RSS peak" in reply["text"]
    time.sleep(1.5)  # past a few outbox wake-ups: nothing is posted twice
    assert len(fake_slack.posts()) == 2
    # the "started" card was edited in place: progress while running, then the summary
    updates = fake_slack.calls_of("chat.update")
    assert updates and all(u["ts"] == started["_ts"] for u in updates)
    assert "T1 llm-infer ok on gpu-a" in updates[-1]["text"]
    blocks = updates[-1]["blocks"]
    actions = [e["action_id"] for b in (json.loads(blocks) if isinstance(blocks, str) else blocks)
               if b["type"] == "actions" for e in b["elements"]]
    assert actions == ["trial_rerun", "trial_add_to_plan"]


def test_failed_trial_is_reported_and_the_worker_keeps_serving(served_bot, start_worker,
                                                              fake_slack):
    start_worker(served_bot.url, "cpu-box")
    for text in ("llm-infer device=cuda", "llm-infer gen=2 repeats=1 stability=0 processes=1"):
        body = slash_body(text)
        assert post(served_bot.url + "/slack/events", body,
                    signed_headers("s3cret", body))[0] == 200
    posts = fake_slack.wait_posts(4, timeout=90)
    failed, ok = posts[1], posts[3]
    assert "T1 llm-infer FAILED (unsupported, phase setup)" in failed["text"]
    assert "device=cuda" in failed["text"]
    assert "T2 llm-infer ok on cpu-box" in ok["text"]


def test_forged_and_stale_requests_are_refused_without_a_job(served_bot, fake_slack):
    body = slash_body("llm-infer")
    forged = signed_headers("wrong-secret", body)
    stale = signed_headers("s3cret", body, timestamp=int(time.time()) - 600)
    unsigned = {"Content-Type": "application/x-www-form-urlencoded"}
    for headers in (forged, stale, unsigned):
        status, _ = post(served_bot.url + "/slack/events", body, headers)
        assert status == 401
    body = slash_body("list")
    status, reply = post(served_bot.url + "/slack/events", body, signed_headers("s3cret", body))
    assert status == 200 and "No trials yet" in reply["text"]


def test_bad_parameter_is_answered_and_creates_no_job(served_bot, fake_slack):
    for text, token in [("llm-infer batch=0", "batch=0"), ("llm-infer batch=-1", "batch=-1"),
                        ("llm-infer dtype=fp8", "dtype=fp8"),
                        ("llm-infer prompt=1e12", "prompt=1e12"),
                        ("llm-finetune", "llm-finetune"), ("llm-infer colour=red", "colour=red")]:
        body = slash_body(text)
        status, reply = post(served_bot.url + "/slack/events", body,
                             signed_headers("s3cret", body))
        assert status == 200
        assert f"`{token}`" in reply["text"] and "Nothing was queued" in reply["text"]
    body = slash_body("list")
    _, reply = post(served_bot.url + "/slack/events", body, signed_headers("s3cret", body))
    assert "No trials yet" in reply["text"]
    assert fake_slack.posts() == []


def test_serve_names_every_missing_setting_and_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLACK_", "TRIALBOT_"))}
    done = subprocess.run([str(BIN / "trialbot"), "serve"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    for name in ("SLACK_BOT_TOKEN", "TRIALBOT_WORKER_TOKEN", "SLACK_SIGNING_SECRET"):
        assert name in lines[0]


def test_serve_on_a_busy_port_says_so(bot_env):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        env = dict(bot_env, TRIALBOT_PORT=str(s.getsockname()[1]))
        done = subprocess.run([str(BIN / "trialbot"), "serve"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "cannot listen on 127.0.0.1" in done.stderr and "Traceback" not in done.stderr


def test_socket_mode_with_a_refused_app_token_exits_2(bot_env, fake_slack):
    fake_slack.errors["apps.connections.open"] = ["invalid_auth"]
    env = dict(bot_env, SLACK_APP_TOKEN="xapp-bad")
    done = subprocess.run([str(BIN / "trialbot"), "serve"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "refused SLACK_APP_TOKEN (invalid_auth)" in done.stderr


def test_socket_mode_with_slack_unreachable_still_serves_workers(bot_env, tmp_path):
    from conftest import Proc, free_port, wait_http
    env = dict(bot_env, SLACK_APP_TOKEN="xapp-x",
               SLACK_API_URL=f"http://127.0.0.1:{free_port()}/api/")
    proc = Proc([str(BIN / "trialbot"), "serve"], env, tmp_path / "sm.log")
    try:
        wait_http(f"http://127.0.0.1:{env['TRIALBOT_PORT']}/healthz")
    finally:
        log = proc.stop()
    assert "Socket Mode connect failed" in log


def test_worker_killed_mid_trial_loses_the_lease_and_another_worker_finishes(
        bot_env, tmp_path, start_worker, fake_slack):
    import signal

    from conftest import Proc, wait_http
    env = dict(bot_env, TRIALBOT_LEASE_SECONDS="3")
    bot = Proc([str(BIN / "trialbot"), "serve"], env, tmp_path / "bot.log")
    url = f"http://127.0.0.1:{env['TRIALBOT_PORT']}"
    try:
        wait_http(url + "/healthz")
        doomed = start_worker(url, "doomed")
        # torch's import and 200 requests outlast the second before the kill; the
        # rescue reruns them all, so no more than that
        body = slash_body("llm-infer gen=2 repeats=200 stability=0 processes=1")
        post(url + "/slack/events", body, signed_headers("s3cret", body))
        started = fake_slack.wait_posts(1, timeout=60)[0]
        assert "started on *doomed*" in started["text"]
        time.sleep(1)  # mid-trial
        doomed.p.send_signal(signal.SIGKILL)
        doomed.p.wait()
        start_worker(url, "rescue")
        posts = fake_slack.wait_posts(2, timeout=120)  # one card, edited; the report
        assert "T1 llm-infer ok on rescue" in posts[1]["text"]
        assert posts[1]["thread_ts"] == started["_ts"]
        edits = [u["text"] for u in fake_slack.calls_of("chat.update")]
        assert any("started on *rescue*" in e for e in edits)
        import sqlite3
        db = sqlite3.connect(env["TRIALBOT_DB"])
        lost = db.execute("select worker, error_class, message from attempts where job = 1 "
                          "order by n").fetchall()
        assert lost[0][:2] == ("doomed", "killed") and "lease expired" in lost[0][2]
        assert lost[1][0] == "rescue"
        assert db.execute("select status, attempts from jobs").fetchone() == ("done", 2)
        body = slash_body("status T1")
        status = post(url + "/slack/events", body, signed_headers("s3cret", body))[1]["text"]
        assert "try 1 on doomed: killed" in status and "lease expired" in status
        assert "try 2 on rescue: ok" in status
    finally:
        bot.stop()


def test_recipe_from_slack_runs_on_the_worker_that_has_it(served_bot, start_worker, fake_slack):
    start_worker(served_bot.url, "plain")
    start_worker(served_bot.url, "papers", "wtoken", "--recipes", str(ROOT / "examples" /
                                                                      "recipes.toml"))

    def slash(text):
        body = slash_body(text)
        return post(served_bot.url + "/slack/events", body, signed_headers("s3cret", body))[1]

    deadline = time.monotonic() + 30
    while "`paper-infer`" not in slash("help")["text"]:  # until "papers" registered
        assert time.monotonic() < deadline
        time.sleep(0.2)
    refused = slash("recipe rm-rf")
    assert "`rm-rf` is not a recipe" in refused["text"] and "paper-infer" in refused["text"]
    bad = slash("recipe paper-infer seq=../../x")
    assert "`seq=../../x`" in bad["text"] and "Nothing was queued" in bad["text"]
    assert "Queued as *T1*" in slash("recipe paper-infer batch=2 seq=64 batches=2")["text"]
    started, report = fake_slack.wait_posts(2, timeout=90)
    assert "started on *papers*" in started["text"]  # "plain" has no recipe file
    assert "T1 recipe paper-infer ok on papers" in report["text"]
    assert "phases: launch" in report["text"] and "code " in report["text"]
