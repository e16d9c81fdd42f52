"""Each named listener callback called directly, as Bolt's starter template
tests its listeners: mocked ack / respond / client, and the real core (a
Context on a real SQLite store). The signed-HTTP path through Bolt is
tests/test_listeners.py's."""
import re
from unittest.mock import Mock

import pytest

from bot.app.runtime import context
from bot.slack.listeners import actions, commands, views
from bot.store import Store
from bot.trials import card, tags
from bot.trials import command as trial_command

QUICK = "llm-infer gen=2 repeats=1 stability=0"


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "l.db")), admins=frozenset({"UADMIN"}))


def bolt(ctx) -> dict:
    return {"trialbot": ctx}  # what the app's middleware puts in Bolt's context


def slash(text: str, user: str = "U1", channel: str = "C1") -> dict:
    return {"text": text, "user_id": user, "channel_id": channel, "trigger_id": f"t-{text}",
            "response_url": "https://hooks.slack.test/r"}


def click(job_id: int, user: str = "U1", ts: str = "1700000000.000100") -> dict:
    return {"user": {"id": user}, "trigger_id": f"click-{user}-{ts}", "channel": {"id": "C1"},
            "container": {"message_ts": ts}, "response_url": "https://hooks.slack.test/b"}


def said(respond: Mock) -> str:
    respond.assert_called_once()
    kw = respond.call_args.kwargs
    assert kw["response_type"] == "ephemeral" and kw["replace_original"] is False
    return kw["text"]


def test_trial_callback_queues_and_acks_the_reply(ctx):
    ack = Mock()
    commands.trial_callback(ack=ack, command=slash(QUICK), context=bolt(ctx))
    reply = ack.call_args.kwargs
    assert reply["response_type"] == "ephemeral" and "Queued as *T1*" in reply["text"]
    job = ctx.store.job(1)
    assert job["channel"] == "C1" and job["response_url"] == "https://hooks.slack.test/r"


def test_trial_callback_answers_bad_input_and_queues_nothing(ctx):
    ack = Mock()
    commands.trial_callback(ack=ack, command=slash("llm-infer batch=0"), context=bolt(ctx))
    assert "`batch=0`" in ack.call_args.kwargs["text"] and ctx.store.jobs() == []


def test_plan_callback_creates_a_plan_in_its_channel(ctx):
    ack = Mock()
    commands.plan_callback(ack=ack, command=slash("new repro gpu=H100", channel="C7"),
                           context=bolt(ctx))
    assert "Plan *repro* started" in ack.call_args.kwargs["text"]
    assert ctx.store.plan("repro")["channel"] == "C7"


def test_cancel_callback_cancels_the_owners_queued_trial_and_refuses_others(ctx):
    commands.trial_callback(ack=Mock(), command=slash(QUICK), context=bolt(ctx))
    respond = Mock()
    ack = Mock()
    # The work and the answer come after the ack (bot/slack/later.py): the callback
    # returns their future.
    actions.cancel_callback(ack=ack, body=click(1, user="U2"), action={"value": "1"},
                            respond=respond, context=bolt(ctx)).result(10)
    ack.assert_called_once_with()
    assert "only they or an admin can cancel it" in said(respond)
    respond = Mock()
    actions.cancel_callback(ack=Mock(), body=click(1), action={"value": "1"},
                            respond=respond, context=bolt(ctx)).result(10)
    assert "is cancelled; it will not run" in said(respond)
    assert ctx.store.job(1)["status"] == "cancelled"


def test_rerun_callback_queues_once_per_double_click(ctx):
    commands.trial_callback(ack=Mock(), command=slash(QUICK), context=bolt(ctx))
    first, second = Mock(), Mock()
    for respond in (first, second):
        ack = Mock()
        body = click(1)
        body["trigger_id"] = f"{body['trigger_id']}-{id(respond)}"  # a new click, a new id
        actions.rerun_callback(ack=ack, body=body, action={"value": "1"}, respond=respond,
                               context=bolt(ctx)).result(10)
        ack.assert_called_once_with()
    assert "Queued as *T2*" in said(first)
    assert "your click on this card queued T2" in said(second)
    assert [j["trial"] for j in ctx.store.jobs()] == ["T2", "T1"]


def test_add_to_plan_callback_opens_the_modal_with_this_channels_blocks(ctx):
    commands.trial_callback(ack=Mock(), command=slash(QUICK), context=bolt(ctx))
    client, respond = Mock(), Mock()
    actions.add_to_plan_callback(ack=Mock(), body=click(1), action={"value": "1"},
                                 client=client, respond=respond, context=bolt(ctx)).result(10)
    assert "No plan of this channel has a block yet" in said(respond)
    client.views_open.assert_not_called()
    ctx.store.add_plan("repro", "C1", "U1", {})
    ctx.store.put_block({"plan": "repro", "kind": "baseline", "runs": 5, "trials": [1]})
    actions.add_to_plan_callback(ack=Mock(), body=click(1), action={"value": "1"},
                                 client=client, respond=Mock(), context=bolt(ctx)).result(10)
    view = client.views_open.call_args.kwargs["view"]
    assert view["callback_id"] == card.PLAN_MODAL
    assert [o["value"] for o in view["blocks"][0]["element"]["options"]] == ["repro|baseline"]
    assert client.timeout == actions.VIEWS_OPEN_SECONDS and client.retry_handlers == []
    # Slack too slow for the trigger: the user reads why and clicks again
    client.views_open.side_effect = TimeoutError("timed out")
    respond = Mock()
    actions.add_to_plan_callback(ack=Mock(), body=click(1), action={"value": "1"},
                                 client=client, respond=respond, context=bolt(ctx)).result(10)
    assert "Slack did not open the dialog (TimeoutError); click *Add to plan…* again" \
        in said(respond)


def test_plan_modal_callback_tags_the_trial_or_answers_in_the_modal(ctx):
    commands.trial_callback(ack=Mock(), command=slash(QUICK), context=bolt(ctx))
    ctx.store.add_plan("repro", "C1", "U1", {})
    ctx.store.put_block({"plan": "repro", "kind": "baseline", "runs": 5, "trials": [1]})

    def submit(value):
        ack, client = Mock(), Mock()
        view = {"private_metadata": "1", "state": {"values": {"block": {"choice": {
            "selected_option": {"value": value}}}}}}
        after = views.plan_modal_callback(ack=ack, body={"user": {"id": "U1"}}, view=view,
                                          client=client, context=bolt(ctx))
        if after:  # the confirmation, posted after the ack
            after.result(10)
        return ack, client

    ack, client = submit("repro|verify")
    assert "has no such block" in ack.call_args.kwargs["errors"]["block"]
    assert ctx.store.job(1)["plan"] is None and not client.chat_postEphemeral.called
    ack, client = submit("repro|baseline")
    ack.assert_called_once_with()
    assert ctx.store.job(1)["plan"] == "repro"
    assert "counts as an actual of plan *repro*" in \
        client.chat_postEphemeral.call_args.kwargs["text"]


def test_a_click_or_a_modal_that_fails_unexpectedly_is_answered_with_an_error_id(
        ctx, monkeypatch, caplog):
    commands.trial_callback(ack=Mock(), command=slash(QUICK), context=bolt(ctx))

    def boom(*args, **kwargs):
        raise RuntimeError("boom inside a click")
    monkeypatch.setattr(trial_command, "cancel", boom)
    respond = Mock()
    actions.cancel_callback(ack=Mock(), body=click(1), action={"value": "1"},
                            respond=respond, context=bolt(ctx)).result(10)
    error_id = re.search(r"Something went wrong \(error id ([0-9a-f]{8})\)", said(respond))[1]
    assert any(error_id in r.getMessage() and r.exc_info for r in caplog.records)
    monkeypatch.setattr(tags, "add", boom)
    ack = Mock()
    view = {"private_metadata": "1", "state": {"values": {}}}
    assert views.plan_modal_callback(ack=ack, body={"user": {"id": "U1"}}, view=view,
                                     client=Mock(), context=bolt(ctx)) is None
    assert "Something went wrong (error id" in ack.call_args.kwargs["errors"]["block"]
    assert "boom inside a click" in caplog.text and "Traceback" in caplog.text
