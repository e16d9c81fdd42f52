"""Who may do what (bot/access.py) and secrets kept out of logs and reports."""
import dataclasses
import datetime as dt
import io
import json
import logging
import subprocess
import threading
import time
import urllib.parse

import pytest

from bot import access, commands
from bot.access import Policy
from bot.app import config, console
from bot.app.config import ConfigError
from bot.app.console import ConsoleTransport
from bot.app.runtime import Runtime, context
from bot.slack import groups as slackgroups
from bot.store import Store
from conftest import BIN, ROOT, bolt_runtime, wait_for
from slackfake import post, signed_headers, slash_body
from worker import recipes, redact
from worker.agent import Agent
from worker.client import Client
from worker.spec import parse

QUICK = ("llm-infer gen=2 repeats=1 stability=0 layers=1 hidden=64 heads=2 kv_heads=1 vocab=256 "
         "processes=1")
TODAY = dt.date(2026, 12, 1)
PRICE = "price H100 2.49/h source=quote date=2026-11-30"


def queue_with(tmp_path, policy):
    return context(Store(str(tmp_path / "a.db")), policy=policy)


# --- loading ---------------------------------------------------------------------


def test_env_settings_are_read_and_checked():
    p = config.load_access({"TRIALBOT_RUN_USERS": "U1, W2", "TRIALBOT_RUN_CHANNELS": "C1,G2",
                     "TRIALBOT_RUN_USERGROUPS": "S1", "TRIALBOT_ADMINS": "UADMIN",
                     "TRIALBOT_ADMIN_USERGROUPS": "S9", "TRIALBOT_RUN_EVERYONE": "0"})
    assert p == Policy(frozenset({"U1", "W2"}), frozenset({"S1"}), frozenset({"C1", "G2"}),
                       frozenset({"UADMIN"}), frozenset({"S9"}), False)
    assert config.load_access({}) == Policy() and not Policy().configured


@pytest.mark.parametrize("env, says", [
    ({"TRIALBOT_ADMINS": "bob"}, "TRIALBOT_ADMINS: 'bob' is not a Slack user id (U… or W…)"),
    ({"TRIALBOT_RUN_USERS": "U1,C2"}, "TRIALBOT_RUN_USERS: 'C2' is not a Slack user id"),
    ({"TRIALBOT_RUN_CHANNELS": "#gpu"}, "'#gpu' is not a Slack channel id (C… or G…)"),
    ({"TRIALBOT_RUN_USERGROUPS": "U1"}, "'U1' is not a Slack user group id (S…)"),
    ({"TRIALBOT_RUN_EVERYONE": "maybe"}, "TRIALBOT_RUN_EVERYONE: 'maybe' is not true or false"),
    ({"TRIALBOT_CONFIG": "/nonexistent/trialbot.toml"}, "cannot read it"),
])
def test_bad_env_settings_are_one_line_errors(env, says):
    with pytest.raises(ConfigError) as err:
        config.load_access(env)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_toml_file_and_env_that_replaces_a_key(tmp_path):
    path = tmp_path / "trialbot.toml"
    path.write_text('[access]\nrun_users = ["U1"]\nrun_channels = ["C7"]\nadmins = ["UA"]\n'
                    "run_everyone = false\n")
    p = config.load_access({"TRIALBOT_CONFIG": str(path), "TRIALBOT_ADMINS": "UB"})
    assert p == Policy(run_users=frozenset({"U1"}), run_channels=frozenset({"C7"}),
                       admins=frozenset({"UB"}))


@pytest.mark.parametrize("body, says", [
    ("[access]\nadmin = [\"U1\"]\n", "unknown key `admin` in [access]"),
    ("[access]\nadmins = \"U1\"\n", "[access] admins: give a list of ids"),
    ("[access]\nrun_channels = [\"general\"]\n", "'general' is not a Slack channel id"),
    ("[access\n", "not valid TOML"),
    ("access = 3\n", "`access` must be a table"),
])
def test_bad_toml_files_are_one_line_errors(tmp_path, body, says):
    path = tmp_path / "trialbot.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as err:
        config.load_access({"TRIALBOT_CONFIG": str(path)})
    assert says in str(err.value) and str(path) in str(err.value)


def test_serve_refuses_to_start_on_bad_access_settings(bot_env, tmp_path):
    env = dict(bot_env, TRIALBOT_ADMINS="ada,UADMIN")
    done = subprocess.run([str(BIN / "trialbot"), "serve"], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "trialbot serve: TRIALBOT_ADMINS: 'ada' is not a Slack user id (U… or W…); give ids "
        "separated by commas, e.g. U0123ABCD"]


# --- the check -------------------------------------------------------------------


def test_unconfigured_nobody_runs_and_the_refusal_says_how_to_configure():
    said = access.allows(Policy(), "run", "U1", "C1")
    assert "Nobody may run trials yet (permission: run)" in said
    assert "TRIALBOT_RUN_USERS" in said and "Who may do what" in said
    said = access.allows(Policy(), "admin", "U1", "C1", what="record prices")
    assert "Only an admin may record prices (permission: admin)" in said
    assert "no admin is configured" in said


def test_who_may_run_and_who_is_admin():
    p = Policy(run_users=frozenset({"U1"}), run_channels=frozenset({"CGPU"}),
               admins=frozenset({"UA"}))
    assert access.allows(p, "run", "U1", "C1") is None
    assert access.allows(p, "run", "U9", "CGPU") is None  # anyone in that channel
    assert access.allows(p, "run", "UA", "C1") is None    # an admin may run
    said = access.allows(p, "run", "U9", "C1")
    assert said == ("You may not run trials here (permission: run): your user is not in "
                    "TRIALBOT_RUN_USERS and this channel is not in TRIALBOT_RUN_CHANNELS. "
                    "Ask an admin (<@UA>) to add you.")
    assert "permission: admin" in access.allows(p, "admin", "U1", "C1")
    assert access.allows(p, "admin", "UA", "C1") is None
    everyone = Policy(run_everyone=True)
    assert access.allows(everyone, "run", "U9", "C9") is None
    assert access.allows(everyone, "admin", "U9", "C9") is not None  # never admin


def test_a_refused_trial_creates_nothing_and_reading_stays_open(tmp_path):
    q = queue_with(tmp_path, Policy(run_users=frozenset({"U1"}), admins=frozenset({"UA"})))
    for words in (QUICK, f"sweep {QUICK.replace('gen=2', 'gen=2,4')}",
                  "ab llm-infer dtype=fp32,bf16", "ladder llm-train budget=24GB"):
        reply, job = commands.trial(q, words, "U9", "C1")
        assert job is None and "permission: run" in reply["text"], reply
        assert "Nothing was queued" in reply["text"]
    assert q.store.jobs(limit=10) == []
    for words in ("help", "list", "workers", "status T1"):
        assert "permission" not in commands.trial(q, words, "U9", "C1")[0]["text"]
    assert commands.trial(q, QUICK, "U1", "C1")[1]["trial"] == "T1"


def test_cancelling_someone_elses_trial_needs_admin(tmp_path):
    q = queue_with(tmp_path, Policy(run_users=frozenset({"U1", "U2"}), admins=frozenset({"UA"})))
    job = commands.trial(q, QUICK, "U1", "C1")[1]
    said = commands.trial(q, f"cancel {job['trial']}", "U2", "C1")[0]["text"]
    assert "only they or an admin can cancel it" in said and "permission: admin" in said
    assert q.store.job(job["id"])["status"] == "queued"
    assert "is cancelled" in commands.trial(q, f"cancel {job['trial']}", "UA",
                                                  "C1")[0]["text"]


def test_prices_digests_and_plan_changes_are_refused_without_creating_rows(tmp_path):
    q = queue_with(tmp_path, Policy(run_users=frozenset({"U1"}), admins=frozenset({"UA"})))

    def say(text, user):
        return commands.plan(q, text, user, "C1", TODAY)["text"]

    said = say(PRICE, "U1")
    assert "Only an admin may record prices (permission: admin)" in said and "<@UA>" in said
    assert "digest" in say("digest weekly mon 09:00 Asia/Seoul", "U1")
    assert q.store.prices() == [] and q.store.digests() == []
    assert "permission: run" in say("new repro", "U9") and q.store.plans() == []
    assert "permission" not in say("prices", "U9") and "permission" not in say("help", "U9")
    assert "Recorded" in say(PRICE, "UA") and len(q.store.prices()) == 1
    assert "Plan" in say("new repro", "U1") and len(q.store.plans()) == 1


def test_the_console_user_is_the_operator_without_any_settings(tmp_path):
    out = io.StringIO()
    console.run(str(tmp_path / "c.db"), False,
                stdin=io.StringIO(f"/plan {PRICE}\n/plan digest weekly mon 09:00 UTC\n"),
                stdout=out)
    assert "Recorded" in out.getvalue() and "Budget digest scheduled" in out.getvalue()
    assert "permission" not in out.getvalue()


# --- through Slack: buttons and user groups ----------------------------------------


def click(rt, fake_slack, action_id, job_id, user):
    payload = {"team": {"id": "T0"}, "user": {"id": user, "name": "x"}, "api_app_id": "A1",
               "token": "legacy", "trigger_id": f"t{time.monotonic()}", "type": "block_actions",
               "channel": {"id": "C1"}, "container": {"type": "message"},
               "response_url": fake_slack.api_url + "respond",
               "actions": [{"action_id": action_id, "block_id": f"trial_{job_id}",
                            "value": str(job_id), "type": "button", "action_ts": "1"}]}
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    return post(rt.server.url + "/slack/events", body, signed_headers("s3cret", body))


def responses(fake_slack, n):
    deadline = time.monotonic() + 10
    while len(fake_slack.calls_of("respond")) < n:
        assert time.monotonic() < deadline, fake_slack.calls
        time.sleep(0.05)
    return fake_slack.calls_of("respond")


def test_rerun_by_a_stranger_is_refused_through_bolt(bot, fake_slack):
    job = commands.trial(bot.ctx, QUICK, "U1", "C1")[1]
    assert click(bot, fake_slack, "trial_rerun", job["id"], "U9")[0] == 200
    said = responses(fake_slack, 1)[0]
    assert "permission: run" in said["text"] and said["response_type"] == "ephemeral"
    assert bot.store.job(2) is None
    assert click(bot, fake_slack, "trial_cancel", job["id"], "U9")[0] == 200
    assert "permission: admin" in responses(fake_slack, 2)[1]["text"]
    assert bot.store.job(job["id"])["status"] == "queued"
    bot.store.add_plan("repro", "C1", "U1", {})
    bot.store.put_block({"plan": "repro", "kind": "baseline", "runs": 5, "trials": ["T1"]})
    click(bot, fake_slack, "trial_add_to_plan", job["id"], "U9")
    assert "may not change plans" in responses(fake_slack, 3)[2]["text"]
    assert fake_slack.calls_of("views.open") == []


@pytest.fixture
def group_bot(tmp_path, fake_slack):
    """The Bolt app with a policy that lets user group S1 run trials."""
    rt = bolt_runtime(str(tmp_path / "g.db"), fake_slack,
                      Policy(run_usergroups=frozenset({"S1"}), admins=frozenset({"UA"})))
    # The app's own fetch at start must be over before a test sets Slack's answer:
    # one still in flight swallows the test's fetch, then fails (a loaded box).
    wait_for(lambda: "S1" not in rt.ctx.members.fetching, what="the fetch at start")
    yield rt
    rt.stop()


def slash(rt, text, user):
    body = slash_body(text, user=user)
    return post(rt.server.url + "/slack/events", body, signed_headers("s3cret", body))[1]


def test_user_group_members_may_run_from_the_copy_fetched_in_the_background(group_bot,
                                                                            fake_slack):
    fake_slack.answers["usergroups.users.list"] = {"users": ["U7", "U8"]}
    members = group_bot.ctx.members
    members.fetch("S1")  # (the app's own fetch at start came before the answer above)
    wait_for(lambda: "S1" in members.cache, what="the group's members")
    asked = len(fake_slack.calls_of("usergroups.users.list"))
    assert "Queued as *T1*" in slash(group_bot, QUICK, "U7")["text"]
    assert "Queued as *T2*" in slash(group_bot, QUICK, "U8")["text"]
    said = slash(group_bot, QUICK, "U9")["text"]
    assert "not in TRIALBOT_RUN_USERS or TRIALBOT_RUN_USERGROUPS" in said
    assert group_bot.store.job(3) is None
    assert len(fake_slack.calls_of("usergroups.users.list")) == asked  # no call on the ack path


def test_a_group_never_fetched_refuses_at_once_and_is_fetched_for_the_next_command(
        group_bot, fake_slack):
    fake_slack.answers["usergroups.users.list"] = {"users": ["U7"]}
    fake_slack.delays[None] = 2.0  # Slack answers slowly (a call without a channel)
    group_bot.ctx.members.cache.clear()
    group_bot.ctx.members.errors.clear()
    t0 = time.monotonic()
    said = slash(group_bot, QUICK, "U7")["text"]
    assert time.monotonic() - t0 < 1.0  # answered without waiting for Slack
    assert "could not say whether you are in user group <!subteam^S1> (not fetched from " \
        "Slack yet)" in said and "Nothing was queued" in said
    wait_for(lambda: "S1" in group_bot.ctx.members.cache, what="the background fetch")
    assert "Queued as *T1*" in slash(group_bot, QUICK, "U7")["text"]


def test_a_failed_group_lookup_refuses(group_bot, fake_slack):
    fake_slack.errors["usergroups.users.list"] = ["missing_scope"]
    group_bot.ctx.members.fetch("S1")
    wait_for(lambda: group_bot.ctx.members.errors.get("S1") == "missing_scope")
    said = slash(group_bot, QUICK, "U7")["text"]
    assert "permission: run" in said and "could not say whether you are in user group " \
        "<!subteam^S1> (missing_scope)" in said
    assert group_bot.store.job(1) is None


def test_a_group_copy_is_used_while_it_is_fetched_again_until_it_is_too_old():
    calls, answers = [], [["U7"], RuntimeError("Slack is down")]

    class Client:  # usergroups.users.list, answering in turn
        def usergroups_users_list(self, usergroup):
            calls.append(usergroup)
            answer = answers[min(len(calls), len(answers)) - 1]
            if isinstance(answer, Exception):
                raise answer
            return {"users": answer}
    now = [0.0]
    members = slackgroups.Members(Client(), ttl=300, max_age=3600, clock=lambda: now[0])
    with pytest.raises(access.GroupLookupError, match="not fetched from Slack yet"):
        members("S1")  # never fetched: refused, and fetched in the background
    wait_for(lambda: "S1" in members.cache)
    assert "U7" in members("S1") and "U7" in members("S1") and len(calls) == 1
    now[0] = 301  # older than the TTL: still used, and fetched again (which fails)
    assert "U7" in members("S1")
    wait_for(lambda: members.errors.get("S1") == "RuntimeError")
    now[0] = 3601  # too old to trust: refused, naming the last failure
    with pytest.raises(access.GroupLookupError, match="RuntimeError"):
        members("S1")


# --- secrets -----------------------------------------------------------------------


def test_log_records_are_masked(monkeypatch):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    redact.install(redact.secret_values("s3cret-signing", environ={}))
    log = logging.getLogger("trialbot.test")
    log.warning("posting with %s and s3cret-signing", "xoxb-1234-5678-abcdef")
    try:
        raise RuntimeError("Authorization: Bearer wt0ken-per-worker")
    except RuntimeError:
        log.exception("failed")
    out = stream.getvalue()
    assert "posting with [redacted] and [redacted]" in out
    assert "Bearer [redacted]" in out and "wt0ken" not in out and "xoxb-1234" not in out


def test_a_recipe_printing_its_secret_is_masked_in_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_worker_secret_42")
    script = tmp_path / "leak.py"
    script.write_text("import os\nprint('token', os.environ['API_KEY'], os.environ['HF_TOKEN'])\n"
                      "raise SystemExit('failed with ' + os.environ['API_KEY'])\n")
    path = tmp_path / "recipes.toml"
    path.write_text(f'[recipes.leak]\ncwd = "{tmp_path}"\nargv = ["{{python}}", "leak.py"]\n'
                    'env = { API_KEY = "sk-recipe-secret" }\n'
                    'secret_env = ["API_KEY", "HF_TOKEN"]\ntimeout = "1m"\n')
    book = recipes.load(str(path))
    assert book["leak"].secret_env == ("API_KEY", "HF_TOKEN")
    rt = Runtime(str(tmp_path / "r.db"), "wtoken-shared",
                 ConsoleTransport(io.StringIO(), True, str(tmp_path)))
    rt.start()
    agent = Agent(Client(rt.server.url, "wtoken-shared"), "w1", recipes=book)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    try:
        table = {k: r.workload() for k, r in book.items()}
        job = rt.queue.submit(parse(["recipe", "leak", "attempts=1"], table), "recipe leak",
                              "U1", "C1")
        deadline = time.monotonic() + 60
        while rt.store.job(job["id"])["status"] not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        report = rt.store.job(job["id"])["report"]
    finally:
        agent.stop()
        rt.stop()
    shown = json.dumps(report)
    assert "token [redacted] [redacted]" in report["output_tail"]
    assert "sk-recipe-secret" not in shown and "hf_worker_secret_42" not in shown


def test_secret_env_must_name_variables(tmp_path):
    path = tmp_path / "recipes.toml"
    path.write_text(f'[recipes.x]\ncwd = "{tmp_path}"\nargv = ["true"]\nsecret_env = "KEY"\n')
    with pytest.raises(recipes.RecipeError) as err:
        recipes.load(str(path))
    assert "`secret_env` must be a list of variable names" in str(err.value)


def test_a_plan_is_changed_only_with_the_right_in_its_own_channel(tmp_path):
    today = dt.date(2026, 12, 1)
    q = queue_with(tmp_path, config.load_access({"TRIALBOT_RUN_CHANNELS": "CSANDBOX,CTEAM",
                                          "TRIALBOT_RUN_USERS": "UTEAM"}))
    assert "started" in commands.plan(q, "new secret", "UTEAM", "CTEAM", today)["text"]
    q = dataclasses.replace(q, policy=config.load_access({"TRIALBOT_RUN_CHANNELS": "CSANDBOX",
                                                          "TRIALBOT_RUN_USERS": "UTEAM"}))
    # a stranger allowed in the sandbox cannot reach a plan that lives in CTEAM
    refused = commands.plan(q, "secret set paper=hacked", "USTRANGER", "CSANDBOX", today)
    assert "Nothing was changed" in refused["text"]
    assert q.store.plan("secret")["facts"].get("paper") != "hacked"
    reply, job = commands.trial(q, "llm-infer plan=secret block=x", "USTRANGER", "CSANDBOX")
    assert job is None
