"""Admin commands on the database file, safe while the bot runs (SQLite WAL):
`trialbot worker-token create|revoke|list` and `trialbot backup PATH`.
Each prints one clear line on failure and returns 2; 0 when done."""
from __future__ import annotations

import os
import sqlite3
import sys
import time

from bot.http import tokens
from bot.store import Store, backup
from bot.store.migrations import SchemaTooNew
from worker.api import size


def _fail(message: str) -> int:
    print(f"trialbot: {message}", file=sys.stderr)
    return 2


def _open(db: str) -> Store | None:
    """The bot's database; None (said) when there is none: a mistyped --db
    must not quietly get tokens in a new empty file the bot never reads."""
    if not os.path.isfile(db):
        _fail(f"no database at {db}: give the bot's file with --db or TRIALBOT_DB "
              "(`trialbot serve` creates it on first start)")
        return None
    return Store(db)


def worker_token(db: str, action: str, name: str | None) -> int:
    if action != "list" and not (name and tokens.NAME.fullmatch(name)):
        return _fail(f"worker name {name!r} must be 1-100 letters, digits, '.', '_' or '-' "
                     "(starting with a letter or digit)")
    try:
        store = _open(db)
    except SchemaTooNew as exc:
        return _fail(str(exc))
    if store is None:
        return 2
    if action == "create":
        assert name  # checked above for every action but list
        token = tokens.new_token()
        if not store.add_worker_token(name, tokens.digest(token)):
            return _fail(f"worker {name!r} already has an active token; revoke it first "
                         f"(`trialbot worker-token revoke {name}`)")
        print(f"Token for worker {name} (shown once; only its hash is stored):\n\n  {token}\n\n"
              f"Start the worker with it (in the environment, not on the command line, "
              f"where `ps` shows it):\n\n  TRIALBOT_WORKER_TOKEN='{token}' trialbot-worker "
              f"--server http://BOT-HOST:3000 --name {name}\n\nIt may act only as {name}; "
              f"`trialbot worker-token revoke {name}` stops it at its next request.")
        return 0
    if action == "revoke":
        assert name  # checked above for every action but list
        if not store.revoke_worker_token(name):
            known = {t["name"] for t in store.worker_tokens()}
            return _fail(f"worker {name!r} has no active token"
                         + (" (already revoked)" if name in known else
                            "; `trialbot worker-token list` shows them"))
        print(f"Revoked the token of worker {name}: its next request gets 401.")
        return 0
    rows = store.worker_tokens()
    if not rows:
        print("No worker tokens; workers use the shared TRIALBOT_WORKER_TOKEN.")
    for r in rows:
        state = f"revoked {_when(r['revoked'])}" if r["revoked"] else "active"
        print(f"{r['name']}\tcreated {_when(r['created'])}\t{state}")
    return 0


def run_backup(db: str, path: str, force: bool) -> int:
    if not os.path.isfile(db):
        return _fail(f"no database at {db}: give the bot's file with --db or TRIALBOT_DB")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return _fail(f"no directory {folder} for the backup; create it first")
    if os.path.isdir(path):
        return _fail(f"{path} is a directory; give the backup's file name")
    if os.path.exists(path) and not force:
        return _fail(f"{path} exists; give --force to replace it")
    if os.path.abspath(path) == os.path.abspath(db):
        return _fail("the backup must be another file than the database")
    try:
        copied = backup(db, path)
    except (OSError, sqlite3.Error) as exc:  # backup() removed its partial files
        return _fail(f"cannot back up {db} to {path}: {exc}")
    print(f"Backed up {db} to {path}: {size(copied['bytes'])}, {copied['jobs']} "
          f"jobs, schema version {copied['version']}.")
    if not copied["recorded"]:
        print(f"It is not recorded in {db} (not writable, or not migrated: start "
              "`trialbot serve` once), so `trialbot doctor` cannot show it.")
    return 0


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
