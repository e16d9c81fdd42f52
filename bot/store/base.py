"""The store's base: one SQLite file (WAL) through sqlite-utils, a
connection per thread, write transactions, Slack's request keys, and the
schema brought to the latest version at open."""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time

import sqlite_utils

from bot.store import migrations, schema


class DuplicateRequest(Exception):
    """The request was seen before (Slack retried it, or it came twice)."""

    def __init__(self, jobs: list[int]):
        super().__init__(f"request already queued {jobs}")
        self.jobs = jobs


_WRITE_LOCKS: dict[str, threading.RLock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.RLock:
    """One lock per database file in this process (tests open one file twice)."""
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(os.path.abspath(path), threading.RLock())


class Base:
    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()
        self._lock = _write_lock(path)
        self._create()

    @contextlib.contextmanager
    def tx(self):
        """One write transaction: BEGIN IMMEDIATE … COMMIT, ROLLBACK on error.
        Explicit because sqlite-utils 4 commits each write statement on its own
        unless a transaction is open. Writers in this process queue on a lock
        (SQLite's busy handler sleeps up to 100 ms between tries); other
        processes wait on the busy timeout. A nested tx() joins the outer one."""
        if getattr(self._local, "depth", 0):
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        conn = self.db.conn
        with self._lock:
            if conn.in_transaction:  # left open by a failure outside tx(): end it first
                conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            self._local.depth = 1
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                self._local.depth = 0

    @property
    def db(self) -> sqlite_utils.Database:
        """One connection per thread: sqlite3 connections are not shared across threads."""
        db = getattr(self._local, "db", None)
        if db is None:
            conn = sqlite3.connect(self.path, timeout=30)  # busy timeout: wait, don't fail
            # WAL + NORMAL: a commit survives the bot being killed (the SIGKILL tests);
            # only a power loss can take the last ones. FULL fsyncs every commit,
            # tripling a slash command's write (scripts/bench_load.py).
            conn.execute("pragma synchronous = normal")
            db = self._local.db = sqlite_utils.Database(conn)
        return db

    def _create(self) -> None:
        """Create the tables, or bring a file from before schema versions up to
        the baseline (version 1; sqlite-utils' transform adds columns, rows
        kept; bot/store/schema.py); then the versioned steps in
        bot/store/migrations.py. A file already at
        the baseline or later is not transformed: transform drops columns it
        does not list, which would undo a later step's `alter table ... add`.
        A file from a newer trialbot is refused before anything is written."""
        db = self.db
        found = migrations.check_not_newer(db.conn, self.path)
        db.enable_wal()
        if found < migrations.BASELINE:
            schema.baseline(db)
        migrations.migrate(db.conn, self.path)

    def _claim(self, request: str | None, within: float | None = None) -> None:
        """Inside a transaction: take Slack's request key, or raise
        DuplicateRequest (with what it queued) when a retry already took it.
        With `within`, a key taken longer ago than that is taken anew (a
        button's clicks: two in a row are one, a later one is meant)."""
        if request is None:
            return
        # Slack retries within minutes: a day of keys is plenty to keep.
        self.db.execute("delete from requests where created < ?", [time.time() - 86400])
        if within is not None:
            self.db.execute("delete from requests where key = ? and created < ?",
                            [request, time.time() - within])
        seen = self.db.execute("insert into requests (key, created) values (?, ?) "
                               "on conflict(key) do nothing", [request, time.time()]).rowcount == 0
        if seen:
            row = self.db.execute("select jobs from requests where key = ?", [request]).fetchone()
            raise DuplicateRequest(json.loads(row[0] or "[]"))
