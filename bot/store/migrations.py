"""Versioned schema migrations, kept in the database's `PRAGMA user_version`.

Version 1 is the baseline: the tables `Store._baseline` makes, frozen
(sqlite-utils' `transform=True` brings a file from before versions up to it,
rows kept; it runs only on a file below version 1, since transform drops
columns it does not list). Each later step is plain SQL, run in
one transaction with its version bump: a crash mid-step leaves the file at
the step before, and the next start runs it again. New schema changes go
here, not in `_create`, so a file always says what shape it has.

Store-adjacent: like bot/store/, this module holds SQL.
"""
from __future__ import annotations

import sqlite3

BASELINE = 1

# MIGRATIONS[i] takes a file from version BASELINE + i to BASELINE + i + 1.
MIGRATIONS: list[tuple[str, list[str]]] = [
    ("per-worker tokens (only their SHA-256 is stored)", [
        "create table if not exists worker_tokens (name text primary key, hash text not null, "
        "created float not null, revoked float)",
    ]),
    # `/plan NAME actual KIND slurm=JOBID`: a request a Slurm worker leases (the bot
    # is not on the cluster, so a worker runs sacct), its lease like a job's, and
    # what came of it: sacct's records and the actual recorded (`actual`, an
    # actuals id; its source is this row).
    ("Slurm accounting requests for actuals", [
        "create table if not exists slurm_actuals (id integer primary key, plan text not null, "
        "block text not null, jobs text not null, runs integer, note text, user text not null, "
        "channel text not null, status text not null default 'queued', "
        "worker text, lease text, lease_expires float, attempts integer not null default 0, "
        "created float not null, finished float, result text, message text, actual integer)",
        "create index if not exists slurm_actuals_status on slurm_actuals (status)",
        "create index if not exists slurm_actuals_actual on slurm_actuals (actual)",
    ]),
    # Delivery per channel, and a path to the requester when Slack refuses one:
    # `via` (null: the channel; "ephemeral" to `user` there; "redirect": to the
    # requester by response_url or a direct message), `sent_via` (the path that
    # took it). A trial whose channel refused a message is `redirect`ed: its later
    # messages follow. A response_url is good for 5 posts in 30 minutes.
    ("outbox lanes per channel and paths to the requester", [
        "alter table outbox add column via text",
        "alter table outbox add column user text",
        "alter table outbox add column response_url text",
        "alter table outbox add column sent_via text",
        "create index if not exists outbox_unsent_by_channel on outbox (channel, id) "
        "where sent is null and given_up is null",
        "alter table jobs add column response_url text",
        "alter table jobs add column redirect text",
        "create table if not exists response_urls (url text primary key, expires float "
        "not null, uses integer not null default 0)",
    ]),
    # A worker's idempotency key per request (kept across its retries), so a
    # request whose answer was lost and is sent again is applied once: its
    # idle counted once, the lease it got (`job` or Slurm request `request`,
    # under `lease`) given again, a report or result answered as the first was.
    ("worker request keys", [
        "create table if not exists worker_requests (worker text not null, key text not null, "
        "kind text not null, job integer, request integer, lease text, created float not null, "
        "primary key (worker, key))",
        "create index if not exists worker_requests_created on worker_requests (created)",
    ]),
    # Every change to a plan (a fact set or unset, a block, an actual, the lock) and
    # to a price: who, when, what, and the old and new value as JSON. `plan` is null
    # for a price (all plans share the price list); `item` names its GPU then.
    ("plan history", [
        "create table if not exists plan_history (id integer primary key, plan text, "
        "item text, what text not null, action text not null, old text, new text, "
        "user text, at float not null)",
        "create index if not exists plan_history_plan on plan_history (plan, id)",
        "create index if not exists plan_history_item on plan_history (item, id)",
    ]),
    # A channel's own settings (today its language), who set them and when.
    ("channel settings", [
        "create table if not exists channel_settings (channel text primary key, lang text, "
        "set_by text, set_at float)",
    ]),
    # Each `trialbot backup` made of this file (`trialbot doctor` shows the last).
    ("backups made", [
        "create table if not exists backups (id integer primary key, at float not null, "
        "path text not null, bytes integer not null, version integer not null)",
    ]),
    # An attempt that ended because its lease expired (re-leased or the last one):
    # /metrics counts them by this, since their messages are translated.
    ("expired attempts", [
        "alter table attempts add column expired integer not null default 0",
        "update attempts set expired = 1 where message like 'lease expired:%'",
    ]),
    # What decides where a job may run (its route, recipe, ranks, hf model:
    # bot/trials/workers.py needs()), one row per distinct class, and each job's
    # class, so a lease asks for the classes a worker can run through an index
    # instead of reading the queue. A null class (a row from before, or put in
    # by SQL) is classified by the next lease.
    ("jobs' needs classes for leasing", [
        "create table if not exists needs (id integer primary key, key text not null unique)",
        "alter table jobs add column needs integer",
        "create index if not exists jobs_lease on jobs (status, needs, user, id)",
    ]),
    # A channel's currency: a price typed there without one is read in it (#33).
    ("channel currency", [
        "alter table channel_settings add column currency text",
    ]),
    # An actual's number (#3) is never handed out again (#33): a plain rowid
    # reuses the largest after it is deleted, AUTOINCREMENT does not. The
    # sequence starts past every number a file has shown: its rows, its Slurm
    # requests', and those its history names ("actual compare #3").
    ("actual numbers never reused", [
        "create table actuals_numbered (id integer primary key autoincrement, plan text, "
        "block text, hours real, parts text, runs integer, note text, user text, recorded real)",
        "insert into actuals_numbered (id, plan, block, hours, parts, runs, note, user, "
        "recorded) select id, plan, block, hours, parts, runs, note, user, recorded from actuals",
        "drop table actuals",
        "alter table actuals_numbered rename to actuals",
        "delete from sqlite_sequence where name in ('actuals', 'actuals_numbered')",
        "insert into sqlite_sequence (name, seq) select 'actuals', coalesce(max(n), 0) from ("
        "select max(id) as n from actuals union all select max(actual) from slurm_actuals "
        "union all select max(cast(substr(what, instr(what, '#') + 1) as integer)) "
        "from plan_history where plan is not null and what like 'actual % #%')",
    ]),
    # A price's number (P7) likewise: a plan's advice and review cite it, so a
    # deleted P7 must not come back as another figure. The sequence starts past
    # every P-number its history names ("price P7").
    ("price numbers never reused", [
        "create table prices_numbered (id integer primary key autoincrement, item text, "
        "kind text, value real, unit text, currency text, source text, date text, user text, "
        "recorded real)",
        "insert into prices_numbered (id, item, kind, value, unit, currency, source, date, "
        "user, recorded) select id, item, kind, value, unit, currency, source, date, user, "
        "recorded from prices",
        "drop table prices",
        "alter table prices_numbered rename to prices",
        "delete from sqlite_sequence where name in ('prices', 'prices_numbered')",
        "insert into sqlite_sequence (name, seq) select 'prices', coalesce(max(n), 0) from ("
        "select max(id) as n from prices union all "
        "select max(cast(substr(what, 8) as integer)) from plan_history "
        "where what like 'price P%')",
    ]),
    # `/plan NAME check`: a compatibility check (#34) a worker leases, fetches at
    # its commit and reads (worker/compat/), with its lease like a Slurm request's;
    # `result` is the worker's answer (the trialbot.compat/1 report, or why not),
    # `filled` the checklist items it filled. A worker request key names the
    # check it leased in `worker_requests.request`, as a Slurm request's (its
    # lease, a fresh uuid, tells which of the two).
    ("compatibility checks", [
        "create table if not exists compat_checks (id integer primary key, plan text not null, "
        "repo text not null, commit_asked text, user text not null, channel text not null, "
        "status text not null default 'queued', worker text, lease text, lease_expires float, "
        "attempts integer not null default 0, created float not null, finished float, "
        "commit_read text, result text, message text, filled text)",
        "create index if not exists compat_checks_status on compat_checks (status)",
        "create index if not exists compat_checks_plan on compat_checks (plan, id)",
    ]),
]

LATEST = BASELINE + len(MIGRATIONS)


class SchemaTooNew(Exception):
    """The file was migrated by a newer trialbot; this code must not touch it."""


def version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("pragma user_version").fetchone()[0]
    return version


def check_not_newer(conn: sqlite3.Connection, path: str) -> int:
    """Before anything writes: the baseline's transform would drop columns a
    newer version added."""
    found = version(conn)
    if found > LATEST:
        raise SchemaTooNew(f"{path} has schema version {found}, newer than this trialbot's "
                           f"{LATEST}: upgrade trialbot (or restore a backup made by this "
                           "version); the file was not changed")
    return found


def migrate(conn: sqlite3.Connection, path: str) -> list[str]:
    """Run the pending steps; the names of those run. BEGIN IMMEDIATE takes the
    write lock first, so two processes starting at once migrate once."""
    ran = []
    conn.commit()  # the steps' transaction must be ours alone
    conn.execute("begin immediate")
    try:
        found = check_not_newer(conn, path)
        for n in range(max(found, BASELINE), LATEST):
            name, statements = MIGRATIONS[n - BASELINE]
            for sql in statements:
                conn.execute(sql)
            ran.append(f"{n + 1}: {name}")
        if found != LATEST:
            conn.execute(f"pragma user_version = {LATEST}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return ran
