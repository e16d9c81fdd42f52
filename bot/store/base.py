"""The store's base: one SQLite file (WAL) through sqlite-utils, a
connection per long-lived thread and a pool for request threads, write
transactions with a time budget (Unwritable when the database is locked,
full or read-only), Slack's request keys, and the schema brought to the
latest version at open."""
from __future__ import annotations

import contextlib
import enum
import json
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from bot.store import migrations, schema

# A row as the store hands it out: columns by name, JSON columns decoded.
Row = dict[str, Any]
# A report as it is stored: worker/report.py's Report, or any JSON object of its shape.
Posted = Mapping[str, Any]


class DuplicateRequest(Exception):
    """The request was seen before (Slack retried it, or it came twice)."""

    def __init__(self, jobs: list[int]):
        super().__init__(f"request already queued {jobs}")
        self.jobs = jobs


class Reason(enum.Enum):
    """Why the database could not be written."""
    LOCKED = "locked"        # another writer held it past the wait allowed
    FULL = "full"            # the disk (or the database's size limit) is full
    READ_ONLY = "read-only"  # the file, its directory or its filesystem cannot be written
    IO = "io-error"          # the disk failed the write, or the file cannot be opened


# SQLite's primary result codes (the low byte of an extended one) that say the
# write could not be made, rather than that the SQL is wrong. As numbers: the
# sqlite3 module names them from Python 3.11 only (and errors carry the code
# only from 3.11: on 3.10 no error is translated).
SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = (
    5, 6, 8, 10, 13, 14)
_CODES = {SQLITE_BUSY: Reason.LOCKED, SQLITE_LOCKED: Reason.LOCKED,
          SQLITE_FULL: Reason.FULL, SQLITE_READONLY: Reason.READ_ONLY,
          SQLITE_IOERR: Reason.IO, SQLITE_CANTOPEN: Reason.IO}


class Unwritable(Exception):
    """A write that could not be made in its time; nothing of it was stored."""

    def __init__(self, reason: Reason, detail: str):
        super().__init__(f"{reason.value}: {detail}")
        self.reason, self.detail = reason, detail


def unwritable(exc: sqlite3.Error) -> Unwritable | None:
    """SQLite's error as an Unwritable, or None when it is not about writing."""
    code = getattr(exc, "sqlite_errorcode", None)
    reason = _CODES.get(code & 0xFF) if code is not None else None
    if reason is None:
        return None
    return Unwritable(reason, f"{exc} ({getattr(exc, 'sqlite_errorname', code)})")


def inserted(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT added (sqlite3 types lastrowid as optional:
    it is None only on a cursor that inserted nothing)."""
    assert cur.lastrowid is not None
    return cur.lastrowid


@dataclass
class WriteHealth:
    """This store's writes since start: failures by reason, the last failure,
    and when the last write failed and the last one succeeded."""
    failures: Counter[Reason] = field(default_factory=Counter)
    last_failure: Unwritable | None = None
    last_failure_at: float = 0.0
    last_success_at: float = 0.0


WRITE_WAIT = 30.0  # seconds a background write waits for the database (busy timeout)
POOL_KEEP = 16  # idle pooled connections kept; more are closed

_WRITE_LOCKS: dict[str, threading.RLock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.RLock:
    """One lock per database file in this process (tests open one file twice)."""
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(os.path.abspath(path), threading.RLock())


def connect(path: str) -> sqlite3.Connection:
    """A connection any one thread at a time may use (the pool hands it on)."""
    conn = sqlite3.connect(path, timeout=WRITE_WAIT, check_same_thread=False)
    # WAL + NORMAL: a commit survives the bot being killed (the SIGKILL tests);
    # only a power loss can take the last ones. FULL fsyncs every commit,
    # tripling a slash command's write (scripts/bench_load.py).
    conn.execute("pragma synchronous = normal")
    return conn


class Base:
    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()
        self._lock = _write_lock(path)
        self._pool: list[sqlite_utils.Database] = []
        self._pool_lock = threading.Lock()
        self.writes = WriteHealth()
        self._next_prune = 0.0  # when _claim next deletes day-old request keys
        self._writes_lock = threading.Lock()
        self._create()

    @contextlib.contextmanager
    def budget(self, seconds: float) -> Iterator[None]:
        """Writes in this block (this thread) wait at most until `seconds` from
        now for the database, lock and busy timeout together, then raise
        Unwritable: a slash command must be answered within Slack's 3 s."""
        old = getattr(self._local, "deadline", None)
        deadline = time.monotonic() + seconds
        self._local.deadline = deadline if old is None else min(old, deadline)
        try:
            yield
        finally:
            self._local.deadline = old

    @contextlib.contextmanager
    def write_wait(self, seconds: float) -> Iterator[None]:
        """Each write in this block (this thread) waits at most `seconds` for the
        database, then raises Unwritable: a worker's request, whose client
        gives up after 30 s and retries a 5xx."""
        old = getattr(self._local, "each", None)
        self._local.each = seconds
        try:
            yield
        finally:
            self._local.each = old

    def _wait(self) -> float:
        """Seconds the next write may wait: the thread's budget, else each write's."""
        wait = getattr(self._local, "each", None) or WRITE_WAIT
        deadline = getattr(self._local, "deadline", None)
        return wait if deadline is None else max(0.0, min(wait, deadline - time.monotonic()))

    @contextlib.contextmanager
    def tx(self) -> Iterator[None]:
        """One write transaction: BEGIN IMMEDIATE … COMMIT, ROLLBACK on error.
        Explicit because sqlite-utils 4 commits each write statement on its own
        unless a transaction is open. Writers in this process queue on a lock
        (SQLite's busy handler sleeps up to 100 ms between tries); other
        processes wait on the busy timeout. Both waits together end at the
        thread's budget or write_wait (else WRITE_WAIT); a write that cannot be
        made raises Unwritable, with nothing stored. A nested tx() joins the outer one."""
        if getattr(self._local, "depth", 0):
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        wait, started = self._wait(), time.monotonic()
        if not self._lock.acquire(timeout=wait):
            raise self._failed(Unwritable(Reason.LOCKED, f"another write in this bot held the "
                                                         f"database for over {wait:.1f} s"))
        try:
            with self._translated():
                conn = self.db.conn
                if conn.in_transaction:  # left open by a failure outside tx(): end it first
                    conn.execute("ROLLBACK")
                self._busy_timeout(wait - (time.monotonic() - started))
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
            with self._writes_lock:
                self.writes.last_success_at = time.time()
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """SQLite's refusals to write, as Unwritable (counted for /metrics). A
        connection that could not write the file is closed, not used again: one
        opened while the file could not be written stays read-only for good."""
        try:
            yield
        except sqlite3.Error as exc:
            failed = unwritable(exc)
            if failed is None:
                raise
            if failed.reason in (Reason.READ_ONLY, Reason.IO):
                db = self._local.__dict__.pop("db", None)
                if db is not None:
                    db.conn.close()
            raise self._failed(failed) from exc

    def _failed(self, exc: Unwritable) -> Unwritable:
        with self._writes_lock:
            self.writes.failures[exc.reason] += 1
            self.writes.last_failure, self.writes.last_failure_at = exc, time.time()
        return exc

    def _busy_timeout(self, seconds: float) -> None:
        """SQLite's wait for another process's write lock, on this connection."""
        ms = max(0, int(seconds * 10)) * 100  # in 0.1 s steps: set again only when it changes
        db = self.db
        if getattr(db, "busy_ms", None) != ms:
            db.conn.execute(f"pragma busy_timeout = {ms}")
            setattr(db, "busy_ms", ms)  # on the connection: it travels through the pool

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """A read's rows as dicts, in one statement: sqlite-utils' query() wraps each
        in a SAVEPOINT and its RELEASE, three statements on an ack's path."""
        cur = self.db.conn.execute(sql, args)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def write_state(self) -> WriteHealth:
        """A copy of the counts (for /metrics)."""
        with self._writes_lock:
            return WriteHealth(Counter(self.writes.failures), self.writes.last_failure,
                               self.writes.last_failure_at, self.writes.last_success_at)

    def probe_write(self, seconds: float) -> Unwritable | None:
        """Can the database be written now (within `seconds`)? A write that needs
        a page, undone in the same transaction: what a queued trial needs."""
        try:
            with self.budget(seconds), self.tx():
                self.db.execute("insert into requests (key, created, jobs) values "
                                "('health-probe', 0, zeroblob(4096))")
                self.db.execute("delete from requests where key = 'health-probe'")
        except Unwritable as exc:
            return exc
        return None

    @property
    def db(self) -> sqlite_utils.Database:
        """This thread's connection: its own, or one from the pool while it borrows."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._take_connection()
        return db

    @contextlib.contextmanager
    def borrowed(self) -> Iterator[None]:
        """The connection this block uses goes back to the pool at its end: for
        a thread that lives for one request (the HTTP server makes one per
        connection), so it does not open a connection of its own each time."""
        if getattr(self._local, "borrowing", False) or getattr(self._local, "db", None):
            yield
            return
        self._local.borrowing = True
        try:
            yield
        finally:
            self._local.borrowing = False
            db = self._local.__dict__.pop("db", None)
            if db is not None:
                self._return_connection(db)

    def _take_connection(self) -> sqlite_utils.Database:
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return sqlite_utils.Database(connect(self.path))

    def _return_connection(self, db: sqlite_utils.Database) -> None:
        if db.conn.in_transaction:
            db.conn.rollback()
        with self._pool_lock:
            if len(self._pool) < POOL_KEEP:
                self._pool.append(db)
                return
        db.conn.close()

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
        # Slack retries within minutes: a day of keys is plenty to keep. Pruned once a
        # minute, not on every command: the delete reads the whole table.
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + 60
            self.db.execute("delete from requests where created < ?", [time.time() - 86400])
        if within is not None:
            self.db.execute("delete from requests where key = ? and created < ?",
                            [request, time.time() - within])
        seen = self.db.execute("insert into requests (key, created) values (?, ?) "
                               "on conflict(key) do nothing", [request, time.time()]).rowcount == 0
        if seen:
            row = self.db.execute("select jobs from requests where key = ?", [request]).fetchone()
            raise DuplicateRequest(json.loads(row[0] or "[]"))
