"""`trialbot doctor` against the fake Slack and real SQLite files: the all-good
baseline through the installed command, then each class of failure provoked,
its exit code and the fix its line gives. In-process through cli.main (the
same code the command runs) except the baseline."""
import os
import re
import sqlite3
import subprocess
import time

import pytest
import yaml

from bot.app import cli
from bot.app.doctorcodes import BACKUP_DAYS, MIN_FREE, WORKERS_WITHIN, Exit
from bot.app.doctorslack import MANIFEST_SCOPES
from bot.store import Store, backup, migrations
from conftest import BIN, ROOT, free_port
from worker import i18n
from worker.units import size


@pytest.fixture
def site(tmp_path, fake_slack):
    """A bot's host where everything is right: a migrated WAL file with a worker
    seen just now and a backup made, a token with every scope, Socket Mode on."""
    db = str(tmp_path / "bot.db")
    store = Store(db)
    store.upsert_worker("gpu-a", {"gpus": ["H100", "H100"]})
    backup(db, str(tmp_path / "backup.db"))
    fake_slack.scopes = ", ".join(MANIFEST_SCOPES)
    fake_slack.answers["auth.test"] = {"user": "trialbot", "team": "Lab",
                                       "url": "https://lab.slack.com/"}
    fake_slack.answers["apps.connections.open"] = {"url": "wss://wss.example/link/?ticket=1"}
    fake_slack.channel_info["C0GPU"] = {"name": "ml-gpu"}
    env = {"SLACK_BOT_TOKEN": "xoxb-doctor-test", "SLACK_APP_TOKEN": "xapp-doctor-test",
           "TRIALBOT_WORKER_TOKEN": "wtoken", "TRIALBOT_DB": db,
           "SLACK_API_URL": fake_slack.api_url, "TRIALBOT_RUN_CHANNELS": "C0GPU",
           "TRIALBOT_ADMINS": "UADMIN"}
    return env, store


def doctor(monkeypatch, capsys, env) -> tuple[int, str]:
    """`trialbot doctor` in this process, with exactly `env`'s settings."""
    for name in list(os.environ):
        if name.startswith(("SLACK_", "TRIALBOT_")):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        code = cli.main(["doctor"])
    finally:
        i18n.set_default("en")
    return code, capsys.readouterr().out


def failing(out: str) -> list[str]:
    """The text of each FAIL line, after its check's name."""
    return re.findall(r"^FAIL  \S+ +(.*)$", out, re.M)


def said(out: str, mark: str, check: str, text: str) -> bool:
    return f"{mark:<4}  {check:<8} {text}" in out


def test_all_good_through_the_installed_command(site, fake_slack):
    env, _ = site
    done = subprocess.run([str(BIN / "trialbot"), "doctor"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60,
                          env={k: v for k, v in os.environ.items()
                               if not k.startswith(("SLACK_", "TRIALBOT_"))} | env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    checks = lines[1:-1]
    assert checks and all(line.startswith("ok    ") for line in checks), done.stdout
    assert lines[-1] == f"All {len(checks)} checks passed."
    assert len(lines) <= 24  # one screen
    out = done.stdout
    assert "Socket Mode (SLACK_APP_TOKEN is set)" in out
    assert "Anyone in #ml-gpu (C0GPU) may run trials" in out and "Admins: UADMIN" in out
    assert "bot trialbot in workspace Lab" in out
    assert "offers a Socket Mode connection (not opened)" in out
    assert f"schema version {migrations.LATEST}, the latest" in out and "WAL" in out
    assert re.search(r"Last backup \d+ s ago: .*backup\.db, [\d.]+ KiB\.", out)
    assert "gpu-a (2× H100, seen" in out
    assert "xoxb-doctor-test" not in out and "xapp-doctor-test" not in out
    # it asked, and changed nothing in Slack
    assert len(fake_slack.calls_of("auth.test")) == 1
    assert len(fake_slack.calls_of("apps.connections.open")) == 1
    assert not fake_slack.posts()


@pytest.mark.parametrize("method, variable, code, fix", [
    ("auth.test", "SLACK_BOT_TOKEN", Exit.SLACK_TOKEN,
     "copy the Bot User OAuth Token (xoxb-…) from the app's OAuth & Permissions page"),
    ("apps.connections.open", "SLACK_APP_TOKEN", Exit.SOCKET_MODE,
     "create an app-level token (xapp-…) with connections:write"),
])
def test_a_token_slack_refuses(site, fake_slack, monkeypatch, capsys, method, variable, code,
                               fix):
    env, _ = site
    fake_slack.errors[method] = ["invalid_auth"]
    got, out = doctor(monkeypatch, capsys, env)
    assert got == code
    [line] = failing(out)
    assert line.startswith(f"Slack refuses {variable} (invalid_auth): ") and fix in line
    assert f"exit code {int(code)} ({code.name.lower()})" in out


def test_missing_scopes(site, fake_slack, monkeypatch, capsys):
    env, _ = site
    fake_slack.scopes = "commands,chat:write,channels:read,groups:read,im:read,mpim:read"
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.SLACK_SCOPES
    [line] = failing(out)
    assert line.startswith("The token lacks scopes manifest.yml asks for: files:write, "
                           "usergroups:read, im:write. ")
    assert "Reinstall to Workspace" in line


def test_usergroups_read_matters_only_when_the_policy_names_groups(site, fake_slack,
                                                                   monkeypatch, capsys):
    env, _ = site
    fake_slack.scopes = ",".join(s for s in MANIFEST_SCOPES if s != "usergroups:read")
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.OK and said(out, "warn", "scopes",
                                      "The token lacks usergroups:read, needed only")
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_ADMIN_USERGROUPS": "S0ADMINS"})
    assert got == Exit.SLACK_SCOPES and "lacks scopes manifest.yml asks for: usergroups:read" in out


def test_slack_unreachable(site, monkeypatch, capsys):
    env, _ = site
    url = f"http://127.0.0.1:{free_port()}/api/"  # nothing listens there
    started = time.monotonic()
    got, out = doctor(monkeypatch, capsys, env | {"SLACK_API_URL": url})
    assert got == Exit.SLACK_UNREACHABLE and time.monotonic() - started < 15
    [line] = failing(out)
    assert line.startswith(f"Slack is unreachable at {url} (") and "SLACK_API_URL" in line
    assert "Workers seen in the last hour: gpu-a" in out  # the rest is still checked


def test_slack_answering_http_500(site, fake_slack, monkeypatch, capsys):
    env, _ = site
    fake_slack.fail_next = [500]
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.SLACK_UNREACHABLE
    assert "Slack answered HTTP 500 at" in failing(out)[0]


def test_a_database_not_migrated_nor_wal_is_said_and_left_unchanged(site, tmp_path, monkeypatch,
                                                                    capsys):
    env, _ = site
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)  # a file from before schema versions
    conn.execute("create table workers (name text primary key, info text, registered float, "
                 "last_seen float)")
    conn.execute("insert into workers values ('gpu-b', '{}', 1.0, ?)", [time.time()])
    conn.commit()
    conn.close()
    dump = list(sqlite3.connect(old).iterdump())
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_DB": str(old)})
    assert got == Exit.DATABASE
    assert failing(out) == [
        f"{old} has schema version 0, this trialbot's is {migrations.LATEST}: make a "
        "`trialbot backup`, then start `trialbot serve` once; it migrates the file at start.",
        f"{old} is in journal mode delete, not WAL: a backup or an admin command would block "
        "the bot; start `trialbot serve` once, it turns WAL on."]
    assert "Workers seen in the last hour: gpu-b (CPU, seen" in out
    assert list(sqlite3.connect(old).iterdump()) == dump  # the doctor only reads


def test_wal_off_on_a_migrated_file(site, monkeypatch, capsys):
    env, store = site
    store.db.conn.close()
    sqlite3.connect(env["TRIALBOT_DB"]).execute("pragma journal_mode = delete")
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.DATABASE
    [line] = failing(out)
    assert "is in journal mode delete, not WAL" in line


@pytest.mark.parametrize("make, says", [
    (None, "No database at {db}: set TRIALBOT_DB to the bot's file"),
    (b"not a database, a text file" * 100, "Cannot read {db} as a database ("),
])
def test_no_database(site, tmp_path, monkeypatch, capsys, make, says):
    env, _ = site
    db = tmp_path / "other.db"
    if make:
        db.write_bytes(make)
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_DB": str(db)})
    assert got == Exit.DATABASE and failing(out)[0].startswith(says.format(db=db))


def test_no_worker_in_the_last_hour(site, monkeypatch, capsys):
    env, store = site
    with store.tx():
        store.db.execute("update workers set last_seen = ?", [time.time() - 2 * 3600])
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.WORKERS
    [line] = failing(out)
    assert line.startswith("No worker seen in the last hour (the last, gpu-a, 2 h ago): "
                           "start `trialbot-worker --server http://BOT-HOST:PORT --name NAME`")
    assert "`trialbot-worker doctor`" in line


def test_many_workers_stay_on_one_line(site, monkeypatch, capsys):
    env, store = site
    for n in range(12):
        store.upsert_worker(f"box-{n:02d}", {"gpus": ["A100"]})
    got, out = doctor(monkeypatch, capsys, env)
    [line] = [line for line in out.splitlines() if line.startswith("ok    workers")]
    assert got == Exit.OK and "13 workers seen in the last hour, the latest: " in line
    assert line.count("seen") == 7  # the count, and six named


def test_too_little_free_space(site, monkeypatch, capsys):
    env, _ = site
    monkeypatch.setattr("bot.app.doctor.MIN_FREE", 2**60)  # more than any disk here has
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.DISK
    [line] = failing(out)
    assert line.startswith("Only ") and f"free on the filesystem of {env['TRIALBOT_DB']} " \
        f"(under {size(2**60)})" in line
    assert "stop the bot and move the file with its -wal and -shm" in line


def test_no_worker_ever(tmp_path, site, monkeypatch, capsys):
    env, _ = site
    db = str(tmp_path / "fresh.db")
    Store(db)
    backup(db, str(tmp_path / "fresh-backup.db"))
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_DB": db})
    assert got == Exit.WORKERS and failing(out)[0].startswith("No worker has registered: start")


def test_backups(site, tmp_path, monkeypatch, capsys):
    env, store = site
    with store.tx():
        store.db.execute("update backups set at = ?", [time.time() - 8 * 86400])
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.BACKUP
    assert failing(out)[0].startswith("The last backup is 8 d old (")
    with store.tx():
        store.db.execute("delete from backups")
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.BACKUP
    assert failing(out) == ["No backup recorded: run `trialbot backup PATH` now, and daily from "
                            "cron (docs/operations.md, \"The database\")."]
    assert cli.main(["backup", str(tmp_path / "b2.db"), "--db", env["TRIALBOT_DB"]]) == 0
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.OK and re.search(rf"Last backup \d+ s ago: {tmp_path / 'b2.db'}", out)
    old = tmp_path / "old.db"  # a file not migrated has nowhere to record it: said, copied
    sqlite3.connect(old).execute("create table jobs (id integer primary key)")
    assert cli.main(["backup", str(tmp_path / "b3.db"), "--db", str(old)]) == 0
    assert "It is not recorded in" in capsys.readouterr().out and (tmp_path / "b3.db").exists()


def test_the_outbox(site, monkeypatch, capsys):
    """What waits to be posted, read from the file: nothing, a message being
    sent, one past the alert limit, and Slack refusing the bot's token."""
    env, store = site
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.OK and said(out, "ok", "outbox", "Outbox: every message was posted; "
                                   "none waits.")
    store.add_messages([{"channel": "C0GPU", "text": "a card"}])
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.OK and said(out, "ok", "outbox", "Outbox: 1 message(s) being posted, "
                                   "the oldest stored 0 s ago.")
    with store.tx():
        store.db.execute("update outbox set created = created - 600, tries = 4, "
                         "last_error = 'service_unavailable'")
    got, out = doctor(monkeypatch, capsys, env)
    assert got == Exit.OUTBOX
    assert failing(out) == ["1 message(s) wait to be posted; the oldest, to C0GPU, for 10 min "
                            "(over the 5 min limit; last error: service_unavailable). The bot's "
                            "log (lines from trialbot.outbox) has the details."]
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_OUTBOX_ALERT_MINUTES": "30"})
    assert got == Exit.OK  # the limit is the bot's own setting
    store.add_messages([{"channel": "C0GPU", "text": "its report"}])
    with store.tx():
        store.db.execute("update outbox set last_error = 'token_revoked' where text = ?",
                         ["its report"])
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_OUTBOX_ALERT_MINUTES": "30"})
    assert got == Exit.OUTBOX
    [line] = failing(out)
    assert line.startswith("Slack refuses the bot's token (token_revoked): 2 message(s) wait "
                           "to be posted, the oldest 10 min to C0GPU. Slack refuses the bot's "
                           "token: check SLACK_BOT_TOKEN")


def test_settings_and_access(site, monkeypatch, capsys):
    env, _ = site
    no_token = {k: v for k, v in env.items() if k != "SLACK_BOT_TOKEN"}
    got, out = doctor(monkeypatch, capsys, no_token)
    assert got == Exit.SETTINGS
    assert failing(out) == ["The settings stop `trialbot serve`: missing SLACK_BOT_TOKEN for "
                            "Socket Mode; see README 'Connect a Slack workspace'."]
    assert "Workers seen in the last hour" in out  # the database is still checked
    closed = {k: v for k, v in env.items() if not k.startswith("TRIALBOT_RUN_")
              and k != "TRIALBOT_ADMINS"}
    got, out = doctor(monkeypatch, capsys, closed | {"TRIALBOT_DB": "/nonexistent/x.db"})
    assert got == Exit.SETTINGS  # the lowest of the classes that failed
    assert [line.split(":")[0] for line in failing(out)] == [
        "Nobody may run trials and nobody is an admin", "No database at /nonexistent/x.db"]
    assert "exit code 3 (settings)" in out
    got, out = doctor(monkeypatch, capsys, {k: v for k, v in env.items() if k != "TRIALBOT_ADMINS"}
                      | {"TRIALBOT_RUN_EVERYONE": "1", "TRIALBOT_RUN_USERS": "U1,U2"})
    assert got == Exit.OK
    assert said(out, "ok", "access", "Anyone in the workspace may run trials and change plans")
    assert said(out, "ok", "access", "Users U1, U2 may run trials and change plans anywhere")
    assert said(out, "warn", "access", "No admin: nobody may record prices")


def test_http_mode_and_korean(site, fake_slack, monkeypatch, capsys):
    env, _ = site
    http = {k: v for k, v in env.items() if k != "SLACK_APP_TOKEN"}
    got, out = doctor(monkeypatch, capsys, http | {"SLACK_SIGNING_SECRET": "s3cret",
                                                   "TRIALBOT_PORT": "3100"})
    assert got == Exit.OK
    assert said(out, "ok", "settings",
                "Slack: HTTP mode (no SLACK_APP_TOKEN): Slack must reach port 3100")
    assert not fake_slack.calls_of("apps.connections.open")
    fake_slack.errors["auth.test"] = ["invalid_auth"]
    got, out = doctor(monkeypatch, capsys, env | {"TRIALBOT_LANG": "ko"})
    assert got == Exit.SLACK_TOKEN
    assert re.search("[가-힣]", failing(out)[0]) and "SLACK_BOT_TOKEN" in failing(out)[0]


def test_the_scopes_checked_are_the_manifests():
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text())
    assert tuple(manifest["oauth_config"]["scopes"]["bot"]) == MANIFEST_SCOPES


def test_the_documented_exit_codes_are_the_codes():
    doc = (ROOT / "docs" / "doctor.md").read_text()
    section = doc[doc.index("## trialbot doctor"):]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", section, re.M)
    assert [(int(c), n) for c, n in rows] == [(int(e), e.name.lower()) for e in Exit]
    assert f"at least {size(MIN_FREE)} free" in section and f"under {size(MIN_FREE)}" in section
    assert f"older than {BACKUP_DAYS} days" in section and WORKERS_WITHIN == 3600
    assert "(doctor.md#trialbot-doctor)" in (ROOT / "docs" / "operations.md").read_text()
