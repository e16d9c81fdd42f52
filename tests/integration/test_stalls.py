"""Nothing stalls an ack (issue 29): a database another process holds, one that
is full or read-only, and held trials left by a stop. Through the real Bolt
app and HTTP server on loopback, real SQLite files and a real process holding
the write lock; "full" is SQLite's own SQLITE_FULL from a page limit on the
bot's connections (a full disk needs a mount: scripts/bench_db_faults.py)."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.access import Policy
from bot.http import workerapi
from bot.store import Reason, Store, Unwritable, base
from conftest import bolt_runtime, wait_for
from slackfake import post, signed_headers, slash_body

QUICK = "llm-infer gen=2 repeats=1 stability=0"
POLICY = Policy(run_users=frozenset({"U1"}), admins=frozenset({"UADMIN"}))
HOLD = ("import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('begin exclusive')\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n")  # until the test closes our stdin


class Holder:
    """Another process holding the database's write lock (BEGIN EXCLUSIVE), as an
    open `sqlite3 trialbot.db` session or a long admin query does."""

    def __init__(self, db: str):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, db], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "held\n"

    def release(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def slash(rt, text: str, command: str = "/trial", channel: str = "C1") -> tuple[float, dict]:
    body = slash_body(text, command=command, channel=channel)
    t0 = time.monotonic()
    status, reply = post(rt.server.url + "/slack/events", body, signed_headers("s3cret", body))
    assert status == 200, reply
    return time.monotonic() - t0, reply


def get(rt, path: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(rt.server.url + path,
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def api(rt, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(rt.server.url + path, data=json.dumps(body).encode(),
                                 method="POST", headers={"Authorization": "Bearer wtoken",
                                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def metrics(rt) -> dict:
    _, body = get(rt, "/metrics", "wtoken")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body) for s in f.samples}


def jobs(db: str) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("select id, status, channel from jobs order by id").fetchall()


@pytest.fixture
def warm(tmp_path, fake_slack):
    """The bot on a fresh file, with C1 already known as a channel it may post in."""
    db = str(tmp_path / "s.db")
    rt = bolt_runtime(db, fake_slack, POLICY)
    slash(rt, QUICK)
    wait_for(lambda: jobs(db) == [(1, "queued", "C1")], what="T1 queued")
    yield rt, db
    rt.stop()


def test_a_database_another_process_holds_answers_in_time_and_queues_nothing(warm,
                                                                             monkeypatch):
    rt, db = warm
    monkeypatch.setattr(workerapi, "API_WRITE_WAIT", 1.0)  # the worker API's wait, shortened
    holder = Holder(db)
    try:
        took, reply = slash(rt, QUICK)
        assert took < 2.5  # Slack gives up at 3 s; the budget is 1.5 s
        assert reply["text"].startswith(":x: Nothing was queued or changed: the bot's database "
                                        "is busy: another program has held it too long")
        took, plan = slash(rt, "new repro gpu=H100", "/plan")
        assert took < 2.5 and "Nothing was stored: the bot's database is busy" in plan["text"]
        status, health = get(rt, "/healthz")
        assert status == 503 and json.loads(health)["database"]["reason"] == "locked"
        status, answer = api(rt, "/api/workers/register", {"worker": "w1", "info": {}})
        assert status == 503 and answer["reason"] == "locked"
        assert "retry it later" in answer["error"]
        scraped = metrics(rt)
        assert scraped[("trialbot_db_writable", ())] == 0
        assert scraped[("trialbot_db_write_failures_total", (("reason", "locked"),))] >= 4
    finally:
        holder.release()
    assert jobs(db) == [(1, "queued", "C1")]  # what it said was not queued was not
    assert rt.store.plan("repro") is None
    # No restart: the next command is queued, and the health is back.
    assert "Queued as *T2*" in slash(rt, QUICK)[1]["text"]
    assert get(rt, "/healthz")[0] == 200
    assert metrics(rt)[("trialbot_db_writable", ())] == 1


def test_a_burst_while_the_database_is_held_is_answered_in_time(warm):
    """Bolt handles two Slack requests at once (bot/http/server.py): each of the
    others waits its turn, and its budget counts from its arrival, so eight at
    once are all answered within Slack's 3 s, not 1.5 s after one another."""
    rt, db = warm
    holder = Holder(db)
    try:
        answers = [None] * 8
        threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, slash(rt, QUICK)))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        holder.release()
    assert max(took for took, _ in answers) < 2.5, [took for took, _ in answers]
    assert all("Nothing was queued or changed" in reply["text"] for _, reply in answers)
    assert jobs(db) == [(1, "queued", "C1")]


def test_a_background_write_waits_for_the_lock_where_the_acks_budget_gives_up(tmp_path):
    store = Store(str(tmp_path / "b.db"))
    holder = Holder(store.path)
    t0 = time.monotonic()
    with pytest.raises(Unwritable) as failed, store.budget(0.3):
        store.add_job({"workload": "llm-infer"}, "x", "U1", "C1")
    # (the busy timeout is set in 0.1 s steps, rounded down: at most the budget)
    assert failed.value.reason is Reason.LOCKED and 0.15 < time.monotonic() - t0 < 1.0
    done = []
    writer = threading.Thread(target=lambda: done.append(
        store.add_job({"workload": "llm-infer"}, "y", "U1", "C1")))
    writer.start()  # a background write: no budget, it waits (up to WRITE_WAIT, 30 s)
    time.sleep(1.0)
    assert writer.is_alive() and not done
    holder.release()
    writer.join(10)
    assert [j["words"] for j in done] == ["y"] and [j["words"] for j in store.jobs()] == ["y"]
    assert store.write_state().failures == {Reason.LOCKED: 1}


def capped(monkeypatch, pages: int) -> None:
    """Every connection the store opens may grow the file to `pages` pages (SQLite's
    max_page_count is per connection): past it, a write that needs a new page is
    refused with SQLITE_FULL, as on a full disk."""
    real = base.connect

    def connect(path):
        conn = real(path)
        conn.execute(f"pragma max_page_count = {pages}")
        return conn
    monkeypatch.setattr(base, "connect", connect)


def fill(db: str, pages: int) -> None:
    """Another program grows the file to `pages` pages, leaves no free page, and
    fills the last page of the jobs table, so a new trial needs a new page."""
    with sqlite3.connect(db) as c:
        c.execute("create table if not exists filler (b blob)")

        def grow(upto):
            while c.execute("pragma page_count").fetchone()[0] < upto \
                    or c.execute("pragma freelist_count").fetchone()[0]:
                c.execute("insert into filler values (zeroblob(4000))")
        grow(pages - 2)
        c.execute("insert into jobs (workload, spec, words, user, channel, status, created) "
                  "values ('filler', '{}', zeroblob(4000), 'U0', 'CFILL', 'cancelled', 0)")
        grow(pages)


def unfill(db: str) -> None:
    with sqlite3.connect(db) as c:
        c.execute("delete from filler")
        c.execute("delete from jobs where channel = 'CFILL'")


def test_a_full_database_says_so_and_recovers_without_a_restart(tmp_path, fake_slack,
                                                                 monkeypatch):
    db = str(tmp_path / "f.db")
    capped(monkeypatch, 400)
    rt = bolt_runtime(db, fake_slack, POLICY)
    try:
        slash(rt, QUICK)
        wait_for(lambda: jobs(db) == [(1, "queued", "C1")], what="T1 queued")
        fill(db, 400)
        took, reply = slash(rt, "sweep llm-infer gen=2 batch=1,2,4")
        assert took < 2.5
        assert reply["text"] == (
            ":x: Nothing was queued or changed: the disk holding the bot's database is full. "
            "Tell whoever runs the bot (`trialbot doctor` shows the free space), then run the "
            "command again.")
        status, health = get(rt, "/healthz")
        assert status == 503 and json.loads(health)["database"]["reason"] == "full"
        assert metrics(rt)[("trialbot_db_write_failures_total", (("reason", "full"),))] >= 2
        assert [j for j in jobs(db) if j[2] != "CFILL"] == [(1, "queued", "C1")]
        unfill(db)  # space freed, the bot left running
        assert "Queued sweep *S2*" in slash(rt, "sweep llm-infer gen=2 batch=1,2,4")[1]["text"]
        assert get(rt, "/healthz")[0] == 200
        assert len(jobs(db)) == 4
    finally:
        rt.stop()


def test_a_read_only_database_says_so_and_recovers_without_a_restart(tmp_path, fake_slack,
                                                                      monkeypatch):
    db = str(tmp_path / "r.db")
    rt = bolt_runtime(db, fake_slack, POLICY)
    real = base.connect

    def read_only(path):  # a connection opened while the file cannot be written
        conn = real(path)
        conn.execute("pragma query_only = 1")
        return conn
    monkeypatch.setattr(base, "connect", read_only)
    try:
        _, reply = slash(rt, QUICK)
        assert "Nothing was queued or changed: the bot's database cannot be written: its file " \
               "or filesystem is read-only." in reply["text"]
        status, health = get(rt, "/healthz")
        assert status == 503 and json.loads(health)["database"]["reason"] == "read-only"
        assert jobs(db) == []
        monkeypatch.setattr(base, "connect", real)  # the file can be written again
        # A connection that could not write is not kept: the next one can.
        assert "Queued as *T1*" in slash(rt, QUICK)[1]["text"]
        assert get(rt, "/healthz")[0] == 200
    finally:
        rt.stop()


@pytest.mark.parametrize("info, status", [({}, "queued"), ({"is_member": False}, "cancelled")])
def test_trials_held_when_the_bot_stopped_are_settled_at_start(tmp_path, fake_slack, info,
                                                               status):
    db = str(tmp_path / "h.db")
    store = Store(db)
    # Acked as held, then the bot stopped before Slack answered about the channel.
    store.add_jobs([{"workload": "llm-infer", "params": {}}], ["llm-infer"], "U1", "CHELD",
                   response_url=fake_slack.api_url + "respond", held=True)
    fake_slack.channel_info["CHELD"] = info
    rt = bolt_runtime(db, fake_slack, POLICY)
    try:
        wait_for(lambda: jobs(db)[0][1] != "held", what="the held trial settled")
        assert jobs(db) == [(1, status, "CHELD")]
        assert [c["channel"] for c in fake_slack.calls_of("conversations.info")] == ["CHELD"]
        if status == "cancelled":
            note = wait_for(lambda: fake_slack.calls_of("respond"), what="the requester told")
            assert note[0]["text"].startswith(":x: T1 will not run: I am not a member of <#CHELD>")
    finally:
        rt.stop()


def test_request_threads_share_a_few_pooled_connections(warm, monkeypatch):
    rt, _ = warm
    opened = []
    real = base.connect
    monkeypatch.setattr(base, "connect", lambda path: opened.append(path) or real(path))
    for _ in range(30):  # each request on a new connection: a new thread in the server
        slash(rt, "status T1")
        assert get(rt, "/healthz")[0] == 200
    # A few at most: as many as borrow at one moment (a request's ack, its lazy
    # listener, a poller in the background); it was one per request thread
    # (60 here), never closed. CI once saw 3 against an earlier bound of 2.
    assert len(opened) <= 4
