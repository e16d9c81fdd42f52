"""A recipe runs code from the internet: it must not find the worker's token.

A real `trialbot serve`, a real `trialbot-worker` given the token by env,
`--token` or `--token-file`, and a hostile recipe (programs/token_hunt.py)
that reads /proc/PID/{environ,cmdline,mem} of every ancestor and the files
they name. Two setups:

- trial-user (the README's advice): the worker runs as root with
  `--trial-user nobody`;
- same-user: worker and trial share one unprivileged identity, so only
  PR_SET_DUMPABLE (and the token out of environ and argv) stands between
  them. Tests run as root here, so this is uid
  0 with every capability dropped (setpriv): the kernel's checks are those of
  any unprivileged user (same uid, no CAP_SYS_PTRACE).
"""
from __future__ import annotations

import ctypes
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bot.http.tokens import new_token
from conftest import BIN, ROOT, Proc, python_for_nobody, wait_http
from slackfake import post, signed_headers, slash_body

TOKEN = new_token()  # as `trialbot worker-token create` makes them: never a leading `-`
HUNT = Path(__file__).parents[1] / "programs" / "token_hunt.py"
ROOT_USER = os.geteuid() == 0
PR_SET_DUMPABLE = 4


@pytest.fixture
def bot_env(bot_env):
    return dict(bot_env, TRIALBOT_WORKER_TOKEN=TOKEN)  # the bot accepts this test's token


@pytest.fixture
def share():
    """Where the hunt runs and writes: readable and writable by `nobody`."""
    path = Path(tempfile.mkdtemp(prefix="trialbot-hunt-"))
    os.chmod(path, 0o777)
    shutil.copy(HUNT, path / "token_hunt.py")
    os.chmod(path / "token_hunt.py", 0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hidden_runner():
    """This test process made the token, so it holds it: where it shares the
    trial's uid (a non-root run) it hides like the worker, as systemd would."""
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    yield
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def unprivileged() -> list[str]:
    """The prefix that runs a command as this test's user with no privilege:
    as root, uid 0 with every capability dropped."""
    if not ROOT_USER:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop root's capabilities")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]


def recipe_file(share: Path, python: str) -> Path:
    path = share / "recipes.toml"
    path.write_text(f"""
[recipes.hunt]
cwd = "{share}"
argv = ["{python}", "token_hunt.py"]
env = {{ HUNT_REVERSED = "{TOKEN[::-1]}", HUNT_OUT = "{share / 'found.json'}" }}
timeout = "2m"
""")
    os.chmod(path, 0o644)
    return path


def start_worker(url: str, mode: str, source: str, share: Path, recipes: Path,
                 tmp_path: Path) -> Proc:
    args = [str(BIN / "trialbot-worker"), "--server", url, "--name", "hunted",
            "--recipes", str(recipes)]
    env = {k: v for k, v in os.environ.items() if k != "TRIALBOT_WORKER_TOKEN"}
    if source == "env":
        env["TRIALBOT_WORKER_TOKEN"] = TOKEN
    elif source == "argv":
        args += ["--token", TOKEN]
    else:
        token_file = share / "worker.token"  # where `nobody` may look: only its mode guards it
        token_file.write_text(TOKEN + "\n")
        os.chmod(token_file, 0o600)
        args += ["--token-file", str(token_file)]
    if mode == "trial-user":
        args += ["--trial-user", "nobody"]
    else:
        args = [*unprivileged(), *args]
    return Proc(args, env, tmp_path / "worker.log")


def run_hunt(url: str, fake_slack, worker: Proc) -> None:
    def slash(text):
        body = slash_body(text)
        return post(url + "/slack/events", body, signed_headers("s3cret", body))[1]

    deadline = time.monotonic() + 60
    while "`hunt`" not in slash("help")["text"]:  # until the worker registered
        assert worker.p.poll() is None and time.monotonic() < deadline, worker.stop()
        time.sleep(0.2)
    assert "Queued as *T1*" in slash("recipe hunt")["text"]
    report = fake_slack.wait_posts(2, timeout=120)[1]
    assert "T1 recipe hunt ok on hunted" in report["text"], (report["text"], worker.stop())


CASES = [("trial-user", "env"), ("trial-user", "argv"), ("trial-user", "file"),
         ("same-user", "env"), ("same-user", "argv")]


@pytest.mark.parametrize("mode, source", CASES, ids=[f"{m}-{s}" for m, s in CASES])
def test_a_recipe_finds_no_token_in_the_worker(mode, source, served_bot, fake_slack, share,
                                               tmp_path, hidden_runner):
    if mode == "trial-user":
        if not ROOT_USER:
            pytest.skip("--trial-user needs the worker to run as root")
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("no user `nobody` on this machine")
        python = python_for_nobody()
        if python is None:
            pytest.skip("no Python interpreter that `nobody` may run")
    else:
        python = sys.executable
    worker = start_worker(served_bot.url, mode, source, share, recipe_file(share, python),
                          tmp_path)
    try:
        run_hunt(served_bot.url, fake_slack, worker)
        # Read by this test with its own rights: the token is gone, not only unreadable.
        in_clear = [name for name in ("environ", "cmdline")
                    if TOKEN.encode() in Path(f"/proc/{worker.p.pid}/{name}").read_bytes()]
    finally:
        log = worker.stop()
    found = json.loads((share / "found.json").read_text())
    assert found["self_mem"] == "FOUND"  # the hunt does find a token where it can read one
    expected_uid = pwd.getpwnam("nobody").pw_uid if mode == "trial-user" else os.geteuid()
    assert found["uid"] == expected_uid and found["probe_dir_writable"]
    parent = found["ancestors"][0]
    assert parent["pid"] == worker.p.pid  # it reached the worker itself...
    assert parent["cmdline"] == "read, not found"  # ...whose command line anyone may read
    leaks = [(a["pid"], where) for a in found["ancestors"]
             for where, seen in [*((k, a[k]) for k in ("environ", "cmdline", "mem")),
                                 *a["files"].items()] if seen == "FOUND"]
    assert not leaks, (leaks, log)
    assert parent["mem"].startswith("unreadable") and parent["environ"].startswith("unreadable")
    assert not in_clear
    if source == "file":  # the hunt found the file on the command line and was refused it
        assert parent["files"][str(share / "worker.token")] == "unreadable: Permission denied"


PEEK = """
import sys
for name in ("cmdline", "environ", "mem"):
    try:
        open(f"/proc/{sys.argv[1]}/{name}", "rb").close()
        print(name, "read")
    except OSError as exc:
        print(name, type(exc).__name__)
"""


def test_the_bot_hides_its_slack_tokens_from_trials_of_its_user(bot_env, tmp_path):
    """`trialbot serve --local-worker` runs trials as its own user, beside its
    Slack tokens: a process of that user may not open its environ or mem."""
    drop = unprivileged()
    bot = Proc([*drop, str(BIN / "trialbot"), "serve", "--local-worker"], bot_env,
               tmp_path / "bot.log")
    try:
        wait_http(f"http://127.0.0.1:{bot_env['TRIALBOT_PORT']}/healthz")
        peek = subprocess.run([*drop, sys.executable, "-c", PEEK, str(bot.p.pid)],
                              capture_output=True, text=True, timeout=60)
    finally:
        log = bot.stop()
    assert peek.stdout.split() == ["cmdline", "read", "environ", "PermissionError",
                                   "mem", "PermissionError"], (peek.stderr, log)


MEASURE = """
import json
from worker import launcher, secrecy
from worker.spec import parse
hidden = secrecy.undumpable()
r = launcher.run_trial(parse(["llm-infer", "gen=2", "repeats=2", "stability=0", "processes=1"]))
print(json.dumps({"hidden": hidden, "status": r["status"], "samples": r["probe"]["samples"],
                  "rss": r["memory"]["host_rss_peak"]}))
"""


def test_a_hidden_worker_still_measures_its_trial():
    """Non-dumpable and unprivileged, the worker still samples its child from
    outside (psutil, /proc): exec gives the child its own dumpable flag back."""
    drop = unprivileged()
    done = subprocess.run([*drop, sys.executable, "-c", MEASURE], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["hidden"] and seen["status"] == "ok" and seen["samples"] > 0
    assert seen["rss"] > 50 * 2**20  # the child's (torch) RSS, sampled from outside
