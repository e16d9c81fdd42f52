"""The worker API over real loopback HTTP."""
import json
import urllib.request

import pytest

from bot.outbox import ConsoleTransport
from bot.runtime import Runtime
from worker import report as reports
from worker.client import ApiError, Client
from worker.spec import parse


@pytest.fixture
def rt(tmp_path):
    import io
    rt = Runtime(str(tmp_path / "api.db"), "wtoken", ConsoleTransport(io.StringIO(), True))
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
    for call in (lambda: thief.heartbeat("w1", job), lambda: thief.report("w1", job, report_with())):
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
