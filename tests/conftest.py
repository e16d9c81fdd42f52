from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from slackfake import FakeSlack  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TIERS = ("unit", "integration", "e2e")


def pytest_configure(config):
    """A test file outside the tiers stops the run, so none goes untiered."""
    here = ROOT / "tests"
    loose = [str(p.relative_to(ROOT)) for p in sorted(here.rglob("test_*.py"))
             if p.relative_to(here).parts[0] not in TIERS]
    if loose:
        raise pytest.UsageError(f"{', '.join(loose)}: a test file goes in tests/unit, "
                                "tests/integration or tests/e2e (docs/testing.md)")


def pytest_collection_modifyitems(items):
    """Each test marked with its tier, its directory under tests/ (`-m unit`)."""
    here = ROOT / "tests"
    for item in items:
        if here in item.path.parents and item.path.relative_to(here).parts[0] in TIERS:
            item.add_marker(item.path.relative_to(here).parts[0])


@pytest.fixture
def fake_slack():
    server = FakeSlack()
    yield server
    server.close()


def bolt_runtime(db: str, fake_slack, policy):
    """The Bolt app and HTTP server in-process on `db`, started; stop() it."""
    from bot.app.runtime import Runtime
    from bot.slack.app import build_app, web_client
    from bot.slack.transport import SlackTransport
    client = web_client("xoxb-test", fake_slack.api_url)
    rt = Runtime(db, "wtoken", SlackTransport(client), policy=policy)
    rt.server.bolt_app = build_app(rt.ctx, client, "s3cret")
    rt.start()
    return rt


@pytest.fixture
def bot(tmp_path, fake_slack):
    """The Bolt app and HTTP server in-process, on a fresh database."""
    from bot.access import Policy
    # U1 may run trials, UADMIN is the admin (the default lets nobody run)
    rt = bolt_runtime(str(tmp_path / "l.db"), fake_slack,
                      Policy(run_users=frozenset({"U1"}), admins=frozenset({"UADMIN"})))
    yield rt
    rt.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout: float = 15, what: str = ""):
    """check()'s first truthy value, polled until `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or check}")


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


def python_for_nobody() -> str | None:
    """An interpreter `nobody` can run (the venv's may sit under a 0700 /root)."""
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        try:
            if candidate and subprocess.run([candidate, "-c", ""], user="nobody",
                                            capture_output=True, timeout=30).returncode == 0:
                return candidate
        except (OSError, KeyError):  # not root, or no such user
            continue
    return None


class Proc:
    """A real child process with its output kept in a file for failures."""

    def __init__(self, args, env, log: Path):
        self.log = log
        self.file = open(log, "wb")
        self.p = subprocess.Popen(args, env=env, stdout=self.file, stderr=subprocess.STDOUT,
                                  cwd=ROOT)

    def stop(self) -> str:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.file.close()
        return self.log.read_text()


@pytest.fixture
def bot_env(tmp_path, fake_slack):
    port = free_port()
    env = dict(os.environ, SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET="s3cret",
               TRIALBOT_WORKER_TOKEN="wtoken", SLACK_API_URL=fake_slack.api_url,
               TRIALBOT_DB=str(tmp_path / "bot.db"), TRIALBOT_PORT=str(port),
               TRIALBOT_HOST="127.0.0.1", TRIALBOT_RUN_USERS="U1", TRIALBOT_ADMINS="UADMIN")
    for name in ("SLACK_APP_TOKEN", "TRIALBOT_CONFIG", "TRIALBOT_RUN_CHANNELS",
                 "TRIALBOT_RUN_USERGROUPS", "TRIALBOT_ADMIN_USERGROUPS", "TRIALBOT_RUN_EVERYONE"):
        env.pop(name, None)
    return env


@pytest.fixture
def served_bot(bot_env, tmp_path):
    """`trialbot serve` in HTTP mode, as a real process."""
    proc = Proc([str(BIN / "trialbot"), "serve"], bot_env, tmp_path / "bot.log")
    url = f"http://127.0.0.1:{bot_env['TRIALBOT_PORT']}"
    try:
        wait_http(url + "/healthz")
    except AssertionError:
        raise AssertionError(proc.stop())
    proc.url = url
    yield proc
    proc.stop()


@pytest.fixture
def start_worker(tmp_path):
    procs = []

    def start(url: str, name: str = "w1", token: str = "wtoken", *extra: str):
        # The token in the environment, as the README says (--token shows in ps).
        proc = Proc([str(BIN / "trialbot-worker"), "--server", url, "--name", name, *extra],
                    dict(os.environ, TRIALBOT_WORKER_TOKEN=token), tmp_path / f"{name}.log")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.stop()
