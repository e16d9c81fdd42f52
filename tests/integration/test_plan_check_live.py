"""`/plan NAME check` end to end (#34): the bot on loopback, a real worker
agent leasing the check through the worker API, a real git repository made
here, fetched into the worker's clone cache and read without running it;
the answer posted in the plan's channel, stored per plan, the empty
checklist items filled, `show` and `advise` reading it."""
import datetime as dt
import io
import subprocess
import sys
import threading
import time
import zipfile
from unittest import mock

import pytest

from bot import commands
from bot.access import Policy
from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime
from bot.http.workerapi import WorkerApi
from worker.agent import Agent
from worker.client import ApiError, Client
from worker.spec import parse

TODAY = dt.date(2026, 12, 4)
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


def git_repo(path, files: dict[str, str]) -> str:
    """A local repository with one commit of `files`; its full hash."""
    path.mkdir()
    subprocess.run([*GIT, "init", "-q", str(path)], check=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    subprocess.run([*GIT, "-C", str(path), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(path), "commit", "-qm", "first"], check=True)
    return subprocess.run([*GIT, "-C", str(path), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


FLASH = {"requirements.txt": "torch==2.1.2\ntransformers==4.36.2\nflash-attn==2.4.0\n",
         "pyproject.toml": "[project\nname = 'snap'\n",  # does not parse: named, not fatal
         # The method written into FlashAttention-2's forward (SnapKV's case).
         "snap/monkeypatch.py": "import flash_attn\n"
                                "from transformers.models.llama import modeling_llama\n"
                                "def forward(self, x):\n    return x\n"
                                "modeling_llama.LlamaFlashAttention2.forward = forward\n"}


def wheel(folder, name, version, tag):
    """A wheel uv reads: METADATA and WHEEL in a zip whose name carries its tags."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name.replace('-', '_')}-{version}-{tag}.whl", "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\n"
                                       f"Version: {version}\n")
        z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\n"
                                    f"Root-Is-Purelib: false\nTag: {tag}\n")
        z.writestr(f"{info}/RECORD", "")


@pytest.fixture
def bot(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIALBOT_ENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TRIALBOT_CHECK_LOCAL", "1")  # its repositories are local git ones
    # The pins resolve against wheels made here, never an index: torch 2.1.2 has
    # one for Python 3.8 only, so no Python this worker runs finds one.
    found = tmp_path / "wheels"
    found.mkdir()
    wheel(found, "torch", "2.1.2", "cp38-cp38-manylinux_2_17_x86_64")
    wheel(found, "transformers", "4.36.2", "py3-none-any")
    wheel(found, "flash-attn", "2.4.0", "py3-none-any")
    (tmp_path / "index").mkdir()  # an empty index in place of PyPI (uv has no UV_NO_INDEX)
    monkeypatch.setenv("UV_DEFAULT_INDEX", (tmp_path / "index").as_uri())
    monkeypatch.setenv("UV_FIND_LINKS", str(found))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    rt = Runtime(str(tmp_path / "a.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)),
                 policy=Policy(run_everyone=True))
    rt.start()
    agent = Agent(Client(rt.server.url, "tok"), "cpu-1")
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    deadline = time.monotonic() + 20
    while not rt.store.workers():  # registered
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield rt
    agent.stop()
    rt.stop()


def say(rt, text, request=None):
    return commands.plan(rt.ctx, text, "U1", "C1", TODAY, request=request)["text"]


def answered(rt, check_id, timeout=60):
    deadline = time.monotonic() + timeout
    while rt.store.check(check_id)["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, "the worker never answered"
        time.sleep(0.05)
    return rt.store.check(check_id)


def posted(rt):
    return [m["text"] for m in rt.store.db["outbox"].rows]


def test_a_check_fetches_reads_posts_fills_and_feeds_show_and_advise(bot, tmp_path):
    commit = git_repo(tmp_path / "snap", FLASH)
    say(bot, f"new snap gpu=T4 platform=cuda repo=\"{tmp_path / 'snap'} @ {commit[:7]}\" "
             "framework=\"torch 2.1 (set by hand)\"")
    out = say(bot, "snap check", request="trigger-1")
    assert "C1" in out and commit[:7] in out
    assert "Already received" in say(bot, "snap check", request="trigger-1")  # Slack retried
    check = answered(bot, 1)
    assert check["status"] == "done" and check["commit_read"] == commit
    assert check["result"]["cached"] is False
    text = next(t for t in posted(bot) if "Compatibility check C1" in t)
    assert "*Target T4*: cannot run" in text and "snap/monkeypatch.py:5" in text
    assert "A100" in text and "requirements.txt" in text and "a short trial on T4" in text
    assert "`pyproject.toml`: a dependency file that does not parse" in text
    assert "(at line 1, column 9)" in text  # the parser's own words
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"Pins that do not resolve for Python {python} on x86_64-unknown-linux-gnu" in text
    assert f"torch==2.1.2 (requirements.txt:1): no wheel for Python {python}" in text
    facts = bot.store.plan("snap")["facts"]
    assert facts["framework"] == "torch 2.1 (set by hand)"  # a person's value stays
    assert facts["needs_cuda"] == "yes" and "needs_cuda = yes" in text
    assert "framework =" not in text
    show = say(bot, "snap show")
    assert f"check C1, `{commit[:12]}`" in show and "T4 cannot run" in show
    advice = say(bot, "snap advise")
    assert advice.startswith(":no_entry:") and "T4 cannot run this code" in advice
    # The same commit again: read from the clone cache, nothing fetched.
    say(bot, f"snap check commit={commit}")
    assert answered(bot, 2)["result"]["cached"] is True


def test_bad_repositories_and_commits_are_answered_by_name(bot, tmp_path):
    commit = git_repo(tmp_path / "docs", {"README.md": "no code here\n"})
    say(bot, "new bare gpu=A100-80GB")
    say(bot, f"bare check repo={tmp_path / 'docs'}")
    assert answered(bot, 1)["status"] == "failed"
    assert any(f"`{commit[:12]}` has no Python code" in t for t in posted(bot))
    say(bot, f"bare check repo={tmp_path / 'docs'} commit=0123abc")
    assert answered(bot, 2)["status"] == "failed"
    assert any("commit `0123abc` is not in" in t for t in posted(bot))
    say(bot, f"bare check repo={tmp_path / 'nowhere'}")
    assert answered(bot, 3)["status"] == "failed"
    assert any("could not be fetched" in t and "nowhere" in t for t in posted(bot))
    assert "framework" not in bot.store.plan("bare")["facts"]
    # Refused before any job: no repository at all, a malformed one or commit.
    assert "has no repository to check" in say(bot, "bare check")
    assert "not a repository git can fetch" in say(bot, "bare check repo=--upload-pack=x")
    assert "is not a commit" in say(bot, f"bare check repo={tmp_path} commit=a..b")
    assert bot.store.check(4) is None


GOOD = {"repo": "/srv/snap", "commit": "a" * 40, "cached": False, "fetch_s": 0.1,
        "read_s": 0.1, "report": {"schema": "trialbot.compat/1", "root": "/srv/snap",
                                  "python_files": 1}}


@pytest.fixture
def api(tmp_path, monkeypatch):
    """The bot alone on loopback; workers are played by the test through the API."""
    monkeypatch.setattr("bot.trials.queue.CHECK_LEASE_SECONDS", 0.3)
    rt = Runtime(str(tmp_path / "a.db"), "tok", ConsoleTransport(io.StringIO(), True,
                                                                 str(tmp_path)),
                 policy=Policy(run_everyone=True))
    rt.start()
    yield rt
    rt.stop()


def test_a_lease_expires_and_another_worker_answers_once(api):
    a, b = Client(api.server.url, "tok"), Client(api.server.url, "tok")
    for c, name in ((a, "a"), (b, "b")):
        c.register(name, {"compat": "trialbot.compat/1"})
    say(api, "new snap gpu=H100 repo=/srv/snap")
    say(api, "snap check")
    first = a.lease("a", 1)
    assert first["kind"] == "compat-check" and first["repo"] == "/srv/snap"
    assert b.lease("b", 0) is None  # held by a
    time.sleep(0.4)  # a went silent: its lease expires
    again = b.lease("b", 1)
    assert again["id"] == first["id"] and again["lease"] != first["lease"]
    with pytest.raises(ApiError) as err:
        a.check_result("a", first, GOOD)  # too late: the lease is b's
    assert err.value.status == 409
    assert b.check_result("b", again, GOOD, key="k1")["status"] == "done"
    # The answer's reply was lost and b sends it again: applied once, posted once.
    assert b.check_result("b", again, GOOD, key="k1")["status"] == "done"
    assert len([t for t in posted(api) if "Compatibility check C1" in t]) == 1


def test_a_check_every_lease_of_which_expired_fails_in_the_channel(api):
    c = Client(api.server.url, "tok")
    c.register("a", {"compat": "trialbot.compat/1"})
    say(api, "new snap gpu=H100 repo=/srv/snap")
    say(api, "snap check")
    for _ in range(2):
        assert c.lease("a", 1)["kind"] == "compat-check"
        time.sleep(0.4)
    assert c.lease("a", 0) is None  # reaped instead of leased a third time
    assert api.store.check(1)["status"] == "failed"
    assert any("lease expired 2 times" in t and "Nothing was read" in t for t in posted(api))


def test_a_worker_that_reads_no_repositories_is_never_given_a_check(api):
    old = Client(api.server.url, "tok")
    old.register("old", {})  # a worker from before checks
    assert "No worker that reads repositories is registered" in say(
        api, "new snap gpu=H100 repo=/srv/snap") + say(api, "snap check")
    Client(api.server.url, "tok").register("new", {"compat": "trialbot.compat/1"})
    say(api, "snap check")
    api.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    assert old.lease("old", 1)["trial"] == "T1"  # the check waits for its kind, not the trial
    assert api.store.check(1)["status"] == "queued"


def test_an_answer_that_is_not_a_report_is_refused_by_name(api):
    c = Client(api.server.url, "tok")
    c.register("a", {"compat": "trialbot.compat/1"})
    say(api, "new snap gpu=H100 repo=/srv/snap")
    say(api, "snap check")
    got = c.lease("a", 1)
    for bad, words in (({"error": {"why": "bored", "message": ""}}, "`result.error` must be"),
                       (dict(GOOD, commit="HEAD"), "`result.commit` must be the full"),
                       (dict(GOOD, report={"schema": "x"}), "not a trialbot.compat/1 report"),
                       ({"repo": "/srv/snap", "commit": "a" * 40}, "`result.report` must be")):
        with pytest.raises(ApiError) as err:
            c.check_result("a", got, bad)
        assert err.value.status == 400 and words in str(err.value)
    assert api.store.check(1)["status"] == "running"


def test_a_worker_reads_its_own_disk_only_where_its_operator_allows(bot, tmp_path, monkeypatch):
    git_repo(tmp_path / "snap", FLASH)
    monkeypatch.delenv("TRIALBOT_CHECK_LOCAL")  # as on a shared worker: not set
    say(bot, f"new snap gpu=T4 repo={tmp_path / 'snap'}")
    say(bot, "snap check")
    assert answered(bot, 1)["status"] == "failed"
    assert any("reads repositories on its own disk only when its operator allows it "
               "(TRIALBOT_CHECK_LOCAL=1)" in t for t in posted(bot))
    assert not (tmp_path / "cache").exists()  # nothing was fetched


def test_a_repository_the_reader_chokes_on_is_answered_and_the_worker_lives(bot, tmp_path):
    # Valid TOML of the wrong shape, and a NUL byte in setup.py: named as not read.
    commit = git_repo(tmp_path / "odd", {"pyproject.toml": "[project]\ndependencies = [1]\n",
                                         "setup.py": "setup(\x00)\n", "a.py": "import torch\n"})
    say(bot, f"new odd gpu=T4 repo={tmp_path / 'odd'}")
    say(bot, "odd check")
    assert answered(bot, 1)["status"] == "done"
    text = next(t for t in posted(bot) if "Compatibility check C1" in t)
    assert "`pyproject.toml`" in text and "TypeError" in text and "`setup.py`" in text
    # A reader that raises anything still answers, and the worker takes the next check.
    with mock.patch("worker.compat.read", side_effect=RuntimeError("a bug")):
        say(bot, "odd check")
        assert answered(bot, 2)["status"] == "failed"
    assert any("the reader failed on this repository (RuntimeError: a bug)" in t
               for t in posted(bot))
    say(bot, "odd check")
    assert answered(bot, 3)["status"] == "done" and bot.store.check(3)["commit_read"] == commit


def test_a_branch_is_fetched_again_a_commit_hash_is_not(bot, tmp_path):
    first = git_repo(tmp_path / "moving", {"a.py": "import torch\n"})
    say(bot, f"new moving gpu=T4 repo={tmp_path / 'moving'}")
    branch = subprocess.run([*GIT, "-C", str(tmp_path / "moving"), "branch", "--show-current"],
                            capture_output=True, text=True, check=True).stdout.strip()
    say(bot, f"moving check commit={branch}")
    assert answered(bot, 1)["commit_read"] == first
    (tmp_path / "moving" / "b.py").write_text("import flash_attn\n")
    subprocess.run([*GIT, "-C", str(tmp_path / "moving"), "add", "."], check=True)
    subprocess.run([*GIT, "-C", str(tmp_path / "moving"), "commit", "-qm", "two"], check=True)
    second = subprocess.run([*GIT, "-C", str(tmp_path / "moving"), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    say(bot, f"moving check commit={branch}")
    assert answered(bot, 2)["commit_read"] == second  # the branch moved: read where it is now
    say(bot, f"moving check commit={first[:7]}")
    check = answered(bot, 3)
    assert check["commit_read"] == first and check["result"]["cached"] is True


def test_a_check_lease_its_worker_never_got_is_queued_again_uncounted(api):
    a, b = Client(api.server.url, "tok"), Client(api.server.url, "tok")
    a.register("a", {"compat": "trialbot.compat/1"})
    b.register("b", {"compat": "trialbot.compat/1"})
    say(api, "new snap gpu=H100 repo=/srv/snap")
    say(api, "snap check")
    got = a.lease("a", 1)
    # The lease's answer could not be written to `a` (it hung up): queued again at
    # once, the try not counted, so two such losses do not fail the check.
    WorkerApi(api.ctx, "tok").unsent("/api/lease", {"worker": "a"}, got)
    check = api.store.check(1)
    assert (check["status"], check["attempts"], check["worker"]) == ("queued", 0, None)
    again = b.lease("b", 1)
    assert again["id"] == 1 and again["lease"] != got["lease"]
    with pytest.raises(ApiError) as late:
        a.check_result("a", got, GOOD)
    assert late.value.status == 409
    b.check_result("b", again, GOOD)
    assert api.store.check(1)["status"] == "done"
