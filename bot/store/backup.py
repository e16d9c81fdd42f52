"""`trialbot backup`: a consistent copy of the live file."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def backup(source: str, target: str) -> dict:
    """Copy the live database to `target` with SQLite's online backup API: one
    step (pages=-1) is one read transaction, a consistent snapshot that in WAL
    mode never blocks the bot's writers (a paged copy restarts whenever they
    write). Written beside `target` first, so a failure leaves no half file."""
    partial = target + ".partial"
    src = sqlite3.connect(Path(source).resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)
            tables = {r[0] for r in dst.execute("select name from sqlite_master "
                                                "where type = 'table'")}
            jobs = (dst.execute("select count(*) from jobs").fetchone()[0]
                    if "jobs" in tables else 0)
            version = dst.execute("pragma user_version").fetchone()[0]
        finally:
            dst.close()
    finally:
        src.close()
    os.replace(partial, target)
    return {"bytes": os.path.getsize(target), "jobs": jobs, "version": version}
