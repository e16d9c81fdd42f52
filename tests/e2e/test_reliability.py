"""Nothing lost, nothing twice: Slack's retries and doubled requests, the bot
killed with SIGKILL mid-work, and a child that floods its output."""
import json
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import BIN, ROOT, Proc, wait_http
from slackfake import post, signed_headers, slash_body

QUICK = ("llm-infer gen=2 repeats=1 stability=0 layers=1 hidden=64 heads=2 kv_heads=1 vocab=256 "
         "malloc=glibc processes=1")  # one pass, one process: these test jobs


def _jobs(db) -> int:
    return db.execute("select count(*) from jobs").fetchone()[0]


def test_a_retried_or_doubled_slash_command_queues_one_job(bot):
    body = slash_body(QUICK)  # one trigger_id, as Slack sends it again on a retry
    url = bot.server.url + "/slack/events"
    status, first = post(url, body, signed_headers("s3cret", body))
    assert status == 200 and "Queued as *T1*" in first["text"]
    retry = dict(signed_headers("s3cret", body), **{"X-Slack-Retry-Num": "1",
                                                    "X-Slack-Retry-Reason": "http_timeout"})
    status, again = post(url, body, retry)
    assert status == 200 and "Already received" in again["text"] and "T1" in again["text"]
    # the same request arriving 20 times at once still queues one job
    doubled = slash_body(QUICK)
    with ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(lambda _: post(url, doubled, signed_headers("s3cret", doubled)),
                                range(20)))
    assert all(s == 200 for s, _ in replies)
    assert sum("Queued as" in r["text"] for _, r in replies) == 1
    assert _jobs(bot.store.db) == 2


def test_bot_killed_mid_work_restarts_with_every_job_ending_exactly_once(
        bot_env, tmp_path, start_worker, fake_slack):
    env = dict(bot_env, TRIALBOT_LEASE_SECONDS="4")
    url = f"http://127.0.0.1:{env['TRIALBOT_PORT']}"
    bot = Proc([str(BIN / "trialbot"), "serve"], env, tmp_path / "bot1.log")
    try:
        wait_http(url + "/healthz")
        start_worker(url, "w1")
        texts = [QUICK.replace("repeats=1", "repeats=400")] + [QUICK] * 3  # T1 runs a while
        for text in texts:  # four separate requests: four trigger_ids
            body = slash_body(text)
            assert post(url + "/slack/events", body, signed_headers("s3cret", body))[0] == 200
        db = sqlite3.connect(env["TRIALBOT_DB"])
        deadline = time.monotonic() + 60
        while db.execute("select status from jobs where id = 1").fetchone()[0] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        bot.p.send_signal(signal.SIGKILL)  # mid-trial, three more queued
        bot.p.wait()
        assert _jobs(db) == 4
        bot = Proc([str(BIN / "trialbot"), "serve"], env, tmp_path / "bot2.log")
        wait_http(url + "/healthz")
        deadline = time.monotonic() + 180
        while db.execute("select count(*) from jobs where status = 'done'").fetchone()[0] < 4:
            assert time.monotonic() < deadline, db.execute("select id, status from jobs").fetchall()
            time.sleep(0.5)
        # every job ended once: one report each, no job run twice after it ended
        def reports():
            return sorted(p["text"].split()[0] for p in fake_slack.posts()
                          if " llm-infer ok on " in p["text"])
        while len(reports()) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # a duplicate would arrive now
        assert reports() == ["T1", "T2", "T3", "T4"]
        finishes = db.execute("select job, count(*) from attempts where status = 'ok' "
                              "group by job").fetchall()
        assert sorted(finishes) == [(1, 1), (2, 1), (3, 1), (4, 1)]
    finally:
        bot.stop()


def test_a_child_flooding_its_output_is_cut_and_the_worker_stays_healthy(tmp_path):
    """200 MB on one line: the worker reads it in bounded pieces and keeps a tail,
    so its own memory stays flat (it grew ~800 MiB before reads were bounded)."""
    (tmp_path / "flood.py").write_text(
        "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(200):\n"
        "    sys.stdout.write(chunk)\nsys.stdout.write('\\nthe end\\n')\n")
    (tmp_path / "recipes.toml").write_text(
        f'[recipes.flood]\ncwd = "{tmp_path}"\nargv = ["{{python}}", "flood.py"]\n'
        'timeout = "2m"\n')
    worker = (
        "import json, resource, sys\n"
        "from worker import launcher, recipes\nfrom worker.spec import parse\n"
        f"book = recipes.load({str(tmp_path / 'recipes.toml')!r})\n"
        "spec = parse(['recipe', 'flood'], {'flood': book['flood'].workload()})\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "r = launcher.run_trial(spec, recipes=book)\n"
        "grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
        "print(json.dumps({'status': r['status'], 'tail': r['output_tail'], 'grew_kib': grew}))\n")
    done = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok" and out["tail"].endswith("the end")
    assert len(out["tail"]) <= 4000
    assert out["grew_kib"] < 100 * 1024, out["grew_kib"]
