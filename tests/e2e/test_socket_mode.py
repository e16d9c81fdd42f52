"""`trialbot serve` in Socket Mode, end to end over a real loopback WebSocket
(tests/socketfake.py): slash commands and clicks arrive as envelopes, answers
go back as acks, and the bot survives Slack closing or refreshing the socket.
One bot process and one worker serve the whole module, in file order."""
from __future__ import annotations

import json
import os
import re
import sqlite3
import time
import urllib.parse

import pytest

from bot.trials import card
from conftest import BIN, Proc, free_port, wait_for, wait_http
from slackfake import FakeSlack, slash_body
from socketfake import SocketFake

QUICK = "llm-infer gen=2 repeats=1 stability=0 processes=1"


@pytest.fixture(scope="module")
def sm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("socket-mode")
    slack, socket = FakeSlack(), SocketFake()
    slack.socket_mode = socket
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIALBOT_"))}
    env.update(SLACK_BOT_TOKEN="xoxb-test", SLACK_APP_TOKEN="xapp-test",
               TRIALBOT_WORKER_TOKEN="wtoken", SLACK_API_URL=slack.api_url,
               TRIALBOT_DB=str(tmp / "bot.db"), TRIALBOT_PORT=str(free_port()),
               TRIALBOT_HOST="127.0.0.1", TRIALBOT_RUN_USERS="U1", TRIALBOT_ADMINS="UADMIN")
    bot = Proc([str(BIN / "trialbot"), "serve"], env, tmp / "bot.log")  # no signing secret
    url = f"http://127.0.0.1:{env['TRIALBOT_PORT']}"
    worker = Proc([str(BIN / "trialbot-worker"), "--server", url, "--name", "sm-cpu"],
                  dict(os.environ, TRIALBOT_WORKER_TOKEN="wtoken"), tmp / "worker.log")
    try:
        wait_http(url + "/healthz")
        socket.wait_connections(1)
    except AssertionError:
        worker.stop()
        raise AssertionError(bot.stop())
    sm = Session(slack, socket, env["TRIALBOT_DB"])
    yield sm
    log = bot.stop()  # first: a worker stopped mid long-poll would break the bot's answer
    worker.stop()
    socket.close()
    slack.close()
    assert "Traceback" not in log, log


class Session:
    def __init__(self, slack, socket, db):
        self.slack, self.socket, self.db = slack, socket, db

    def slash(self, text: str, command: str = "/trial", **kw) -> tuple[str, dict]:
        """Delivers a slash command; returns (envelope_id, the payload delivered)."""
        payload = dict(urllib.parse.parse_qsl(slash_body(text, command=command, **kw)))
        return self.socket.deliver("slash_commands", payload), payload

    def say(self, text: str, command: str = "/trial") -> str:
        envelope_id, _ = self.slash(text, command)
        return self.socket.wait_ack(envelope_id).payload["text"]

    def click(self, action_id: str, job_id: int, user: str = "U1",
              ts: str = "1700000000.000100") -> tuple[str, dict]:
        payload = {"type": "block_actions", "team": {"id": "T0"},
                   "user": {"id": user, "name": "ada"}, "api_app_id": "A1", "token": "legacy",
                   "trigger_id": f"click.{time.monotonic_ns()}", "channel": {"id": "C1"},
                   "container": {"type": "message", "message_ts": ts, "channel_id": "C1"},
                   "response_url": self.slack.api_url + "respond",
                   "actions": [{"action_id": action_id, "block_id": f"trial_{job_id}",
                                "value": str(job_id), "type": "button", "action_ts": "1"}]}
        return self.socket.deliver("interactive", payload, accepts_response_payload=False), \
            payload

    def responses(self, n: int, timeout: float = 10) -> list[dict]:
        """The first n answers posted to the clicks' response_url."""
        deadline = time.monotonic() + timeout
        while len(self.slack.calls_of("respond")) < n:
            assert time.monotonic() < deadline, self.slack.calls
            time.sleep(0.05)
        return self.slack.calls_of("respond")

    def jobs(self) -> list[tuple]:
        with sqlite3.connect(self.db) as db:
            return db.execute("select id, status, plan from jobs order by id").fetchall()

    def reconnected(self, before: int) -> float:
        """Seconds until the bot opened connection before+1, through apps.connections.open."""
        t0 = time.monotonic()
        self.socket.wait_connections(before + 1)
        assert len(self.slack.calls_of("apps.connections.open")) == before + 1
        return time.monotonic() - t0


def queued(text: str) -> int:
    found = re.search(r"Queued as \*T(\d+)\*", text)
    assert found, text
    return int(found.group(1))


def test_trial_over_socket_mode_is_acked_in_time_and_reported(sm):
    envelope_id, _ = sm.slash("llm-infer batch=2 prompt=32 gen=8 repeats=3 stability=0")
    ack = sm.socket.wait_ack(envelope_id)
    assert ack.seconds < 3, "Slack drops acks after 3 seconds"
    assert ack.payload["response_type"] == "ephemeral"
    assert queued(ack.payload["text"]) == 1

    started, report = sm.slack.wait_posts(2, timeout=90)
    assert started["channel"] == "C1" and "T1* started on *sm-cpu*" in started["text"]
    assert report["thread_ts"] == started["_ts"]
    assert "T1 llm-infer ok on sm-cpu" in report["text"]
    blocks = json.loads(report["blocks"]) if isinstance(report["blocks"], str) else report["blocks"]
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert any(f.startswith("*Latency per request*\np50") for f in fields)
    assert "*done* on sm-cpu" in sm.say("status T1")


def test_a_closed_socket_is_reopened_and_a_redelivery_queues_nothing(sm):
    envelope_id, payload = sm.slash(QUICK)
    trial = queued(sm.socket.wait_ack(envelope_id).payload["text"])
    opened = len(sm.slack.calls_of("apps.connections.open"))
    sm.socket.drop()  # Slack (or the network) cuts the socket mid-session
    # slack_sdk notices within its ping interval (5 s, bot/slack/socketmode.py)
    assert sm.reconnected(opened) < 8
    # Slack redelivers on the new socket: the same envelope, then the same
    # command under a new envelope_id; both carry the same trigger_id.
    sm.socket.deliver("slash_commands", payload, envelope_id)
    again = sm.socket.wait_ack(envelope_id, nth=2)
    assert again.seconds < 3
    assert "Already received" in again.payload["text"]
    assert f"queued T{trial}" in again.payload["text"]
    other = sm.socket.deliver("slash_commands", payload)
    assert f"queued T{trial}" in sm.socket.wait_ack(other).payload["text"]
    assert len(sm.jobs()) == trial  # one job, T{trial}, the newest
    assert f"*T{trial}*" in sm.say(f"status T{trial}")  # the next command is handled


def test_a_refresh_requested_disconnect_is_followed_and_a_redelivery_queues_nothing(sm):
    envelope_id, payload = sm.slash(QUICK)
    trial = queued(sm.socket.wait_ack(envelope_id).payload["text"])
    opened = len(sm.slack.calls_of("apps.connections.open"))
    old = sm.socket.connections[-1]
    sm.socket.refresh()
    assert sm.reconnected(opened) < 3  # Slack closes the old socket about 10 s later
    # At once on the new socket, while the client still reads the old one: with
    # slack_sdk's 3 s read timeout this ack took 2.8-3.1 s, with ours 1.05-1.09 s
    # (bot/slack/socketmode.py); the bound leaves a loaded box room between them.
    sm.socket.deliver("slash_commands", payload, envelope_id)
    again = sm.socket.wait_ack(envelope_id, nth=2)
    assert again.seconds < 2.5 and f"queued T{trial}" in again.payload["text"]
    sm.socket.wait_ended(old)  # the bot closed the old socket itself
    assert len(sm.jobs()) == trial
    assert f"*T{trial}*" in sm.say(f"status T{trial}")  # the next command is handled


def test_cancel_rerun_and_add_to_plan_work_over_socket_mode(sm):
    before = len(sm.slack.calls_of("respond"))
    queued(sm.say(QUICK))
    trial = queued(sm.say(QUICK))  # waits behind the first: the worker runs one at a time
    envelope_id, _ = sm.click(card.CANCEL, trial)
    assert sm.socket.wait_ack(envelope_id).payload in (None, {})
    assert "is cancelled; it will not run" in sm.responses(before + 1)[before]["text"]
    assert dict((j[0], j[1]) for j in sm.jobs())[trial] == "cancelled"

    envelope_id, payload = sm.click(card.RERUN, 1)
    sm.socket.wait_ack(envelope_id)
    rerun = queued(sm.responses(before + 2)[before + 1]["text"])
    sm.socket.deliver("interactive", payload, envelope_id)  # redelivered: queues nothing
    sm.socket.wait_ack(envelope_id, nth=2)
    assert "Already received" in sm.responses(before + 3)[before + 2]["text"]
    assert len(sm.jobs()) == rerun

    assert "Plan *repro* started" in sm.say("new repro gpu=cpu", "/plan")
    wait_for(lambda: sm.jobs()[0][1] == "done", timeout=60, what="T1 done")  # a block needs it
    assert "baseline block added" in sm.say("repro block baseline runs=8 trial=T1", "/plan")
    envelope_id, click = sm.click(card.ADD_TO_PLAN, rerun)
    sm.socket.wait_ack(envelope_id)
    # the modal opens right after the ack, within the trigger's 3 s
    opened = wait_for(lambda: sm.slack.calls_of("views.open"), timeout=3, what="views.open")
    assert len(opened) == 1 and opened[0]["trigger_id"] == click["trigger_id"]
    view = json.loads(opened[0]["view"]) if isinstance(opened[0]["view"], str) \
        else opened[0]["view"]
    assert [o["value"] for o in view["blocks"][0]["element"]["options"]] == ["repro|baseline"]

    def submit(value: str):
        state = {"block": {"choice": {"type": "static_select",
                                      "selected_option": {"value": value}}}}
        payload = {"type": "view_submission", "team": {"id": "T0"},
                   "user": {"id": "U1", "name": "ada"}, "api_app_id": "A1",
                   "trigger_id": f"submit.{time.monotonic_ns()}",
                   "view": dict(view, id="V1", type="modal", state={"values": state})}
        return sm.socket.wait_ack(sm.socket.deliver("interactive", payload)).payload

    refused = submit("repro|verify")  # answered in the modal, through the ack
    assert refused["response_action"] == "errors" and "has no such block" in \
        refused["errors"]["block"]
    assert submit("repro|baseline") in (None, {})
    # the confirmation is posted after the ack
    told = wait_for(lambda: sm.slack.calls_of("chat.postEphemeral"), what="the confirmation")[-1]
    assert f"T{rerun} now counts as an actual of plan *repro*" in told["text"]
    assert dict((j[0], j[2]) for j in sm.jobs())[rerun] == "repro"
