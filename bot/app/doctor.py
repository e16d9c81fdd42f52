"""`trialbot doctor`: on the bot's host, with the environment of `trialbot
serve`, one line per check (settings and access, Slack, the database, the
workers, the outbox); each failing line says how to fix it. Reads only: it never
migrates the file (whether it can be written is a write rolled back), posts
to Slack or opens the Socket Mode socket."""
from __future__ import annotations

import os
import time

from bot.app import config
from bot.app.doctorcodes import BACKUP_DAYS, MIN_FREE, WORKERS_WITHIN, WRITE_WAIT, Exit, Line
from bot.app.doctorslack import slack_lines
from bot.delivery.outbox import ALERT_MINUTES
from bot.store import Reason, health, migrations
from bot.trials.workerlist import AUTH_ERRORS, gpu_kind, stuck_hint
from worker import i18n
from worker.api import size
from worker.i18n import _

SHOWN = 6  # workers named on their line


def run(env) -> int:
    """Print the checks; the exit code of the first failing class, 0 when none."""
    try:
        i18n.set_default(config.default_lang(env))
    except config.ConfigError:
        pass  # the settings line says it
    lines, settings = settings_lines(env)
    token = settings.bot_token if settings else env.get("SLACK_BOT_TOKEN")
    app_token = settings.app_token if settings else env.get("SLACK_APP_TOKEN")
    policy = settings.policy if settings else None
    if token:
        slack, channel_names = slack_lines(token, app_token, env.get("SLACK_API_URL") or None,
                                           policy)
    else:
        slack, channel_names = [], {}
    if settings:
        lines += [line.named("access")
                  for line in access_lines(settings.policy, env, channel_names)]
    lines += slack
    lines += database_lines(settings.db if settings else env.get("TRIALBOT_DB", "./trialbot.db"),
                            settings.outbox_alert_minutes if settings else ALERT_MINUTES)
    print(_("trialbot doctor: the checks of `trialbot serve`'s settings on this host."))
    for line in lines:
        print(line)
    failed = sorted({line.failed for line in lines if line.failed})
    if not failed:
        print(_("All {n} checks passed.", n=len(lines)))
        return 0
    print(_("{failed} of {n} checks failed; exit code {code} ({name}): fix the first FAIL "
            "line first, it may cause the others.",
            failed=sum(1 for line in lines if line.failed), n=len(lines), code=int(failed[0]),
            name=failed[0].name.lower()))
    return int(failed[0])


def settings_lines(env) -> tuple[list[Line], config.Settings | None]:
    from worker.api import redact_text as text  # a token pasted into the wrong variable
    try:
        s = config.from_env(env)
    except config.ConfigError as exc:
        return [Line(_("The settings stop `trialbot serve`: {error}.", error=text(str(exc), ())),
                     Exit.SETTINGS, check="settings")], None
    if s.socket_mode:
        mode = _("Slack: Socket Mode (SLACK_APP_TOKEN is set): the bot connects out to Slack "
                 "and needs no public URL.")
    else:
        mode = _("Slack: HTTP mode (no SLACK_APP_TOKEN): Slack must reach port {port} of this "
                 "host at /slack/events, and every request is checked with "
                 "SLACK_SIGNING_SECRET.", port=s.port)
    metrics = (_("/metrics and GET /api/workers take the worker token or "
                 "TRIALBOT_METRICS_TOKEN.") if s.metrics_token else
               _("/metrics and GET /api/workers take the worker token (no "
                 "TRIALBOT_METRICS_TOKEN)."))
    return [Line(mode, check="settings"),
            Line(_("Workers, /healthz and /metrics: HTTP on {host}:{port}; a lease expires "
                   "after {lease} s without a heartbeat. {metrics}", host=s.host, port=s.port,
                   lease=f"{s.lease_seconds:g}", metrics=metrics), check="settings"),
            Line(_("Language: {lang} ({name}) in every channel that has not chosen one "
                   "(TRIALBOT_LANG); a message unsent for {minutes} min is raised to admins.",
                   lang=s.lang, name=i18n.LANGS[s.lang], minutes=f"{s.outbox_alert_minutes:g}"),
                 check="settings")], s


def access_lines(policy, env, channel_names: dict) -> list[Line]:
    """The access policy in plain words, as bot/access.py enforces it."""
    def channels(ids):
        return ", ".join(f"#{channel_names[c]} ({c})" if c in channel_names else c
                         for c in sorted(ids))

    def ids(values):
        return ", ".join(sorted(values))

    lines = []
    if env.get("TRIALBOT_CONFIG"):
        lines.append(Line(_("Access settings: [access] in {path}; a variable that is set "
                            "replaces its key.", path=env["TRIALBOT_CONFIG"])))
    if not policy.configured:
        lines.append(Line(_("Nobody may run trials and nobody is an admin: there are no access "
                            "settings. Set TRIALBOT_RUN_CHANNELS, TRIALBOT_RUN_USERS, "
                            "TRIALBOT_RUN_USERGROUPS or TRIALBOT_ADMINS (docs/operations.md, "
                            "\"Who may do what\")."), Exit.SETTINGS))
        return lines
    if policy.run_everyone:
        lines.append(Line(_("Anyone in the workspace may run trials and change plans "
                            "(TRIALBOT_RUN_EVERYONE).")))
    if policy.run_channels:
        lines.append(Line(_("Anyone in {channels} may run trials and change plans there "
                            "(TRIALBOT_RUN_CHANNELS).", channels=channels(policy.run_channels))))
    if policy.run_users:
        lines.append(Line(_("Users {users} may run trials and change plans anywhere "
                            "(TRIALBOT_RUN_USERS).", users=ids(policy.run_users))))
    if policy.run_usergroups:
        lines.append(Line(_("Members of user groups {groups} may run trials and change plans "
                            "(TRIALBOT_RUN_USERGROUPS); when Slack cannot say who is in them, "
                            "they are refused.", groups=ids(policy.run_usergroups))))
    if policy.admins or policy.admin_usergroups:
        who = ids(policy.admins | {f"@{g}" for g in policy.admin_usergroups})
        lines.append(Line(_("Admins: {admins} (TRIALBOT_ADMINS, TRIALBOT_ADMIN_USERGROUPS): "
                            "they may also run trials, record prices, schedule the weekly "
                            "digest and cancel anyone's trial.", admins=who)))
    else:
        lines.append(Line(_("No admin: nobody may record prices, schedule the weekly digest or "
                            "cancel another's trial; set TRIALBOT_ADMINS to Slack user ids "
                            "(U…)."), warn=True))
    lines.append(Line(_("Reading (help, list, status, workers, fit, /plan show, review, "
                        "prices) is open to anyone; a trial or a plan only in its own channel, "
                        "or to an admin anywhere.")))
    return lines


def database_lines(path: str, alert_minutes: float = ALERT_MINUTES) -> list[Line]:
    if not os.path.isfile(path):
        return [Line(_("No database at {path}: set TRIALBOT_DB to the bot's file (`trialbot "
                       "serve` creates it on first start).", path=path), Exit.DATABASE,
                     check="database")]
    import sqlite3
    try:
        found = health.read(path, WORKERS_WITHIN)
    except sqlite3.Error as exc:
        return [Line(_("Cannot read {path} as a database ({error}): set TRIALBOT_DB to the "
                       "bot's SQLite file.", path=path, error=str(exc)), Exit.DATABASE,
                     check="database")]
    lines = [_version_line(path, found["version"]).named("database")]
    if found["journal"] == "wal":
        lines.append(Line(_("Journal mode WAL: backups and admin commands do not block the "
                            "bot."), check="wal"))
    else:
        lines.append(Line(_("{path} is in journal mode {mode}, not WAL: a backup or an admin "
                            "command would block the bot; start `trialbot serve` once, it turns "
                            "WAL on.", path=path, mode=found["journal"]), Exit.DATABASE,
                          check="wal"))
    lines.append(_write_line(path).named("write"))
    lines.append(_disk_line(path).named("disk"))
    if found["version"] >= migrations.LATEST:  # older: the version line says to migrate
        lines.append(_backup_line(found["backup"]).named("backup"))
    if found["workers"] is not None:
        lines.append(_workers_line(found["workers"], found["last_worker"]).named("workers"))
    if found["outbox"] is not None:
        lines.append(_outbox_line(found["outbox"], alert_minutes).named("outbox"))
    return lines


def _version_line(path: str, version: int) -> Line:
    latest = migrations.LATEST
    if version > latest:
        return Line(_("{path} has schema version {found}, newer than this trialbot's {latest}: "
                      "upgrade trialbot on this host.", path=path, found=version, latest=latest),
                    Exit.DATABASE)
    if version < latest:
        return Line(_("{path} has schema version {found}, this trialbot's is {latest}: make a "
                      "`trialbot backup`, then start `trialbot serve` once; it migrates the "
                      "file at start.", path=path, found=version, latest=latest), Exit.DATABASE)
    return Line(_("Database {path}: schema version {found}, the latest; {size}.", path=path,
                  found=version, size=size(sum(os.path.getsize(f) for f in (path, path + "-wal")
                                               if os.path.exists(f)))))


def _write_line(path: str) -> Line:
    problem = health.writable(path, WRITE_WAIT)
    if problem is None:
        return Line(_("{path} can be written by this user (a write begun and rolled back: "
                      "nothing changed).", path=path))
    if problem.reason is Reason.LOCKED:
        return Line(_("Another program has held the write lock on {path} for over {seconds} s: "
                      "while it holds it, `/trial` answers that nothing was queued. Close the "
                      "`sqlite3` session, the long query or the copy that holds it.", path=path,
                      seconds=f"{WRITE_WAIT:g}"), Exit.DATABASE)
    return Line(_("{path} cannot be written ({error}): `/trial` answers that nothing was "
                  "queued. Give the user that runs `trialbot serve` write access to the file, "
                  "its -wal and -shm and their directory, or remount the filesystem "
                  "read-write.", path=path, error=problem.detail), Exit.DATABASE)


def _disk_line(path: str) -> Line:
    import shutil
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    if free < MIN_FREE:
        return Line(_("Only {free} free on the filesystem of {path} (under {least}): SQLite "
                      "stops writing when it runs out; free space, or stop the bot and move "
                      "the file with its -wal and -shm.", free=size(free), path=path,
                      least=size(MIN_FREE)), Exit.DISK)
    return Line(_("{free} free on the filesystem of the database.", free=size(free)))


def _backup_line(last: dict | None) -> Line:
    if last is None:
        return Line(_("No backup recorded: run `trialbot backup PATH` now, and daily from cron "
                      "(docs/operations.md, \"The database\")."), Exit.BACKUP)
    age = time.time() - last["at"]
    if age > BACKUP_DAYS * 86400:
        return Line(_("The last backup is {age} old ({path}): run `trialbot backup PATH` now, "
                      "and daily from cron.", age=ago(age), path=last["path"]), Exit.BACKUP)
    return Line(_("Last backup {age} ago: {path}, {size}.", age=ago(age), path=last["path"],
                  size=size(last["bytes"])))


def _workers_line(workers: list[dict], last: dict | None) -> Line:
    now = time.time()
    if workers:
        recent = sorted(workers, key=lambda w: -w["last_seen"])[:SHOWN]  # one line, one screen
        shown = ", ".join(_("{name} ({gpus}, seen {age} ago)", name=w["name"],
                            gpus=gpu_kind(w["info"]) or "CPU", age=ago(now - w["last_seen"]))
                          for w in recent)
        if len(workers) > SHOWN:
            return Line(_("{n} workers seen in the last hour, the latest: {workers}.",
                          n=len(workers), workers=shown))
        return Line(_("Workers seen in the last hour: {workers}.", workers=shown))
    start = "`trialbot-worker --server http://BOT-HOST:PORT --name NAME`"
    if last is None:
        return Line(_("No worker has registered: start {command} on a GPU box; `trialbot-worker "
                      "doctor` there says why it cannot reach the bot.", command=start),
                    Exit.WORKERS)
    return Line(_("No worker seen in the last hour (the last, {name}, {age} ago): start "
                  "{command} on a GPU box; `trialbot-worker doctor` there says why it cannot "
                  "reach the bot.", name=last["name"], age=ago(now - last["last_seen"]),
                  command=start), Exit.WORKERS)


def _outbox_line(outbox: dict, alert_minutes: float) -> Line:
    """What waits to be posted: a fault when Slack refuses the bot's token (no wait
    helps) or when the oldest waits past the alert limit, as the bot raises it."""
    oldest = outbox["oldest"]
    if oldest is None:
        return Line(_("Outbox: every message was posted; none waits."))
    waited = time.time() - oldest["created"]
    values = {"n": outbox["count"], "channel": oldest["channel"], "age": ago(waited),
              "error": oldest["last_error"] or _("none yet")}
    if outbox["last_error"] in AUTH_ERRORS:
        return Line(_("Slack refuses the bot's token ({error}): {n} message(s) wait to be "
                      "posted, the oldest {age} to {channel}. {hint}.",
                      hint=stuck_hint(outbox["last_error"]),
                      **dict(values, error=outbox["last_error"])), Exit.OUTBOX)
    if waited > alert_minutes * 60:
        return Line(_("{n} message(s) wait to be posted; the oldest, to {channel}, for {age} "
                      "(over the {minutes} min limit; last error: {error}). {hint}.",
                      minutes=f"{alert_minutes:g}", hint=stuck_hint(oldest["last_error"]),
                      **values), Exit.OUTBOX)
    return Line(_("Outbox: {n} message(s) being posted, the oldest stored {age} ago.",
                  **values))


def ago(seconds: float) -> str:
    """An age as people read it: 40 s, 12 min, 5 h, 9 d."""
    seconds = max(0.0, seconds)
    for unit, scale, upto in (("s", 1, 120), ("min", 60, 120 * 60), ("h", 3600, 48 * 3600)):
        if seconds < upto:
            return f"{seconds / scale:.0f} {unit}"
    return f"{seconds / 86400:.0f} d"
