"""One channel must never stop the bot: per-channel delivery, refusals no
retry can fix, the requester told another way, and the check at `/trial`
time — through the real Bolt app, outbox thread, SlackTransport and the fake
Slack Web API on loopback."""
from __future__ import annotations

import time

import pytest

from bot.delivery import refusals
from slackfake import post, signed_headers, slash_body
from worker import report as reports
from worker.spec import parse

SPEC = parse(["llm-infer", "gen=2", "repeats=1", "stability=0", "malloc=glibc"])  # one pass
QUICK = "llm-infer gen=2 repeats=1 stability=0 malloc=glibc"  # one pass a trial


def wait(check, timeout: float = 15, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)


def run_to_end(bot, job: dict) -> None:
    """Lease the job as worker w1 and end it with a (failed) report: its card,
    the card's final edit and the threaded report are queued, as a real end does.
    A trial of a channel Slack had not yet been asked about is held until it answers."""
    wait(lambda: bot.store.job(job["id"])["status"] == "queued", what="the trial queued")
    leased = bot.queue.lease("w1", 0)
    assert leased["id"] == job["id"]
    report = reports.fail(reports.new_report("llm-infer", {}), "crash", "boom", "run")
    bot.queue.finish(job["id"], "w1", leased["lease"], report)


def posted_in(fake_slack, channel: str) -> list[dict]:
    return [p for p in fake_slack.posts() if p["channel"] == channel]


def slash(bot, text: str, channel: str, user: str = "U1", **kw):
    body = slash_body(text, channel=channel, user=user, **kw)
    return post(bot.server.url + "/slack/events", body, signed_headers("s3cret", body))


def test_a_channel_the_bot_is_not_in_goes_to_the_requester_and_stops_no_other(bot, fake_slack):
    # The bot is removed from CBAD after /trial was answered there: Slack refuses.
    assert "Queued as *T1*" in slash(bot, QUICK, "CBAD",
                                     response_url=fake_slack.api_url + "respond-bad")[1]["text"]
    assert "Queued as *T2*" in slash(bot, QUICK, "CGOOD")[1]["text"]
    fake_slack.channel_errors["CBAD"] = "not_in_channel"
    bad, good = bot.store.job(1), bot.store.job(2)
    run_to_end(bot, bad)
    run_to_end(bot, good)

    # The working channel gets its card and threaded report beside the refused one.
    card, report = wait(lambda: len(posted_in(fake_slack, "CGOOD")) >= 2
                        and posted_in(fake_slack, "CGOOD"), what="CGOOD's messages")
    assert report["thread_ts"] == card["_ts"]
    # The requester reads the trial's messages through the command's response_url,
    # with the fix named; the channel was tried once, not retried.
    said = wait(lambda: len(fake_slack.calls_of("respond-bad")) >= 3
                and fake_slack.calls_of("respond-bad"), what="the response_url posts")
    assert all("not posted in <#CBAD>" in s["text"] and "`/invite @trialbot`" in s["text"]
               for s in said)
    assert "T1* started on *w1*" in said[0]["text"]
    assert "T1 llm-infer FAILED" in said[1]["text"]  # the card's final state, as a message
    assert all(s["response_type"] == "ephemeral" and s["replace_original"] is False
               for s in said)
    refused = [c for c in fake_slack.calls_of("refused") if c["channel"] == "CBAD"]
    assert len(refused) == 1
    assert bot.store.job(bad["id"])["redirect"] == "not_in_channel"
    time.sleep(1)  # a few outbox wake-ups later: nothing more, nothing twice
    assert len(fake_slack.calls_of("respond-bad")) == 3
    assert bot.store.unsent() == []


def test_a_trial_redirected_goes_back_to_its_channel_once_the_bot_is_invited(
        bot, fake_slack, monkeypatch):
    """The card was refused (the bot not in CINV) and went to the requester; the
    bot is invited while the trial runs: its report goes to the channel (a new
    message: the card is not there), and so does every later message."""
    monkeypatch.setattr("bot.delivery.outbox.REDIRECT_RETRY", 0.5)
    url = fake_slack.api_url + "respond-inv"
    assert "Queued as *T1*" in slash(bot, QUICK, "CINV", response_url=url)[1]["text"]
    fake_slack.channel_errors["CINV"] = "not_in_channel"
    wait(lambda: bot.store.job(1)["status"] == "queued", what="T1 queued (held until then)")
    job = bot.store.job(1)
    leased = bot.queue.lease("w1", 0)
    wait(lambda: fake_slack.calls_of("respond-inv"), what="the card, to the requester")
    assert bot.store.job(job["id"])["redirect"] == "not_in_channel"
    del fake_slack.channel_errors["CINV"]  # /invite @trialbot
    time.sleep(0.6)
    report = reports.fail(reports.new_report("llm-infer", {}), "crash", "boom", "run")
    bot.queue.finish(job["id"], "w1", leased["lease"], report)
    posted = wait(lambda: posted_in(fake_slack, "CINV"), what="the report in CINV")
    assert "T1 llm-infer FAILED" in posted[0]["text"] and "thread_ts" not in posted[0]
    assert "not posted in" not in posted[0]["text"]
    assert bot.store.job(job["id"])["redirect"] is None
    wait(lambda: bot.store.unsent() == [], what="nothing left")
    said = [c["text"] for c in fake_slack.calls_of("respond-inv")]
    assert len(said) == 2 and "started on" in said[0] and "FAILED" in said[1]  # card, its end


def test_an_archived_channel_with_the_response_url_spent_reaches_the_requester_by_dm(
        bot, fake_slack):
    assert "Queued as *T1*" in slash(bot, QUICK, "CARCH", user="U1",
                                     response_url=fake_slack.api_url + "respond-old")[1]["text"]
    fake_slack.channel_errors["CARCH"] = "is_archived"  # archived while the trial waited
    fake_slack.expired_urls.add("respond-old")  # and its response_url expired: 404 expired_url
    job = bot.store.job(1)
    run_to_end(bot, job)
    dms = wait(lambda: len(posted_in(fake_slack, "DU1")) >= 3 and posted_in(fake_slack, "DU1"),
               what="the direct messages")
    assert fake_slack.calls_of("conversations.open")[0]["users"] == "U1"
    assert all("<#CARCH> is archived" in d["text"] for d in dms)
    assert len(fake_slack.calls_of("expired")) == 1  # spent once, never asked again
    rows = bot.store.db.execute("select sent_via from outbox where job = ? and sent is not null",
                                [job["id"]]).fetchall()
    assert {r[0] for r in rows} == {"dm"}


def test_a_message_slack_refuses_as_too_long_is_set_aside_and_its_requester_told(
        bot, fake_slack):
    fake_slack.errors["chat.postMessage"] = ["msg_too_long"]  # the card is refused once
    assert "Queued as *T1*" in slash(bot, QUICK, "C5")[1]["text"]
    job = bot.store.job(1)
    run_to_end(bot, job)
    note = wait(lambda: fake_slack.calls_of("chat.postEphemeral"), what="the ephemeral note")[0]
    assert note["channel"] == "C5" and note["user"] == "U1"
    assert "T1's message could not be posted in <#C5>" in note["text"]
    assert "too long" in note["text"] and "`/trial status T1`" in note["text"]
    # The channel itself works: the report still goes there, unthreaded (its card is gone).
    report = wait(lambda: posted_in(fake_slack, "C5"), what="the report")[0]
    assert "T1 llm-infer FAILED" in report["text"] and "thread_ts" not in report
    given_up = bot.store.db.execute("select kind, last_error from outbox where given_up is not "
                                    "null order by id").fetchall()
    assert given_up == [("started", "msg_too_long"),
                        ("summary", "the message to update was given up")]
    assert bot.store.job(job["id"])["redirect"] is None  # later messages still go to C5


def test_a_slow_channel_delays_only_its_own_messages(bot, fake_slack):
    fake_slack.delays["CSLOW"] = 4.0
    bot.store.add_messages([{"channel": "CSLOW", "text": f"slow {i}"} for i in range(2)])
    bot.store.add_messages([{"channel": "CFAST", "text": f"fast {i}"} for i in range(5)])
    bot.outbox.wake()
    t0 = time.monotonic()
    wait(lambda: len(posted_in(fake_slack, "CFAST")) == 5, timeout=3, what="CFAST")
    assert time.monotonic() - t0 < 3
    assert [p["text"] for p in posted_in(fake_slack, "CFAST")] == [f"fast {i}" for i in range(5)]
    wait(lambda: len(posted_in(fake_slack, "CSLOW")) == 2, timeout=20, what="CSLOW")
    assert [p["text"] for p in posted_in(fake_slack, "CSLOW")] == ["slow 0", "slow 1"]


@pytest.mark.parametrize("channel, info, said", [
    ("CNOTIN", {"is_member": False}, "I am not a member of <#CNOTIN>: invite me with "
                                     "`/invite @trialbot` there"),
    ("CARCH", {"is_archived": True}, "<#CARCH> is archived"),
    ("CPRIV", "channel_not_found", "I cannot see <#CPRIV>"),
])
def test_trial_in_a_channel_the_bot_cannot_post_in_ends_unrun_and_its_requester_is_told(
        bot, fake_slack, channel, info, said):
    fake_slack.channel_info[channel] = info
    status, reply = slash(bot, "sweep llm-infer gen=2 batch=1,2", channel,
                          response_url=fake_slack.api_url + "respond")
    assert status == 200 and reply["response_type"] == "ephemeral"
    assert f"Held until Slack confirms I may post in <#{channel}>" in reply["text"]
    assert "Queued sweep *S1*" in reply["text"]  # what it becomes once Slack says yes
    note = wait(lambda: fake_slack.calls_of("respond"), what="the requester's note")
    assert len(note) == 1 and note[0]["response_type"] == "ephemeral"
    assert note[0]["text"].startswith(f":x: T1, T2 will not run: {said}")
    assert note[0]["text"].endswith("; then run the command again.")
    jobs = bot.store.jobs()
    assert [(j["status"], j["worker"]) for j in jobs] == [("cancelled", None)] * 2  # never ran
    assert said in jobs[0]["report"]["error"]["message"]
    assert [c["channel"] for c in fake_slack.calls_of("conversations.info")] == [channel]
    assert not fake_slack.posts()  # nothing was posted in the channel


def test_slack_is_asked_about_a_channel_once_however_many_commands_wait(bot, fake_slack):
    fake_slack.delays["CBUSY"] = 1.0  # conversations.info answers after a second
    t0 = time.monotonic()
    replies = [slash(bot, "llm-infer gen=2", "CBUSY")[1]["text"] for _ in range(5)]
    assert time.monotonic() - t0 < 2.5  # no ack waited on Slack's answer
    assert all("Held until Slack confirms" in r for r in replies)
    wait(lambda: all(j["status"] == "queued" for j in bot.store.jobs()), what="all queued")
    assert len(bot.store.jobs()) == 5
    assert [c["channel"] for c in fake_slack.calls_of("conversations.info")] == ["CBUSY"]
    assert "Held" not in slash(bot, "llm-infer gen=2", "CBUSY")[1]["text"]  # a yes is cached


def test_trial_is_queued_where_slack_says_the_bot_is_a_member_or_cannot_say(bot, fake_slack):
    status, reply = slash(bot, "llm-infer gen=2", "C1")
    assert "Queued as *T1*" in reply["text"]
    wait(lambda: bot.store.job(1)["status"] == "queued", what="T1 queued")
    assert "Held" not in slash(bot, "llm-infer gen=2", "C1")[1]["text"]  # a yes is cached
    assert len(fake_slack.calls_of("conversations.info")) == 1
    fake_slack.channel_info["CNOSCOPE"] = "missing_scope"  # an install without channels:read
    assert "Queued as *T3*" in slash(bot, "llm-infer gen=2", "CNOSCOPE")[1]["text"]
    wait(lambda: bot.store.job(3)["status"] == "queued", what="T3 queued")
    assert bot.store.job(1)["response_url"] == "http://127.0.0.1:9/unused"  # from the command


def test_a_refusal_in_the_outbox_makes_the_next_trial_there_ask_slack_again(bot, fake_slack):
    assert "Queued as *T1*" in slash(bot, "llm-infer gen=2", "C9",
                                     response_url=fake_slack.api_url + "respond-1")[1]["text"]
    fake_slack.channel_errors["C9"] = "not_in_channel"  # the bot is removed from C9
    run_to_end(bot, bot.store.job(1))
    wait(lambda: fake_slack.calls_of("refused"), what="the refusal")
    fake_slack.channel_info["C9"] = {"is_member": False}
    wait(lambda: "Held until Slack confirms" in slash(
        bot, "llm-infer gen=2", "C9", response_url=fake_slack.api_url + "respond")[1]["text"],
        what="the next trial held")
    note = wait(lambda: fake_slack.calls_of("respond"), what="the refusal to its requester")
    assert "will not run: I am not a member of <#C9>" in note[-1]["text"]
    assert all(j["status"] != "queued" for j in bot.store.jobs())


def test_an_old_yes_is_used_at_once_and_asked_again_after_the_ack(bot, fake_slack):
    slash(bot, "llm-infer gen=2", "COLD")
    wait(lambda: bot.store.job(1)["status"] == "queued", what="T1 queued")
    bot.ctx.channels.ok["COLD"] -= bot.ctx.channels.ttl + 1  # the yes is past its TTL
    fake_slack.channel_info["COLD"] = {"is_member": False}  # and the bot was removed since
    reply = slash(bot, "llm-infer gen=2", "COLD")[1]["text"]
    assert "Queued as *T2*" in reply and "Held" not in reply  # the old yes answers
    assert bot.store.job(2)["status"] == "queued"
    wait(lambda: len(fake_slack.calls_of("conversations.info")) == 2, what="asked again")
    wait(lambda: "COLD" not in bot.ctx.channels.ok, what="the yes forgotten")
    assert "Held" in slash(bot, "llm-infer gen=2", "COLD")[1]["text"]


def test_classify_sorts_slack_errors():
    assert refusals.classify("not_in_channel") == "channel"
    assert refusals.classify("msg_too_long") == "message"
    assert refusals.classify("invalid_auth", tries=50) == "retry"  # the app's trouble: waits
    assert refusals.classify("something_new", tries=0) == "retry"
    assert refusals.classify("something_new", tries=refusals.UNKNOWN_TRIES) == "message"


def test_a_digest_the_channel_refuses_reaches_who_asked_for_it(bot, fake_slack):
    import datetime as dt

    from bot import commands
    fake_slack.channel_errors["CDIG"] = "not_in_channel"  # conversations.info still says member
    out = commands.plan(bot.ctx, "digest now", "U1", "CDIG", dt.date(2026, 12, 1))
    assert "Posting the budget digest" in out["text"]
    dms = wait(lambda: len(posted_in(fake_slack, "DU1")) >= 1 and posted_in(fake_slack, "DU1"),
               what="the digest by direct message")
    assert "Weekly budget digest" in dms[0]["text"] and "not posted in <#CDIG>" in dms[0]["text"]
    wait(lambda: fake_slack.calls_of("files.completeUploadExternal"), what="the chart")
    assert fake_slack.calls_of("files.completeUploadExternal")[0]["channel_id"] == "DU1"


def test_a_plan_export_in_a_channel_the_bot_is_not_in_reaches_the_requester(bot, fake_slack):
    fake_slack.channel_info["CNOTIN"] = {"is_member": False}
    fake_slack.channel_errors["CNOTIN"] = "not_in_channel"
    url = fake_slack.api_url + "respond"  # (files never go by a response_url)
    for text in ("new repro", "repro export"):
        body = slash_body(text, command="/plan", channel="CNOTIN", response_url=url)
        t0 = time.monotonic()
        status, reply = post(bot.server.url + "/slack/events", body,
                             signed_headers("s3cret", body))
        assert status == 200 and time.monotonic() - t0 < 2  # no ack waits on Slack
    assert "Exporting plan *repro*" in reply["text"]
    # The channel refuses the files: they come to the requester by direct message.
    wait(lambda: len(fake_slack.calls_of("files.completeUploadExternal")) == 3, what="files")
    assert {c["channel_id"] for c in fake_slack.calls_of("files.completeUploadExternal")} \
        == {"DU1"}
    # Slack was asked about the channel once, after the reply.
    assert [c["channel"] for c in fake_slack.calls_of("conversations.info")] == ["CNOTIN"]
