"""Trial management: the card edited in place, `/trial cancel`, `/trial list
mine|running|failed`, `/trial workers`, and the card's buttons through the real
Bolt app with interactive payloads signed as Slack signs them."""
import json
import time
import urllib.parse

import pytest

from bot import commands
from bot.access import Policy
from bot.app.runtime import Runtime, context
from bot.delivery.outbox import Courier
from bot.slack.app import web_client
from bot.slack.transport import SlackTransport
from bot.store import Store
from bot.trials import command as trial_command
from bot.trials import workerlist
from bot.trials.queue import JobQueue
from slackfake import post, signed_headers
from worker import report as reports
from worker.spec import parse

QUICK = ("llm-infer gen=2 repeats=1 stability=0 layers=1 hidden=64 heads=2 kv_heads=1 vocab=256 "
         "malloc=glibc")  # one pass a trial: these test jobs, not memory


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "m.db")), admins=frozenset({"UADMIN"}))


def submit(ctx, user="U1", words=QUICK):
    return commands.trial(ctx, words, user, "C1")[1]


def test_progress_edits_the_card_and_pending_edits_coalesce(ctx):
    job = submit(ctx)
    leased = ctx.queue.lease("w1", 0)
    assert ctx.queue.heartbeat(job["id"], "w1", leased["lease"], {"phase": "weights",
                                                              "attempt": 1}) is False
    ctx.queue.heartbeat(job["id"], "w1", leased["lease"], {"phase": "run", "attempt": 2,
                                                       "failed": ["oom"]})
    ctx.queue.heartbeat(job["id"], "w1", leased["lease"], {"phase": "run", "attempt": 2,
                                                       "failed": ["oom"]})  # no change
    rows = ctx.store.unsent()
    assert [r["kind"] for r in rows] == ["started", "progress", "attempt"]  # one pending edit
    assert rows[1]["update_of"] == rows[0]["id"] and rows[1]["version"] == 1
    assert rows[2]["thread_of"] == rows[0]["id"]
    assert rows[2]["text"].endswith("T1 try 1 failed (oom); try 2 started")
    assert "phase `run` · try 2 (try 1: oom)" in rows[1]["text"]
    # an edit replaced while it was being sent is not marked sent: the newest goes out
    assert ctx.store.mark_sent(rows[1]["id"], "ts", version=0) is False
    assert ctx.store.mark_sent(rows[1]["id"], "ts", version=1) is True


def test_a_queued_trial_is_cancelled_by_its_owner_or_an_admin_only(ctx):
    job = submit(ctx)
    other, _ = commands.trial(ctx, f"cancel {job['trial']}", "U2", "C1")
    assert "only they or an admin" in other["text"] and ctx.store.job(1)["status"] == "queued"
    reply, _ = commands.trial(ctx, f"cancel {job['trial']}", "UADMIN", "C1")
    assert "is cancelled; it will not run" in reply["text"]
    ended = ctx.store.job(job["id"])
    assert ended["status"] == "cancelled" and ended["cancelled_by"] == "UADMIN"
    assert ctx.queue.lease("w1", 0) is None  # a cancelled trial is never leased
    note = ctx.store.unsent()[-1]
    assert "cancelled by <@UADMIN> before it started" in note["text"]
    again, _ = commands.trial(ctx, f"cancel {job['trial']}", "U1", "C1")
    assert "already ended (cancelled)" in again["text"]
    missing, _ = commands.trial(ctx, "cancel T99", "U1", "C1")
    assert "there is no trial T99" in missing["text"]
    bad, _ = commands.trial(ctx, "cancel twelve", "U1", "C1")
    assert "is not a trial id" in bad["text"]


def test_a_running_trial_is_cancelled_at_its_next_heartbeat(ctx):
    job = submit(ctx)
    leased = ctx.queue.lease("w1", 0)
    reply, _ = commands.trial(ctx, f"cancel {job['trial']}", "U1", "C1")
    assert "kills it at its next heartbeat" in reply["text"]
    assert "cancelling" in ctx.store.unsent()[-1]["text"]
    assert ctx.queue.heartbeat(job["id"], "w1", leased["lease"], {"phase": "run"}) is True
    r = reports.fail(reports.new_report("llm-infer", {}), "cancelled", "killed", "run")
    ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    assert ctx.store.job(job["id"])["status"] == "cancelled"
    card = [m for m in ctx.store.unsent() if m["kind"] == "summary"][0]
    assert "T1* cancelled by <@U1>" in card["text"]


def test_list_filters_and_workers(ctx):
    ctx.store.upsert_worker("w1", {"gpus": ["NVIDIA H100 80GB HBM3"] * 2})
    first, _ = submit(ctx), submit(ctx, user="U2")
    leased = ctx.queue.lease("w1", 0)
    ctx.queue.finish(first["id"], "w1", leased["lease"],
                 reports.fail(reports.new_report("llm-infer", {}), "oom", "x", "run"))
    text = lambda words, user="U1": commands.trial(ctx, words, user, "C1")[0]["text"]  # noqa
    assert "T1" in text("list mine") and "T2" not in text("list mine")
    assert "T2" in text("list running") and "T1" not in text("list running")
    assert "T1" in text("list failed") and "T2" not in text("list failed")
    assert "takes one of mine, running, failed" in text("list everything")
    now = time.time()
    ctx.store.add_idle("w1", {workerlist.week_start(now): 1800.0, "2000-01-03": 99999})
    workers = text("workers")
    assert "*w1* — 2× NVIDIA H100 80GB HBM3 — idle since" in workers
    assert "idle 0.5 h this week" in workers
    ctx.queue.lease("w1", 0)
    assert "busy with *T2*" in text("workers")
    assert "takes no arguments" in text("workers all")


def test_week_starts_on_monday_utc():
    # 2026-12-02 is a Wednesday
    assert workerlist.week_start(1796212800.0) == "2026-11-30"


def test_a_real_worker_kills_a_cancelled_trial(tmp_path, fake_slack):
    client = web_client("xoxb-test", fake_slack.api_url)
    rt = Runtime(str(tmp_path / "c.db"), "wtoken", SlackTransport(client), lease_seconds=4,
                 policy=Policy(run_users=frozenset({"U1"})))
    rt.start()
    try:
        rt.start_local_worker("w1")
        # processes=1: one long run phase. Split in four, each process's run took
        # about 2 s, and the cancel could land in a teardown between them.
        long = "llm-infer gen=2 repeats=10000 stability=0 run_cap=600 layers=1 hidden=64 " \
               "heads=2 kv_heads=1 vocab=256 processes=1"
        job = commands.trial(rt.ctx, long, "U1", "C1")[1]
        deadline = time.monotonic() + 60
        while (rt.store.job(job["id"])["progress"] or {}).get("phase") != "run":
            assert time.monotonic() < deadline, rt.store.job(job["id"])
            time.sleep(0.2)
        t0 = time.monotonic()
        assert "next heartbeat" in commands.trial(rt.ctx, "cancel T1", "U1", "C1")[0]["text"]
        while rt.store.job(job["id"])["status"] == "running":
            assert time.monotonic() - t0 < 30
            time.sleep(0.2)
        ended = rt.store.job(job["id"])
        assert ended["status"] == "cancelled" and ended["report"]["error"]["phase"] == "run"
        assert "process group was killed" in ended["report"]["error"]["message"]
        deadline = time.monotonic() + 20
        while "cancelled by <@U1>" not in "".join(u["text"] for u in
                                                   fake_slack.calls_of("chat.update")):
            assert time.monotonic() < deadline, fake_slack.calls_of("chat.update")
            time.sleep(0.2)
        phases = [u["text"] for u in fake_slack.calls_of("chat.update")]
        assert any("phase `" in t for t in phases)  # progress was shown while it ran
    finally:
        rt.stop()


# --- buttons, through Bolt ------------------------------------------------------


def interact(bot, fake_slack, payload: dict):
    payload = {"team": {"id": "T0"}, "user": {"id": "U1", "name": "ada"}, "api_app_id": "A1",
               "token": "legacy", "trigger_id": f"{time.monotonic_ns()}.1", **payload}
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    return post(bot.server.url + "/slack/events", body, signed_headers("s3cret", body))


def click(bot, fake_slack, action_id: str, job_id: int, user: str = "U1",
          message_ts: str = "1700000000.000001"):
    return interact(bot, fake_slack, {
        "type": "block_actions", "channel": {"id": "C1"}, "user": {"id": user, "name": "x"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": "C1"},
        "message": {"ts": message_ts, "type": "message"},
        "response_url": fake_slack.api_url + "respond",
        "actions": [{"action_id": action_id, "block_id": f"trial_{job_id}",
                     "value": str(job_id), "type": "button", "action_ts": "1"}]})


def wait_calls(fake_slack, method, n=1):
    deadline = time.monotonic() + 10
    while len(fake_slack.calls_of(method)) < n:
        assert time.monotonic() < deadline, fake_slack.calls
        time.sleep(0.05)
    return fake_slack.calls_of(method)


def test_buttons_rerun_cancel_and_add_to_plan(bot, fake_slack):
    job = submit(bot.ctx)
    assert click(bot, fake_slack, "trial_rerun", job["id"])[0] == 200
    said = wait_calls(fake_slack, "respond")[0]
    assert "Queued as *T2*" in said["text"] and bot.store.job(2)["words"] == QUICK
    assert click(bot, fake_slack, "trial_cancel", 2)[0] == 200
    assert "is cancelled" in wait_calls(fake_slack, "respond", 2)[1]["text"]
    assert bot.store.job(2)["status"] == "cancelled"

    # Add to plan…: no plan yet is said plainly; with one, a modal lists its blocks
    click(bot, fake_slack, "trial_add_to_plan", 1)
    assert "No plan of this channel has a block yet" in wait_calls(fake_slack, "respond",
                                                                   3)[2]["text"]
    bot.store.add_plan("repro", "C1", "U1", {})
    bot.store.put_block({"plan": "repro", "kind": "baseline", "runs": 5, "trials": ["T1"]})
    click(bot, fake_slack, "trial_add_to_plan", 1)
    view = wait_calls(fake_slack, "views.open")[0]["view"]
    view = json.loads(view) if isinstance(view, str) else view
    options = view["blocks"][0]["element"]["options"]
    assert [o["value"] for o in options] == ["repro|baseline"]

    def submit_view(value):
        return interact(bot, fake_slack, {"type": "view_submission", "view": {
            "id": "V1", "type": "modal", "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {"values": {"block": {"choice": {
                "type": "static_select", "selected_option": {"value": value}}}}}}})

    status, answer = submit_view("repro|nosuch")
    assert status == 200 and "has no such block" in answer["errors"]["block"]
    assert bot.store.job(1)["plan"] is None
    status, _ = submit_view("repro|baseline")
    assert status == 200 and bot.store.job(1)["plan"] == "repro"
    assert "counts as an actual of plan *repro*" in wait_calls(
        fake_slack, "chat.postEphemeral")[0]["text"]


def test_an_update_waits_for_its_message_and_goes_out_after(tmp_path, fake_slack):
    store = Store(str(tmp_path / "o.db"))
    q = JobQueue(store)
    job = q.submit(parse(QUICK.split()), QUICK, "U1", "C1")
    leased = q.lease("w1", 0)
    q.heartbeat(job["id"], "w1", leased["lease"], {"phase": "run"})
    fake_slack.fail_next = [500]  # Slack fails the first try
    box = Courier(store, SlackTransport(web_client("xoxb-test", fake_slack.api_url)),
                  update_interval=0)
    assert box.flush() == 0  # the card waits, and its edit behind it
    assert [r["tries"] for r in store.unsent()] == [1, 0]
    assert box.flush() == 2
    started, edit = fake_slack.posts()[0], fake_slack.calls_of("chat.update")[0]
    assert edit["ts"] == started["_ts"] and "phase `run`" in edit["text"]


def test_a_cancelled_trial_whose_worker_died_ends_cancelled_and_never_runs_again(ctx):
    job = submit(ctx)
    ctx.queue.lease_seconds = 0.1
    ctx.queue.lease("w1", 0)
    commands.trial(ctx, f"cancel {job['trial']}", "U1", "C1")
    time.sleep(0.15)  # w1 went silent before its next heartbeat
    assert ctx.queue.lease("w2", 0) is None  # not handed to another worker
    ended = ctx.store.job(job["id"])
    assert ended["status"] == "cancelled" and "stopped heartbeating" in \
        ended["report"]["error"]["message"]
    cards = [m for m in ctx.store.unsent() if m["kind"] in ("started", "progress", "summary")]
    assert [c["update_of"] for c in cards][1:] == [cards[0]["id"]] * (len(cards) - 1)


def test_a_cancel_before_the_card_exists_posts_no_second_card(ctx):
    job = submit(ctx)
    leased = ctx.store.lease_next("w1", 60)  # leased, its card not yet written
    assert "kills it at its next heartbeat" in commands.trial(
        ctx, f"cancel {job['trial']}", "U1", "C1")[0]["text"]
    ctx.store.set_started_message(job["id"], {"channel": "C1", "kind": "started",
                                                "text": "card"})
    assert [m["kind"] for m in ctx.store.unsent()] == ["started"]
    assert ctx.queue.heartbeat(job["id"], "w1", leased["lease"], {"phase": "run"}) is True


def test_a_secret_cut_by_truncation_is_still_masked():
    from worker import redact
    secret = "hf_abcdefghijklmnopqrstuvwxyz0123456789ABCD"
    assert redact.text(secret[10:] + " then more output", [secret]).startswith("[redacted]")
    assert redact.text("last line: " + secret[:20], [secret]).endswith("[redacted]")
    assert redact.text("an ordinary line", [secret]) == "an ordinary line"


def test_status_of_another_channels_trial_is_not_shown(ctx):
    job = submit(ctx)
    assert "belongs to another channel" in commands.trial(
        ctx, f"status {job['trial']}", "U1", "CPRIVATE")[0]["text"]
    assert f"*{job['trial']}*" in commands.trial(ctx, f"status {job['trial']}", "U1",
                                                  "C1")[0]["text"]
    assert f"*{job['trial']}*" in commands.trial(ctx, f"status {job['trial']}", "UADMIN",
                                                  "CPRIVATE")[0]["text"]


def test_add_to_plan_offers_and_takes_only_this_channels_plans(bot, fake_slack):
    job = submit(bot.ctx)
    for name, channel in (("secret", "CPRIVATE"), ("ours", "C1")):
        bot.store.add_plan(name, channel, "U1", {})
        bot.store.put_block({"plan": name, "kind": "baseline", "runs": 5, "trials": ["T1"]})
    click(bot, fake_slack, "trial_add_to_plan", job["id"])
    view = wait_calls(fake_slack, "views.open")[0]["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert [o["value"] for o in view["blocks"][0]["element"]["options"]] == ["ours|baseline"]
    # a submission naming the other channel's plan anyway (a stale or forged modal)
    status, answer = interact(bot, fake_slack, {"type": "view_submission", "view": {
        "id": "V1", "type": "modal", "callback_id": view["callback_id"],
        "private_metadata": view["private_metadata"],
        "state": {"values": {"block": {"choice": {
            "type": "static_select", "selected_option": {"value": "secret|baseline"}}}}}}})
    assert status == 200 and "belongs to another channel" in answer["errors"]["block"]
    assert bot.store.job(job["id"])["plan"] is None


def test_a_second_rerun_click_on_a_card_queues_nothing_and_names_the_first(bot, fake_slack):
    job = submit(bot.ctx)
    click(bot, fake_slack, "trial_rerun", job["id"])
    assert "Queued as *T2*" in wait_calls(fake_slack, "respond")[0]["text"]
    click(bot, fake_slack, "trial_rerun", job["id"])  # a new trigger_id, the same card
    said = wait_calls(fake_slack, "respond", 2)[1]
    assert said["response_type"] == "ephemeral"
    assert "Already received" in said["text"] and "queued T2" in said["text"]
    assert bot.store.job(3) is None
    # another user's click, or a click on another card, is its own
    click(bot, fake_slack, "trial_rerun", job["id"], user="UADMIN")
    assert "Queued as *T3*" in wait_calls(fake_slack, "respond", 3)[2]["text"]
    click(bot, fake_slack, "trial_rerun", 2, message_ts="1700000000.000002")
    assert "Queued as *T4*" in wait_calls(fake_slack, "respond", 4)[3]["text"]


def test_a_rerun_click_after_the_window_queues_again(ctx):
    job = submit(ctx)
    assert "Queued as *T2*" in trial_command.rerun(ctx, job["id"], "U1", "trig-1",
                                                   card="C1:1.1")["text"]
    assert "queued T2" in trial_command.rerun(ctx, job["id"], "U1", "trig-2", card="C1:1.1")["text"]
    with ctx.store.tx():  # the first click's key, older than the window
        ctx.store.db.execute("update requests set created = created - ?",
                               [trial_command.CLICK_SECONDS + 1])
    assert "Queued as *T3*" in trial_command.rerun(ctx, job["id"], "U1", "trig-3",
                                                   card="C1:1.1")["text"]
    assert "queued T2" in trial_command.rerun(ctx, job["id"], "U1",
                                              "trig-1")["text"]  # Slack retried


def test_a_fit_of_another_channels_sweep_is_not_answered(ctx):
    commands.trial(ctx, "sweep llm-infer batch=1,2 gen=4", "U1", "C1")
    for job in ctx.store.sweep_jobs(1):  # ended (failed): the fit question is answerable
        leased = ctx.queue.lease("w1", 0)
        ctx.queue.finish(job["id"], "w1", leased["lease"],
                     reports.fail(reports.new_report("llm-infer", {}), "crash", "x", "run"))
    hidden = commands.trial(ctx, "fit S1 batch=8", "U1", "CPRIVATE")[0]["text"]
    assert "S1 belongs to another channel" in hidden and "batch=1" not in hidden
    assert "belongs to another channel" not in commands.trial(ctx, "fit S1", "U1",
                                                             "C1")[0]["text"]
    assert "belongs to another channel" not in commands.trial(ctx, "fit S1", "UADMIN",
                                                             "CPRIVATE")[0]["text"]
