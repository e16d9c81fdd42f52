"""Each Slack listener, through the real Bolt app and HTTP server in-process,
with requests signed as Slack signs them."""
import re

from bot.blocks import reply
from bot.plans import views as plan_views
from bot.trials import command as trial_command
from slackfake import post, signed_headers, slash_body


def command(bot, text, name="/trial"):
    body = slash_body(text, command=name)
    status, reply = post(bot.server.url + "/slack/events", body, signed_headers("s3cret", body))
    assert status == 200
    return reply


def test_trial_help_lists_workloads_and_parameters(bot):
    reply = command(bot, "help")
    assert "llm-infer" in reply["text"] and "`/trial help sweep`" in reply["text"]
    assert "`kv_heads=2`" in command(bot, "help llm-infer")["text"]
    assert reply["response_type"] == "ephemeral"


def test_trial_queues_and_names_no_worker_when_none_is_online(bot, fake_slack):
    reply = command(bot, "llm-infer batch=4 prompt=512 gen=64 dtype=bf16")
    assert "Queued as *T1*" in reply["text"] and "none is online" in reply["text"]
    job = bot.store.job(1)
    assert job["spec"]["params"]["dtype"] == "bf16" and job["channel"] == "C1"
    assert job["user"] == "U1"
    assert fake_slack.posts() == []  # nothing posted until a worker starts it


def test_trial_status_of_unknown_trial(bot):
    assert "no trial T99" in command(bot, "status T99")["text"]


def test_plan_new_then_show_and_a_bad_block(bot):
    reply = command(bot, "new repro gpu=H100", name="/plan")
    assert "Plan *repro* started" in reply["text"] and reply["response_type"] == "ephemeral"
    assert bot.store.plan("repro")["facts"]["gpu"] == "H100-80GB"
    shown = command(bot, "repro show", name="/plan")
    assert shown["response_type"] == "in_channel" and "No blocks yet" in shown["text"]
    bad = command(bot, "repro block baseline runs=5 trial=T7", name="/plan")
    assert "There is no trial T7" in bad["text"] and bot.store.blocks("repro") == []


def test_a_long_reply_is_split_into_sections_not_cut():
    text = trial_command.help_text()
    blocks = reply(text)["blocks"]
    assert len(text) > 3000 and all(len(b["text"]["text"]) <= 3000 for b in blocks)
    assert "".join(b["text"]["text"] for b in blocks).replace("\n", "") == text.replace("\n", "")


def test_plan_calibration_through_slack_with_no_actuals_says_uncalibrated(bot):
    reply = command(bot, "calibration", name="/plan")
    assert reply["response_type"] == "ephemeral"
    assert "No actuals recorded yet" in reply["text"] and "every interval is uncalibrated" in (
        reply["text"])
    bad = command(bot, "calibration please", name="/plan")
    assert "`/plan calibration` takes nothing more" in bad["text"]


def _error_id(text: str) -> str:
    m = re.search(r"Something went wrong \(error id ([0-9a-f]{8})\)\. Tell whoever runs the "
                  r"bot, with this id\.", text)
    assert m, text
    return m.group(1)


def _logged(caplog, error_id: str, boom: str) -> None:
    """The log has the failure at ERROR under that id, with its traceback."""
    [record] = [r for r in caplog.records if error_id in r.getMessage()]
    assert record.levelname == "ERROR" and record.exc_info
    assert boom in caplog.text and "Traceback" in caplog.text


def test_a_trial_that_fails_unexpectedly_is_answered_with_an_error_id(bot, monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise RuntimeError("boom inside /trial")
    monkeypatch.setattr(trial_command.views, "queued", boom)  # after the job is stored
    reply = command(bot, "llm-infer batch=4 prompt=512 gen=64")
    assert reply["response_type"] == "ephemeral" and "Traceback" not in reply["text"]
    _logged(caplog, _error_id(reply["text"]), "boom inside /trial")
    monkeypatch.undo()  # the bot answers the next command as ever
    assert "no trial T99" in command(bot, "status T99")["text"]


def test_a_plan_that_fails_unexpectedly_is_answered_with_an_error_id(bot, monkeypatch, caplog):
    def boom(*args, **kwargs):
        raise KeyError("boom inside /plan")
    monkeypatch.setattr(plan_views, "plan_list", boom)
    reply = command(bot, "list", name="/plan")
    assert reply["response_type"] == "ephemeral"
    _logged(caplog, _error_id(reply["text"]), "boom inside /plan")


def test_the_error_reply_speaks_the_channels_language(bot, monkeypatch, caplog):
    bot.store.set_channel_lang("C1", "ko", "U1")
    monkeypatch.setattr(trial_command.views, "job_list", lambda *a: 1 / 0)
    text = command(bot, "list")["text"]
    assert "오류 ID" in text and re.search(r"[0-9a-f]{8}", text)
    assert "ZeroDivisionError" in caplog.text


def test_the_context_is_frozen_and_the_slack_app_fills_only_its_slack_parts(bot):
    import dataclasses

    import pytest

    from bot.slack import channels, groups
    assert isinstance(bot.ctx.channels, channels.ChannelCheck)  # what build_app gave
    assert isinstance(bot.ctx.members, groups.Members)
    assert bot.ctx.digests is bot.digests and not hasattr(bot.ctx, "tag_notes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        bot.ctx.policy = None
