"""What `trialbot doctor` reads from the database, read-only: opening a Store
would migrate the file and turn WAL on, hiding the very things it checks.
Whether it can be written is asked with a write rolled back."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from bot.store.base import Row, Unwritable, unwritable


def read(path: str, seen_within: float) -> Row:
    """The file's schema version and journal mode, its last recorded backup, the
    workers seen in the last `seen_within` seconds and the last one seen at all,
    and the outbox's unsent messages (how many; the oldest's channel, age, error).
    Raises sqlite3.Error when the file cannot be read as a database."""
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
    try:
        tables = {r[0] for r in conn.execute("select name from sqlite_master "
                                             "where type = 'table'")}
        out = {"version": conn.execute("pragma user_version").fetchone()[0],
               "journal": conn.execute("pragma journal_mode").fetchone()[0].lower(),
               "backup": None, "workers": None, "last_worker": None, "outbox": None}
        if "backups" in tables:
            row = conn.execute("select at, path, bytes, version from backups "
                               "order by at desc limit 1").fetchone()
            if row:
                out["backup"] = dict(zip(("at", "path", "bytes", "version"), row))
        if "workers" in tables:
            rows = conn.execute("select name, info, last_seen from workers where last_seen >= ? "
                                "order by name", [time.time() - seen_within]).fetchall()
            out["workers"] = [{"name": n, "info": json.loads(i or "{}"), "last_seen": s}
                              for n, i, s in rows]
            last = conn.execute("select name, last_seen from workers "
                                "order by last_seen desc limit 1").fetchone()
            out["last_worker"] = {"name": last[0], "last_seen": last[1]} if last else None
        if "outbox" in tables:
            out["outbox"] = _outbox(conn)
        return out
    finally:
        conn.close()


def _outbox(conn: sqlite3.Connection) -> Row:
    count = conn.execute("select count(*) from outbox where sent is null and "
                         "given_up is null").fetchone()[0]
    row = conn.execute("select channel, created, tries, last_error from outbox where sent is "
                       "null and given_up is null order by id limit 1").fetchone()
    refused = conn.execute("select last_error from outbox where sent is null and given_up is "
                           "null and last_error is not null order by id desc limit 1").fetchone()
    return {"count": count, "last_error": refused[0] if refused else None,
            "oldest": dict(zip(("channel", "created", "tries", "last_error"), row))
            if row else None}


def writable(path: str, seconds: float) -> Unwritable | None:
    """None when this user can write the file now, else why not: a write
    transaction is begun (waiting up to `seconds` for another writer) and
    rolled back, so nothing changes. A full disk shows only at a commit (the
    doctor's disk line checks the free space instead)."""
    conn = sqlite3.connect(path, timeout=seconds, isolation_level=None)
    try:
        version = conn.execute("pragma user_version").fetchone()[0]
        conn.execute("begin immediate")
        try:
            conn.execute(f"pragma user_version = {int(version)}")  # a write, the same value
        finally:
            conn.execute("rollback")
    except sqlite3.Error as exc:
        failed = unwritable(exc)
        if failed is None:
            raise
        return failed
    finally:
        conn.close()
    return None
