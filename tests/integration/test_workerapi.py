"""The worker API over real loopback HTTP."""
import json
import urllib.request

import pytest

from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime
from worker import report as reports
from worker.client import ApiError, Client
from worker.spec import parse


@pytest.fixture
def rt(tmp_path):
    import io
    rt = Runtime(str(tmp_path / "api.db"), "wtoken",
                 ConsoleTransport(io.StringIO(), True, str(tmp_path)))  # charts land there
    rt.start()
    yield rt
    rt.stop()


def raw_post(url, body: bytes, token="wtoken"):
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_wrong_or_missing_token_is_401_and_changes_nothing(rt):
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    for token in ("", "nope", "wtoken2"):
        with pytest.raises(ApiError) as err:
            Client(rt.server.url, token).lease("thief", 0)
        assert err.value.status == 401
    assert rt.store.job(1)["status"] == "queued"
    assert rt.store.workers() == []


def test_lease_heartbeat_report_roundtrip(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {"gpu": None})
    assert c.lease("w1", 0) is None  # 204: nothing queued
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    assert job["trial"] == "T1" and job["spec"]["params"]["batch"] == 1
    assert c.heartbeat("w1", job) == {"cancel": False}
    with pytest.raises(ApiError) as err:
        c.heartbeat("w2", job)  # another worker cannot touch this lease
    assert err.value.status == 409
    r = reports.new_report("llm-infer", job["spec"]["params"])
    r["status"] = "ok"
    assert c.report("w1", job, r) == {"trial": "T1", "status": "done"}
    with pytest.raises(ApiError) as err:
        c.report("w1", job, r)  # a second report for the same lease
    assert err.value.status == 409


@pytest.mark.parametrize("path, body, says", [
    ("/api/lease", b"not json", "not JSON"),
    ("/api/lease", b"[]", "JSON object"),
    ("/api/lease", b'{"wait": 1}', "`worker`"),
    ("/api/lease", b'{"worker": "w", "wait": 999}', "`wait`"),
    ("/api/jobs/1/heartbeat", b'{"worker": "w"}', "`lease`"),
    ("/api/jobs/1/report", b'{"worker": "w", "lease": "x", "report": {"schema": 1}}',
     "invalid report"),
    ("/api/nope", b'{"worker": "w"}', "no such endpoint"),
    ("/api/jobs/99999999999999999999/heartbeat", b'{"worker": "w", "lease": "x"}',
     "no such endpoint"),
    ("/api/lease", b'{"worker": "w", "idle": {"yesterday": 5}}', "`idle`"),
    ("/api/lease", b'{"worker": "w", "key": 7}', "`key`"),
    ("/api/jobs/1/report", b'{"worker": "w", "lease": "x", "key": ""}', "`key`"),
])
def test_bad_requests_name_the_problem(rt, path, body, says):
    status, reply = raw_post(rt.server.url + path, body)
    assert status in (400, 404)
    assert says in reply["error"]


def test_healthz(rt):
    with urllib.request.urlopen(rt.server.url + "/healthz") as resp:
        assert json.loads(resp.read())["ok"] is True


def report_with(**over):
    r = reports.new_report("llm-infer", {})
    r["status"] = "ok"
    r.update(over)
    return r


@pytest.mark.parametrize("report, says", [
    (report_with(phases=[{"name": "run"}]), "phases"),
    (report_with(workload=None), "workload"),
    (report_with(status="failed", error={"class": "gremlins", "message": "x"}), "error"),
    (report_with(memory={"method": {}, "host_rss_peak": "lots"}), "host_rss_peak"),
    (report_with(latency=[1, 2]), "latency"),
])
def test_malformed_reports_are_refused_and_the_job_keeps_its_lease(rt, report, says):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    with pytest.raises(ApiError) as err:
        c.report("w1", job, report)
    assert err.value.status == 400 and says in str(err.value)
    assert rt.store.job(job["id"])["status"] == "running"


def test_heartbeat_and_report_need_the_token(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    thief = Client(rt.server.url, "guess")
    for call in (lambda: thief.heartbeat("w1", job), lambda: thief.report("w1", job,
                                                                          report_with())):
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status == 401
    assert rt.store.job(job["id"])["status"] == "running"


def test_unknown_worker_is_told_to_register(rt):
    with pytest.raises(ApiError) as err:
        Client(rt.server.url, "wtoken").lease("stranger", 0)
    assert err.value.status == 409 and "register first" in str(err.value)


def test_bad_content_length_is_a_400(rt):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", rt.server.server_address[1], timeout=10)
    conn.putrequest("POST", "/api/lease")
    conn.putheader("Content-Length", "abc")
    conn.putheader("Authorization", "Bearer wtoken")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 400 and b"Content-Length" in resp.read()


def test_idle_reported_with_a_lease_is_stored(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    assert c.lease("w1", 0, {"2026-11-30": 12.5}) is None
    assert rt.store.idle("w1")[0]["seconds"] == 12.5


# A request sent again because its answer was lost (the same key) --------------

def test_a_lease_sent_again_counts_its_idle_once_and_gets_the_same_lease(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    body = {"worker": "w1", "wait": 1, "idle": {"2026-11-30": 12.5}, "key": "lease-1"}
    first = c.call("/api/lease", body)
    assert first["trial"] == "T1"
    assert c.call("/api/lease", body) == first  # the worker never saw the first answer
    assert rt.store.idle("w1")[0]["seconds"] == 12.5
    assert rt.store.job(1)["attempts"] == 1
    assert c.heartbeat("w1", first) == {"cancel": False}  # the lease it got works
    # an answer of "nothing to run" sent again: its idle is counted once too
    nothing = dict(body, key="lease-2", wait=0, idle={"2026-11-30": 1.5})
    assert c.call("/api/lease", nothing) is None and c.call("/api/lease", nothing) is None
    assert rt.store.idle("w1")[0]["seconds"] == 14.0
    # a new key is a new request, and a key is kept a day
    assert c.call("/api/lease", dict(nothing, key="lease-3")) is None
    assert rt.store.idle("w1")[0]["seconds"] == 15.5
    with rt.store.tx():
        rt.store.db.execute("update worker_requests set created = created - 86401")
    assert c.call("/api/lease", dict(nothing, key="lease-4")) is None
    assert rt.store.db["worker_requests"].count == 1


def test_a_lease_sent_again_after_its_lease_went_elsewhere_leases_anew(rt):
    rt.queue.lease_seconds = 0.2
    c = Client(rt.server.url, "wtoken")
    for w in ("w1", "w2"):
        c.register(w, {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    body = {"worker": "w1", "wait": 1, "key": "lease-1"}
    assert c.call("/api/lease", body)["trial"] == "T1"
    import time
    time.sleep(0.3)  # w1 was away past the lease: w2 took T1
    assert c.lease("w2", 1)["trial"] == "T1"
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    again = c.call("/api/lease", body)
    assert again["trial"] == "T2" and c.call("/api/lease", body) == again
    assert rt.store.job(1)["worker"] == "w2"


def test_a_report_sent_again_gets_the_first_answer_not_a_409(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    body = {"worker": "w1", "lease": job["lease"], "report": report_with(), "key": "report-1"}
    first = c.call("/api/jobs/1/report", body)
    assert first == {"trial": "T1", "status": "done"}
    messages = rt.store.db["outbox"].count
    assert c.call("/api/jobs/1/report", body) == first
    assert len(rt.store.attempts(1)) == 1 and rt.store.db["outbox"].count == messages
    for other in (dict(body, key="report-2"), {k: v for k, v in body.items() if k != "key"}):
        with pytest.raises(ApiError) as err:  # another request for a lease that has ended
            c.call("/api/jobs/1/report", other)
        assert err.value.status == 409


# Per-worker tokens and refused requests ----------------------------------

def snapshot(rt) -> list[str]:
    """Every row of every table, once the outbox has sent what it had (its
    thread writes on its own): a refused request must leave this unchanged."""
    import sqlite3
    import time
    deadline = time.monotonic() + 10
    while rt.store.unsent() and time.monotonic() < deadline:
        time.sleep(0.02)
    conn = sqlite3.connect(rt.store.path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def make_token(rt, name: str) -> str:
    from bot.http import tokens
    token = tokens.new_token()
    assert rt.store.add_worker_token(name, tokens.digest(token))
    return token


def test_per_worker_token_acts_only_as_its_worker(rt):
    a = Client(rt.server.url, make_token(rt, "gpu-a"))
    assert a.register("gpu-a", {})["worker"] == "gpu-a"
    before = snapshot(rt)
    with pytest.raises(ApiError) as err:
        a.register("gpu-b", {})  # its token is gpu-a's
    assert err.value.status == 403 and "'gpu-a'" in str(err.value) and "'gpu-b'" in str(err.value)
    assert snapshot(rt) == before
    # the stored hash is not the token, and the shared token still acts as anyone
    assert all(h != a.token for _, h in rt.store.active_token_hashes())
    assert Client(rt.server.url, "wtoken").register("gpu-b", {})["worker"] == "gpu-b"


def test_worker_b_cannot_touch_worker_a_lease(rt):
    a = Client(rt.server.url, make_token(rt, "gpu-a"))
    b = Client(rt.server.url, make_token(rt, "gpu-b"))
    a.register("gpu-a", {})
    b.register("gpu-b", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = a.lease("gpu-a", 1)
    before = snapshot(rt)
    calls = [
        (lambda: b.heartbeat("gpu-a", job), 403),      # B naming A: its token says B
        (lambda: b.report("gpu-a", job, report_with()), 403),
        (lambda: b.heartbeat("gpu-b", job), 409),      # B as itself: the lease is A's
        (lambda: b.report("gpu-b", job, report_with()), 409),
    ]
    for call, status in calls:
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status == status
    assert snapshot(rt) == before
    assert rt.store.job(job["id"])["worker"] == "gpu-a"
    assert a.report("gpu-a", job, report_with())["status"] == "done"


def test_revoked_token_gets_401_at_its_next_request(rt):
    token = make_token(rt, "gpu-a")
    a = Client(rt.server.url, token)
    a.register("gpu-a", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = a.lease("gpu-a", 1)
    assert rt.store.revoke_worker_token("gpu-a")
    before = snapshot(rt)
    for call in (lambda: a.heartbeat("gpu-a", job), lambda: a.lease("gpu-a", 0),
                 lambda: a.report("gpu-a", job, report_with())):
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status == 401 and "revoked" in str(err.value)
    assert snapshot(rt) == before


def test_refused_requests_change_nothing(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")  # T2: queued, not held
    url = rt.server.url
    lease = job["lease"]
    cases = [
        ("/api/lease", b'{"worker": "w1", "wait": 0', 400, "not JSON"),
        ("/api/lease", b"\xff\xfe{}", 400, "not JSON"),
        ("/api/lease", b"[" * 100000 + b"]" * 100000, 400, "not JSON"),
        ("/api/lease", b'{"worker": 7}', 400, "`worker`"),
        ("/api/lease", b'{"worker": "w1", "wait": true}', 400, "`wait`"),
        ("/api/lease", b'{"worker": "w1", "wait": "5"}', 400, "`wait`"),
        ("/api/lease", b'{"worker": "w1", "idle": {"2026-11-30": true}}', 400, "`idle`"),
        ("/api/workers/register", b'{"worker": "w1", "info": []}', 400, "`info`"),
        ("/api/workers/register", b'{"worker": "w1", "info": {"gpus": "H100"}}', 400,
         "`info.gpus`"),
        ("/api/jobs/1/heartbeat", b'{"worker": "w1", "lease": 5}', 400, "`lease`"),
        ("/api/jobs/1/heartbeat", json.dumps({"worker": "w1", "lease": lease,
                                              "progress": {"attempt": "2"}}).encode(),
         400, "`progress.attempt`"),
        ("/api/jobs/1/report", json.dumps({"worker": "w1", "lease": lease,
                                           "report": "done"}).encode(), 400, "`report`"),
        ("/api/jobs/999/heartbeat", json.dumps({"worker": "w1", "lease": lease}).encode(),
         404, "no job 999"),
        ("/api/jobs/999/report", json.dumps({"worker": "w1", "lease": lease,
                                             "report": report_with()}).encode(),
         404, "no job 999"),
        ("/api/jobs/2/report", json.dumps({"worker": "w1", "lease": lease,
                                           "report": report_with()}).encode(),
         409, "not leased to w1"),
        ("/api/jobs/1/report", json.dumps({"worker": "w1", "lease": "0" * 32,
                                           "report": report_with()}).encode(),
         409, "not leased to w1"),
    ]
    before = snapshot(rt)
    for path, body, status, says in cases:
        got, reply = raw_post(url + path, body)
        assert (got, says in str(reply)) == (status, True), (path, body[:80], reply)
    assert snapshot(rt) == before
    assert rt.store.job(1)["status"] == "running" and rt.store.job(2)["status"] == "queued"


def test_oversized_bodies_get_413_and_change_nothing(rt):
    from bot.http.workerapi import MAX_REPORT, MAX_REQUEST
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    before = snapshot(rt)
    big = report_with(notes="x" * MAX_REPORT)
    with pytest.raises(ApiError) as err:
        c.report("w1", job, big)
    assert err.value.status == 413 and f"{MAX_REPORT}-byte limit" in str(err.value)
    with pytest.raises(ApiError) as err:
        c.register("w1", {"pad": "x" * MAX_REQUEST})
    assert err.value.status == 413
    assert snapshot(rt) == before
    # the connection was drained, not reset: the next request on the API works,
    # and a real report with a full timeline is far under the report limit
    from worker import timeline
    r = report_with()
    hours = [{"t": i * 0.01, "host_rss": 1e9 + i, "device_used": 2e9 + i, "process_used": 3e9,
              "allocated": 1.5e9 + i, "reserved": 2.5e9} for i in range(40000)]
    r["timeline"] = timeline.build(hours, hours)
    assert len(json.dumps(r)) < MAX_REPORT / 8
    assert c.report("w1", job, r)["status"] == "done"


def test_a_new_worker_token_never_reads_as_an_option():
    from bot.http import tokens
    # 1 in 64 of token_urlsafe's start with `-`, which `--token TOKEN` would take for a flag
    assert not any(tokens.new_token().startswith("-") for _ in range(2000))


def test_ping_says_whose_token_and_the_bots_clock_and_changes_nothing(rt):
    import time
    own = Client(rt.server.url, make_token(rt, "gpu-a"))
    before = snapshot(rt)
    t0 = time.time()
    shared = Client(rt.server.url, "wtoken").call("/api/ping", {"worker": "w9"})
    assert t0 <= shared["time"] <= time.time()
    assert shared["token"] == "shared" and shared["worker"] == "w9"
    assert shared["registered"] is False and (shared["lease"], shared["heartbeat"]) == (60, 10)
    assert own.call("/api/ping", {"worker": "gpu-a"})["token"] == "worker"
    with pytest.raises(ApiError) as err:
        own.call("/api/ping", {"worker": "gpu-b"})
    assert err.value.status == 403 and "'gpu-a'" in str(err.value)
    with pytest.raises(ApiError) as err:
        Client(rt.server.url, "nope").call("/api/ping", {"worker": "w9"})
    assert err.value.status == 401
    assert snapshot(rt) == before  # nothing registered, leased or counted


def test_a_lease_its_worker_hung_up_on_goes_back_to_the_queue_at_once(rt, caplog):
    """A worker killed during its long poll: the trial the bot then leases to
    it cannot be written, so it is queued again, costing no attempt, instead of
    held by a dead worker until its lease expires (60 s)."""
    import socket
    import struct
    import time
    c = Client(rt.server.url, "wtoken")
    c.register("dead", {})
    c.register("alive", {})
    body = json.dumps({"worker": "dead", "wait": 10}).encode()
    host, port = rt.server.server_address[:2]
    s = socket.create_connection((host, port))
    s.sendall(b"POST /api/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wtoken\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.5)  # the bot holds the long poll open
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # reset, as when the worker's process is killed
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    deadline = time.monotonic() + 10
    while "queued again" not in caplog.text:
        assert time.monotonic() < deadline, "the unsent lease was not released"
        time.sleep(0.05)
    job = rt.store.job(1)
    assert (job["status"], job["worker"], job["attempts"]) == ("queued", None, 0)
    assert rt.store.attempts(1) == []
    assert c.lease("alive", 1)["trial"] == "T1"
    assert rt.store.job(1)["attempts"] == 1


def outbox_texts(rt, job_id: int) -> list[tuple[str, int | None]]:
    return [tuple(r) for r in rt.store.db.execute(
        "select text, update_of from outbox where job = ? order by id", [job_id])]


def test_a_stopping_worker_hands_its_trial_back_at_once_with_no_attempt_counted(rt):
    c = Client(rt.server.url, "wtoken")
    for w in ("w1", "w2"):
        c.register(w, {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    with pytest.raises(ApiError) as err:
        c.release("w2", job, "SIGTERM")  # only the lease's own worker may hand it back
    assert err.value.status == 409
    assert c.release("w1", job, "SIGTERM", key="r1") == {"trial": "T1", "status": "queued"}
    # sent again because its answer was lost: the first answer, not a 409
    assert c.release("w1", job, "SIGTERM", key="r1") == {"trial": "T1", "status": "queued"}
    with pytest.raises(ApiError) as err:
        c.release("w1", job, "SIGTERM", key="r2")  # a new request: the lease is gone
    assert err.value.status == 409
    row = rt.store.job(1)
    assert (row["status"], row["worker"], row["attempts"]) == ("queued", None, 0)
    assert rt.store.attempts(1) == []
    card, edit = outbox_texts(rt, 1)
    assert "started on *w1*" in card[0]
    assert edit[0].startswith(":hourglass: *T1* returned to the queue: worker *w1* stopped "
                              "(SIGTERM) before the trial ended")
    assert edit[1] is not None  # an edit of the card, not a new message
    again = c.lease("w2", 1)
    assert again["trial"] == "T1"
    r = reports.new_report("llm-infer", again["spec"]["params"])
    r["status"] = "ok"
    assert c.report("w2", again, r)["status"] == "done"
    assert [(a["worker"], a["status"]) for a in rt.store.attempts(1)] == [("w2", "ok")]
    assert rt.store.job(1)["attempts"] == 1


def test_a_trial_cancelled_before_its_worker_stopped_ends_cancelled(rt):
    c = Client(rt.server.url, "wtoken")
    c.register("w1", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w1", 1)
    rt.queue.cancel(1, "U1")  # the worker stopped before its next heartbeat said so
    assert c.release("w1", job, "SIGTERM", key="r1") == {"trial": "T1", "status": "cancelled"}
    assert c.release("w1", job, "SIGTERM", key="r1")["status"] == "cancelled"
    row = rt.store.job(1)
    assert row["status"] == "cancelled"
    assert "w1 stopped (SIGTERM) before it ended" in row["report"]["error"]["message"]
    assert c.lease("w1", 0) is None  # never run again


@pytest.mark.parametrize("path, body, says", [
    ("/api/jobs/1/release", {"lease": "x"}, "`reason`"),
    ("/api/jobs/1/release", {"lease": "x", "reason": "<!channel> stop"}, "`reason`"),
    ("/api/jobs/1/release", {"lease": "x", "reason": "x" * 81}, "`reason`"),
    ("/api/jobs/1/release", {"reason": "SIGTERM"}, "`lease`"),
    ("/api/workers/stopping", {"reason": "SIGTERM"}, "`poll`"),
    ("/api/workers/stopping", {"poll": "k", "reason": ""}, "`reason`"),
])
def test_bad_releases_name_the_field_and_change_nothing(rt, path, body, says):
    c = Client(rt.server.url, "wtoken")
    c.register("w", {})
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    job = c.lease("w", 1)
    with pytest.raises(ApiError) as err:
        c.call(path, dict(body, worker="w"))
    assert err.value.status == 400 and says in str(err.value)
    assert rt.store.job(1)["lease"] == job["lease"] and rt.queue.left == {}


def test_a_trial_for_the_long_poll_a_stopping_worker_left_goes_back_to_the_queue(rt):
    """A stopping worker does not wait out its long poll (up to 20 s): it
    leaves it and says so. A trial the poll gets after that is queued again
    at once, not held by a worker that is gone until its lease expires."""
    import socket
    import time
    c = Client(rt.server.url, "wtoken")
    for w in ("w1", "w2"):
        c.register(w, {})
    body = json.dumps({"worker": "w1", "wait": 10, "key": "poll-1"}).encode()
    s = socket.create_connection(rt.server.server_address[:2])
    s.sendall(b"POST /api/lease HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wtoken\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.3)  # the bot holds the long poll open
    assert c.stopping("w1", "SIGTERM", "poll-1") == {"worker": "w1"}
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    s.settimeout(15)
    answer = s.recv(4096)
    s.close()
    assert answer.startswith(b"HTTP/1.1 204"), answer
    row = rt.store.job(1)
    assert (row["status"], row["worker"], row["attempts"]) == ("queued", None, 0)
    assert c.lease("w2", 1)["trial"] == "T1"
    # a poll of that key arriving only now is answered at once, with nothing
    t0 = time.monotonic()
    assert c.call("/api/lease", {"worker": "w1", "wait": 10, "key": "poll-1"}) is None
    assert time.monotonic() - t0 < 2
