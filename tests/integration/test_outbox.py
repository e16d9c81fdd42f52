"""The outbox against a failing transport and the fake Slack Web API."""
from bot.delivery.outbox import Courier
from bot.delivery.refusals import Undeliverable
from bot.slack.app import web_client
from bot.slack.transport import SlackTransport
from bot.store import Store


class Flaky:
    def __init__(self, failures):
        self.failures, self.sent = failures, []

    def send(self, payload):
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(payload)
        return f"ts{len(self.sent)}"


def add(store, text, thread_of=None):
    with store.db.conn:
        return store._add_message({"channel": "C1", "text": text, "thread_of": thread_of}, None)


def test_outage_delays_and_loses_nothing_in_order(tmp_path):
    store = Store(str(tmp_path / "o.db"))
    parent = add(store, "started")
    add(store, "report", thread_of=parent)
    flaky = Flaky([ConnectionError("slack down")])
    box = Courier(store, flaky)
    assert box.flush() == 0  # the channel waits at its first message: order holds
    assert [(r["text"], r["tries"]) for r in store.unsent()] == [("started", 1), ("report", 0)]
    # a restart: a new store and outbox on the same file
    box = Courier(Store(str(tmp_path / "o.db")), flaky)
    assert box.flush() == 2
    assert [p["text"] for p in flaky.sent] == ["started", "report"]
    assert flaky.sent[1]["thread_ts"] == "ts1"
    assert box.flush() == 0  # nothing twice


def test_undeliverable_message_is_set_aside(tmp_path):
    store = Store(str(tmp_path / "o.db"))
    parent = add(store, "started")
    add(store, "report", thread_of=parent)
    flaky = Flaky([Undeliverable("channel_not_found")])
    assert Courier(store, flaky).flush() == 1
    assert flaky.sent[0]["text"] == "report" and "thread_ts" not in flaky.sent[0]


def test_slack_transport_retries_429_and_posts_once(fake_slack, tmp_path):
    store = Store(str(tmp_path / "o.db"))
    add(store, "hello")
    fake_slack.fail_next = [429]
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 1
    assert [p["text"] for p in fake_slack.posts()] == ["hello"]


def test_slack_errors_about_the_app_are_retried_about_the_message_set_aside(fake_slack, tmp_path):
    store = Store(str(tmp_path / "o.db"))
    add(store, "first")
    add(store, "second")
    fake_slack.errors["chat.postMessage"] = ["internal_error", "msg_too_long"]
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 0  # internal_error: Slack's trouble, the message waits
    assert store.unsent()[0]["last_error"] == "internal_error"
    assert box.flush() == 1  # "first" hit msg_too_long: set aside; "second" sent
    assert [p["text"] for p in fake_slack.posts()] == ["second"]
    assert store.unsent() == []


def test_invalid_blocks_are_sent_as_text(fake_slack, tmp_path):
    store = Store(str(tmp_path / "o.db"))
    with store.db.conn:
        store._add_message({"channel": "C1", "text": "plain", "blocks": [{"type": "bogus"}]},
                           None)
    fake_slack.errors["chat.postMessage"] = ["invalid_blocks"]
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 1
    assert fake_slack.posts()[0]["text"] == "plain" and "blocks" not in fake_slack.posts()[0]


def test_slack_transport_5xx_keeps_the_message(fake_slack, tmp_path):
    store = Store(str(tmp_path / "o.db"))
    add(store, "hello")
    fake_slack.fail_next = [503]
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 0
    assert store.unsent()[0]["tries"] == 1
    assert box.flush() == 1
    assert [p["text"] for p in fake_slack.posts()] == ["hello"]


def test_memory_chart_is_uploaded_into_the_thread_with_files_upload_v2(fake_slack, tmp_path):
    from bot.trials.queue import JobQueue
    from worker import launcher
    from worker.spec import parse
    store = Store(str(tmp_path / "o.db"))
    q = JobQueue(store)
    spec = parse(["llm-infer", "gen=2", "repeats=2", "stability=0", "processes=1"])
    job = q.submit(spec, "llm-infer", "U1", "C1")
    leased = q.lease("w1", 0)
    q.finish(job["id"], "w1", leased["lease"], launcher.run_trial(spec))
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 4  # started, its final summary (chat.update), report, chart
    started = fake_slack.posts()[0]
    card = fake_slack.calls_of("chat.update")[0]
    assert card["ts"] == started["_ts"] and " ok on w1" in card["text"]
    done = fake_slack.calls_of("files.completeUploadExternal")[0]
    assert done["channel_id"] == "C1" and done["thread_ts"] == started["_ts"]
    png = next(iter(fake_slack.uploads.values()))
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_a_plan_export_is_uploaded_with_its_stored_text(fake_slack, tmp_path):
    store = Store(str(tmp_path / "o.db"))
    store.add_messages([{"channel": "C1", "kind": "export", "file": "repro-plan.csv",
                         "content": "plan,block\nrepro,baseline\n", "text": "Plan repro (CSV)"}])
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 1
    done = fake_slack.calls_of("files.completeUploadExternal")[0]
    assert done["channel_id"] == "C1"
    assert next(iter(fake_slack.uploads.values())) == b"plan,block\nrepro,baseline\n"


def test_a_file_slack_keeps_refusing_is_set_aside_after_three_tries(fake_slack, tmp_path):
    # An install without files:write: Slack answers missing_scope (an app error,
    # waited out for a message) for the upload. A file is an extra: it goes.
    store = Store(str(tmp_path / "o.db"))
    store.add_messages([{"channel": "C1", "kind": "export", "file": "x.csv", "content": "a,b\n",
                         "text": "export"}, {"channel": "C1", "text": "after the file"}])
    fake_slack.errors["files.getUploadURLExternal"] = ["missing_scope"] * 10
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert [box.flush() for _ in range(3)] == [0, 0, 1]
    assert [p["text"] for p in fake_slack.posts()] == ["after the file"]
    row = store.db.execute("select given_up, last_error from outbox where file = 'x.csv'"
                           ).fetchone()
    assert row[0] is not None and "missing_scope" in row[1]


def test_a_redirected_message_waits_out_slacks_own_trouble(fake_slack, tmp_path):
    from bot.trials.queue import JobQueue
    from worker.spec import parse
    store = Store(str(tmp_path / "o.db"))
    job = JobQueue(store).submit(parse(["llm-infer"]), "llm-infer", "U1", "CBAD")
    with store.tx():
        store._add_message({"channel": "CBAD", "text": "the report"}, job["id"])
    fake_slack.channel_errors["CBAD"] = "not_in_channel"  # no response_url: a DM
    fake_slack.errors["chat.postMessage"] = ["service_unavailable"]
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    assert box.flush() == 0  # Slack itself failed the DM: it waits, nothing is lost
    assert store.unsent()[0]["tries"] == 1
    assert box.flush() == 1
    dm = fake_slack.posts()[0]
    assert dm["channel"] == "DU1" and "the report" in dm["text"] and "url" not in dm


def test_a_stopping_outbox_completes_the_send_in_flight_and_starts_no_more(fake_slack,
                                                                          tmp_path):
    import time
    store = Store(str(tmp_path / "o.db"))
    for text in ("one", "two", "three"):
        add(store, text)
    fake_slack.delays["C1"] = 1.5  # each answer is slow
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)))
    box.start()
    deadline = time.monotonic() + 10
    while "chat.postMessage" not in fake_slack.received:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    t0 = time.monotonic()
    box.stop()
    box.join(10)
    assert not box.is_alive() and time.monotonic() - t0 < 2.5  # one answer, not three
    assert [p["text"] for p in fake_slack.posts()] == ["one"]
    assert [r["text"] for r in store.unsent()] == ["two", "three"]  # marked: one, and only one
