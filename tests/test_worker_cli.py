"""`trialbot-worker` as a user runs it on a box before wiring it up."""
import json
import subprocess

from conftest import BIN, ROOT


def worker(*args):
    return subprocess.run([str(BIN / "trialbot-worker"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_trial_json_prints_the_report():
    done = worker("trial", "llm-infer", "gen=2", "repeats=2", "stability=0", "--json")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["schema"] == "trialbot.trial/1" and r["status"] == "ok"
    assert r["params"]["gen"] == 2 and r["latency"]["count"] == 2


def test_bad_word_exits_2_with_usage_and_runs_nothing():
    done = worker("trial", "llm-infer", "dtype=fp8")
    assert done.returncode == 2 and done.stdout == ""
    assert "`dtype=fp8`" in done.stderr and "usage: trialbot-worker trial llm-infer" in done.stderr


def test_serve_without_server_or_token_says_what_is_missing():
    done = subprocess.run([str(BIN / "trialbot-worker")], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "--server" in done.stderr and "--token" in done.stderr


def test_wrong_token_is_refused_clearly(served_bot):
    done = worker("--server", served_bot.url, "--token", "wrong", "--name", "x")
    assert done.returncode == 2 and "check --token" in done.stderr
