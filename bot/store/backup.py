"""`trialbot backup`: a consistent copy of the live file."""
from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from bot.store.base import Row


def backup(source: str, target: str) -> Row:
    """Copy the live database to `target` with SQLite's online backup API: one
    step (pages=-1) is one read transaction, a consistent snapshot that in WAL
    mode never blocks the bot's writers (a paged copy restarts whenever they
    write). Written beside `target` first, so a failure (a full disk) leaves no
    half file, and no journal of one: those of a backup killed earlier are
    removed first, since SQLite would roll a stale journal into the new copy."""
    partial = target + ".partial"
    _remove_partial(partial)
    try:
        jobs, version = _copy(source, partial)
    except BaseException:
        _remove_partial(partial)
        raise
    os.replace(partial, target)
    made = {"bytes": os.path.getsize(target), "jobs": jobs, "version": version}
    return dict(made, recorded=_record(source, target, made))


def _copy(source: str, partial: str) -> tuple[int, int]:
    """The online copy into `partial`: its jobs and schema version."""
    src = sqlite3.connect(Path(source).resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)
            tables = {r[0] for r in dst.execute("select name from sqlite_master "
                                                "where type = 'table'")}
            jobs = (dst.execute("select count(*) from jobs").fetchone()[0]
                    if "jobs" in tables else 0)
            return jobs, dst.execute("pragma user_version").fetchone()[0]
        finally:
            dst.close()
    finally:
        src.close()


def _remove_partial(partial: str) -> None:
    for path in (partial, partial + "-journal", partial + "-wal", partial + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _record(source: str, target: str, made: Row) -> bool:
    """Note the backup in the source's `backups` table, for `trialbot doctor`;
    False when it cannot (a file not yet migrated, or one we may only read):
    the copy is made all the same."""
    try:
        conn = sqlite3.connect(source, timeout=30)
        try:
            with conn:
                conn.execute("insert into backups (at, path, bytes, version) values "
                             "(?, ?, ?, ?)", [time.time(), os.path.abspath(target),
                                              made["bytes"], made["version"]])
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return True
