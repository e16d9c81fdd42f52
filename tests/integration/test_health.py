"""Health you can see: /metrics (scraped over loopback HTTP and read with
prometheus-client's own parser), /healthz without names, GET /api/workers, and
the stuck outbox raised in the log and to admins in `/trial workers`."""
import json
import logging
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot import commands
from bot.access import Policy
from bot.app.runtime import Runtime
from bot.slack.app import web_client
from bot.slack.transport import SlackTransport
from worker import i18n
from worker.spec import parse


@pytest.fixture
def rt(tmp_path, fake_slack):
    """The store, outbox and HTTP server on a fake Slack; only the server runs,
    so the test decides when the outbox delivers (flush)."""
    rt = Runtime(str(tmp_path / "h.db"), "wtoken",
                 SlackTransport(web_client("xoxb-test", fake_slack.api_url)),
                 policy=Policy(run_everyone=True, admins=frozenset({"UADMIN"})),
                 metrics_token="mtoken-123")
    threading.Thread(target=rt.server.serve_forever, daemon=True).start()
    yield rt
    rt.server.shutdown()
    rt.server.server_close()


def get(rt, path, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(rt.server.url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


def scrape(rt, token="wtoken") -> dict:
    """{(sample name, labels as a sorted tuple): value}."""
    status, kind, body = get(rt, "/metrics", token)
    assert status == 200 and kind.startswith("text/plain"), body
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def test_metrics_follow_the_store(rt, fake_slack):
    m = scrape(rt)
    assert m[("trialbot_jobs", (("state", "queued"),))] == 0
    assert m[("trialbot_outbox_unsent", ())] == 0
    assert m[("trialbot_outbox_oldest_unsent_seconds", ())] == 0
    assert m[("trialbot_workers_online", ())] == 0
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    rt.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    rt.store.add_messages([{"channel": "C1", "text": "a reply waiting for Slack"}])
    time.sleep(0.05)
    m = scrape(rt, "mtoken-123")  # the metrics token is accepted too
    assert m[("trialbot_jobs", (("state", "queued"),))] == 2
    assert m[("trialbot_queue_oldest_seconds", ())] >= 0.05
    assert m[("trialbot_queue_wait_seconds_count", ())] == 0
    assert m[("trialbot_outbox_unsent", ())] == 1
    assert m[("trialbot_outbox_oldest_unsent_seconds", ())] > 0

    rt.store.upsert_worker("w1", {})
    rt.store.upsert_worker("w2", {})
    rt.store.upsert_worker("w3", {})
    first = rt.store.lease_next("w1", 0.01)  # a lease that runs out at once
    time.sleep(0.05)
    rt.queue.reap()  # back in the queue: an expiry
    assert rt.store.lease_next("w2", 60)["id"] == first["id"]
    m = scrape(rt)
    assert m[("trialbot_jobs", (("state", "queued"),))] == 1
    assert m[("trialbot_jobs", (("state", "running"),))] == 1
    assert m[("trialbot_queue_wait_seconds_count", ())] == 1
    assert m[("trialbot_queue_wait_seconds_bucket", (("le", "+Inf"),))] == 1
    assert m[("trialbot_queue_wait_seconds_sum", ())] >= 0.05
    assert m[("trialbot_lease_expiries_total", ())] == 1
    assert m[("trialbot_workers_online", ())] == 3
    # w1 and w3: the job w1 lost went back to the queue, so w1 holds none (as when
    # a job's last lease expires); it shows offline once unseen for 90 s
    assert m[("trialbot_workers_idle", ())] == 2

    fake_slack.errors["chat.postMessage"] = ["invalid_auth"] * 50  # a revoked token
    rt.outbox.flush()
    m = scrape(rt)
    assert m[("trialbot_slack_errors_total", (("class", "invalid_auth"),))] == 1
    assert m[("trialbot_outbox_unsent", ())] == 1
    fake_slack.errors.clear()
    rt.outbox.flush()
    assert scrape(rt)[("trialbot_outbox_unsent", ())] == 0
    # w2's lease, the job's second and last allowed, expires too: the job fails
    with rt.store.tx():
        rt.store.db.execute("update jobs set lease_expires = ? where id = ?",
                            [time.time() - 1, first["id"]])
    rt.queue.fail_exhausted()
    assert rt.store.job(first["id"])["status"] == "failed"
    m = scrape(rt)
    assert m[("trialbot_lease_expiries_total", ())] == 2
    assert m[("trialbot_jobs", (("state", "failed"),))] == 1


def test_the_bolt_apps_own_failed_calls_are_counted_with_the_outboxs(rt, fake_slack):
    """views.open, conversations.info and the like go through Bolt's client, not
    the outbox: a revoked token fails them too, and /metrics shows it."""
    from slack_sdk.errors import SlackApiError

    from bot.slack.app import build_app
    app = build_app(rt.ctx, web_client("xoxb-test", fake_slack.api_url), "s3cret")
    fake_slack.errors["views.open"] = ["invalid_auth", "expired_trigger_id"]
    for _try in range(2):
        with pytest.raises(SlackApiError):
            app.client.views_open(trigger_id="t1", view={"type": "modal"})
    fake_slack.errors["chat.postMessage"] = ["invalid_auth"] * 50
    rt.store.add_messages([{"channel": "C1", "text": "a reply waiting for Slack"}])
    rt.outbox.flush()
    m = scrape(rt)
    assert m[("trialbot_slack_errors_total", (("class", "invalid_auth"),))] == 2
    assert m[("trialbot_slack_errors_total", (("class", "expired_trigger_id"),))] == 1


@pytest.mark.parametrize("token, says", [(None, "no Bearer token"),
                                         ("nope", "not one of these"),
                                         ("wtoken2", "not one of these")])
def test_metrics_and_worker_names_need_a_token(rt, token, says):
    for path in ("/metrics", "/api/workers"):
        status, kind, body = get(rt, path, token)
        assert status == 401 and kind == "application/json"
        error = json.loads(body)["error"]
        assert says in error and "TRIALBOT_WORKER_TOKEN" in error
        assert "TRIALBOT_METRICS_TOKEN" in error


def test_per_worker_tokens_do_not_open_metrics(rt):
    from bot.http import tokens
    token = tokens.new_token()
    rt.store.add_worker_token("box1", tokens.digest(token))
    assert get(rt, "/metrics", token)[0] == 401


def test_healthz_counts_workers_and_names_none(rt):
    rt.store.upsert_worker("secret-gpu-box", {})
    status, _, body = get(rt, "/healthz")
    assert status == 200 and json.loads(body) == {"ok": True, "workers_online": 1,
                                                  "database": {"writable": True}}
    assert "secret-gpu-box" not in body
    status, _, body = get(rt, "/api/workers", "wtoken")
    assert status == 200
    assert json.loads(body)["workers"][0] | {"last_seen": None} == {
        "name": "secret-gpu-box", "online": True, "job": None, "last_seen": None}


def age_outbox(rt, seconds):
    with rt.store.tx():
        rt.store.db.execute("update outbox set created = created - ?", [seconds])


def test_a_stuck_outbox_is_logged_once_per_message(rt, fake_slack, caplog):
    fake_slack.errors["chat.postMessage"] = ["service_unavailable"] * 50  # Slack's own trouble
    rt.store.add_messages([{"channel": "C123", "text": "first"}])
    rt.outbox.flush()
    caplog.set_level(logging.ERROR, logger="trialbot.outbox")
    assert rt.outbox.check_stuck() == []  # not yet 5 minutes
    age_outbox(rt, 6 * 60)
    assert len(rt.outbox.check_stuck()) == 1
    assert len(rt.outbox.check_stuck()) == 1
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(lines) == 1, lines  # once, not every poll
    assert "1 message(s) unsent for over 5 min" in lines[0]
    assert "to C123" in lines[0] and "last error: service_unavailable" in lines[0]
    rt.store.add_messages([{"channel": "C123", "text": "second"}])
    age_outbox(rt, 6 * 60)
    assert len(rt.outbox.check_stuck()) == 2
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2  # a new one


def test_trial_workers_shows_the_stuck_outbox_to_admins_only(rt, fake_slack):
    fake_slack.outage = (time.monotonic() + 60, [503])  # Slack down: HTTP 503 to every call
    rt.store.add_messages([{"channel": "C123", "text": "a"}, {"channel": "C9", "text": "b"}])
    rt.outbox.flush()
    text = lambda user: commands.trial(rt.ctx, "workers", user, "C1")[0]["text"]  # noqa
    assert "rotating_light" not in text("UADMIN")  # a minute of an outage is no alarm
    age_outbox(rt, 22 * 60)
    admin = text("UADMIN")
    assert admin.startswith(":rotating_light: 2 messages unsent for over 5 min; the oldest, "
                            "to <#C123>, has waited 22"), admin
    assert "(last error: SlackApiError" in admin and "trialbot.outbox" in admin
    assert "rotating_light" not in text("U1")  # not an admin
    with i18n.using("ko"):
        ko = text("UADMIN")
    assert ko.startswith(":rotating_light:") and "trialbot.outbox" in ko
    assert "unsent" not in ko  # translated
    fake_slack.outage = None
    rt.outbox.flush()
    assert "rotating_light" not in text("UADMIN")  # sent: nothing to raise


def test_a_refused_token_is_raised_at_once_and_the_requester_told_once(rt, fake_slack,
                                                                       caplog):
    """A revoked token: no wait fixes it. The log says so at the first refusal,
    admins see it in `/trial workers` at once, and the trial's requester reads it
    through the command's response_url, which needs no token; once a trial."""
    caplog.set_level(logging.INFO, logger="trialbot.outbox")
    rt.store.upsert_worker("w1", {"cpus": 4})
    url = fake_slack.api_url + "respond-token"
    reply, job = commands.trial(rt.ctx, "llm-infer gen=1 repeats=1 stability=0", "U1",
                                      "C1", response_url=url)
    assert job and "Queued as *T1*" in reply["text"]
    fake_slack.errors["chat.postMessage"] = ["token_revoked"] * 50
    leased = rt.queue.lease("w1", 0)  # its card waits in the outbox
    rt.outbox.flush()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "refuses the bot's token (token_revoked)" in errors[0]
    assert "SLACK_BOT_TOKEN" in errors[0] and "none is lost" in errors[0]
    told = fake_slack.calls_of("respond-token")
    assert len(told) == 1 and told[0]["response_type"] == "ephemeral"
    assert "T1: I cannot post in <#C1> now: Slack refuses my token (token_revoked)" \
        in told[0]["text"]
    admin = commands.trial(rt.ctx, "workers", "UADMIN", "C1")[0]["text"]
    assert admin.startswith(":rotating_light: Slack refuses the bot's token (token_revoked): 1 "
                            "message waits, to <#C1>, for 0 min."), admin
    # The report joins the queue behind the card: neither the log nor the requester again.
    from worker import report as reports
    rt.queue.finish(job["id"], "w1", leased["lease"],
                    dict(reports.new_report("llm-infer", {}), status="ok", seconds=1.0))
    rt.outbox.flush()
    rt.outbox.flush()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert len(fake_slack.calls_of("respond-token")) == 1
    fake_slack.errors.clear()  # a new token, the bot restarted
    rt.outbox.flush()
    assert "accepts the bot's token again" in caplog.records[-1].getMessage() or any(
        "accepts the bot's token again" in r.getMessage() for r in caplog.records)
    assert rt.store.unsent() == [] and len(fake_slack.posts()) >= 2


def test_settings_for_health_are_checked():
    from bot.app import config
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1",
           "TRIALBOT_WORKER_TOKEN": "wtoken"}
    s = config.from_env(env)
    assert s.metrics_token is None and s.outbox_alert_minutes == 5
    s = config.from_env(dict(env, TRIALBOT_METRICS_TOKEN="m1", TRIALBOT_OUTBOX_ALERT_MINUTES="15"))
    assert s.metrics_token == "m1" and s.outbox_alert_minutes == 15
    for bad in ("soon", "0", "-3", "99999"):
        with pytest.raises(config.ConfigError, match="TRIALBOT_OUTBOX_ALERT_MINUTES=.* must be "
                                                     "minutes from 1 to 10080"):
            config.from_env(dict(env, TRIALBOT_OUTBOX_ALERT_MINUTES=bad))


def test_the_documented_metrics_are_the_scraped_ones(rt):
    import re
    from pathlib import Path
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    health = doc[doc.index("## Health"):doc.index("## The database")]
    documented = set(re.findall(r"^\| `(trialbot_[a-z_]+)", health, re.M))
    status, _, body = get(rt, "/metrics", "wtoken")
    names = {f.name for f in text_string_to_metric_families(body)}
    # the parser names a counter without its _total
    assert documented == {n + "_total" if n in ("trialbot_lease_expiries", "trialbot_slack_errors",
                                                "trialbot_db_write_failures") else n
                          for n in names}


def test_the_running_outbox_raises_a_stuck_message_itself(rt, fake_slack, caplog):
    fake_slack.errors["chat.postMessage"] = ["service_unavailable"] * 500
    rt.store.add_messages([{"channel": "C123", "text": "waiting"}])
    age_outbox(rt, 6 * 60)
    caplog.set_level(logging.ERROR, logger="trialbot.outbox")
    rt.outbox.start()  # its first look is at once
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                "unsent for over 5 min" in r.getMessage() for r in caplog.records):
            time.sleep(0.05)
    finally:
        rt.outbox.stop()
        rt.outbox.join(timeout=10)
    assert [r for r in caplog.records if "unsent for over 5 min" in r.getMessage()]


def test_the_alarm_comes_when_a_message_passes_the_limit_not_at_the_next_poll(
        tmp_path, fake_slack, caplog):
    """The outbox looks for stuck messages every 30 s at most, and also when the
    oldest waiting one passes the limit: the alarm is never late by a poll."""
    rt = Runtime(str(tmp_path / "a.db"), "wtoken",
                 SlackTransport(web_client("xoxb-test", fake_slack.api_url)),
                 policy=Policy(run_everyone=True), outbox_alert_minutes=0.05)  # 3 s
    fake_slack.errors["chat.postMessage"] = ["service_unavailable"] * 500
    caplog.set_level(logging.ERROR, logger="trialbot.outbox")
    rt.outbox.start()  # looks at once: nothing waits yet
    time.sleep(0.5)
    rt.store.add_messages([{"channel": "C123", "text": "waiting"}])
    stored = time.monotonic()
    rt.outbox.wake()
    try:
        while time.monotonic() - stored < 15 and not any(
                "unsent for over" in r.getMessage() for r in caplog.records):
            time.sleep(0.05)
    finally:
        rt.outbox.stop()
        rt.outbox.join(timeout=10)
    raised = time.monotonic() - stored
    assert 3 <= raised < 8, raised  # at the limit (3 s), not at the next 30 s poll

