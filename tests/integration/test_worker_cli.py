"""`trialbot-worker` as a user runs it on a box before wiring it up."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import BIN, ROOT, python_for_nobody
from worker.catalog import PROCESSES


def worker(*args, env=None):
    return subprocess.run([str(BIN / "trialbot-worker"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env=env)


def test_trial_json_prints_the_report():
    done = worker("trial", "llm-infer", "gen=2", "repeats=2", "stability=0", "--json")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["schema"] == "trialbot.trial/1" and r["status"] == "ok"
    assert r["params"]["gen"] == 2 and r["processes"]["count"] == PROCESSES
    assert r["latency"]["count"] == 2 * PROCESSES  # at least 2 in each fresh process


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


def test_wrong_token_from_a_file_is_refused_and_a_loose_file_is_named(served_bot, tmp_path):
    token = tmp_path / "token"
    token.write_text("wrong\n")
    token.chmod(0o644)
    done = worker("--server", served_bot.url, "--token-file", str(token), "--name", "x")
    assert done.returncode == 2 and "check --token-file" in done.stderr
    assert f"{token} may be read by other users (mode 644): `chmod 600 {token}`" in done.stderr


def test_a_token_on_the_command_line_is_warned_about(served_bot):
    done = worker("--server", served_bot.url, "--token", "wrong", "--name", "x")
    assert "every user of this machine may read it (ps)" in done.stderr
    assert "--token-file FILE or env TRIALBOT_WORKER_TOKEN" in done.stderr
    if os.geteuid() == 0:
        assert "trials run as root (no --trial-user)" in done.stderr


@pytest.mark.parametrize("content, says", [
    (None, "no such file"),
    ("", "is empty; write the worker's token into it"),
    ("tok1\ntok2\n", "holds more than one token"),
])
def test_bad_token_files_exit_2_naming_the_file(tmp_path, content, says):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    done = worker("--server", "http://127.0.0.1:9", "--token-file", str(path))
    assert done.returncode == 2 and f"--token-file {path}" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr


def test_a_directory_or_two_sources_of_token_are_refused(tmp_path):
    done = worker("--server", "http://127.0.0.1:9", "--token-file", str(tmp_path))
    assert done.returncode == 2 and "is a directory" in done.stderr
    done = worker("--server", "http://127.0.0.1:9", "--token-file", str(tmp_path),
                  "--token", "x")
    assert done.returncode == 2 and "give the token once" in done.stderr


@pytest.mark.parametrize("user, extra, says", [
    ("no-such-user-x", (), "no such user on this machine"),
    ("root", (), "is root (uid 0)"),
    ("nobody", ("--executor", "slurm", "--partition", "p"), "--trial-user applies to trials "
                                                            "run here"),
])
def test_trial_users_the_worker_cannot_use_are_refused(tmp_path, user, extra, says):
    done = worker("--server", "http://127.0.0.1:9", "--trial-user", user, *extra,
                  env=dict(os.environ, TRIALBOT_WORKER_TOKEN="wtoken"))
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr


def test_only_a_root_worker_may_switch_users(tmp_path):
    """A real non-root worker; `nobody` may not run the venv's Python where it
    sits under a 0700 /root, so the system's interpreter with this checkout."""
    python = python_for_nobody() if os.geteuid() == 0 else sys.executable
    if python is None:
        pytest.skip("no Python interpreter that `nobody` may run")
    as_nobody = {"user": "nobody"} if os.geteuid() == 0 else {}
    token = Path(tempfile.mkdtemp()) / "token"
    token.write_text("wtoken")
    token.chmod(0o600)
    if as_nobody:
        shutil.chown(token.parent, "nobody")
        shutil.chown(token, "nobody")
    try:
        done = subprocess.run(
            [python, "-m", "worker.cli", "--server", "http://127.0.0.1:9", "--token-file",
             str(token), "--trial-user", "nobody"], capture_output=True, text=True, cwd="/",
            env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60, **as_nobody)
    finally:
        shutil.rmtree(token.parent)
    assert done.returncode == 2 and "only a worker running as root" in done.stderr


@pytest.mark.parametrize("grace", ["-1", "soon", "nan", "1e9"])
def test_a_stop_grace_that_is_not_seconds_is_refused(grace):
    for args, env in ((["--stop-grace", grace], {}), ([], {"TRIALBOT_STOP_GRACE": grace})):
        done = worker("--server", "http://127.0.0.1:9", *args,
                      env=dict(os.environ, TRIALBOT_WORKER_TOKEN="wtoken", **env))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert f"--stop-grace {grace!r} (or TRIALBOT_STOP_GRACE) must be seconds from 0 to " \
               "86400" in done.stderr
