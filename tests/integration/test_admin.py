"""Schema migrations, `trialbot backup` and `trialbot worker-token`, on real
SQLite files and as a user runs the commands."""
import re
import sqlite3
import subprocess
import threading

import pytest

from bot.http import tokens
from bot.store import Store, backup, migrations
from conftest import BIN, ROOT


def trialbot(*args, env=None):
    return subprocess.run([str(BIN / "trialbot"), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env=env)


def test_an_old_file_is_migrated_at_start_with_rows_kept(tmp_path):
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)  # a jobs table from before progress, cancel and groups
    conn.execute("create table jobs (id integer primary key, workload text not null, "
                 "spec text not null, words text, user text, channel text, status text not "
                 "null, worker text, lease text, lease_expires float, attempts integer "
                 "default 0, created float, started float, finished float, report text)")
    conn.execute("insert into jobs (workload, spec, words, user, channel, status, created) "
                 "values ('llm-infer', '{\"workload\": \"llm-infer\", \"params\": {}}', "
                 "'llm-infer', 'U1', 'C1', 'queued', 1.0)")
    conn.execute("create table workers (name text primary key, info text, registered float, "
                 "last_seen float)")
    conn.execute("insert into workers values ('gpu-a', '{}', 1.0, 2.0)")
    conn.commit()
    conn.close()
    store = Store(path)
    job = store.job(1)
    assert job["words"] == "llm-infer" and job["status"] == "queued" and job["cancel"] is None
    assert [w["name"] for w in store.workers()] == ["gpu-a"]
    assert store.db.execute("pragma user_version").fetchone()[0] == migrations.LATEST
    assert store.worker_tokens() == []
    Store(path)  # a second start has nothing to do
    assert sqlite3.connect(path).execute("pragma user_version").fetchone()[0] == migrations.LATEST


def test_a_file_from_a_newer_trialbot_is_refused_untouched(tmp_path):
    path = tmp_path / "new.db"
    Store(str(path))
    conn = sqlite3.connect(path)
    conn.execute(f"pragma user_version = {migrations.LATEST + 1}")
    conn.execute("alter table jobs add column from_the_future text")
    conn.commit()
    conn.close()
    dump = list(sqlite3.connect(path).iterdump())
    with pytest.raises(migrations.SchemaTooNew, match="upgrade trialbot"):
        Store(str(path))
    assert list(sqlite3.connect(path).iterdump()) == dump
    done = trialbot("console", "--db", str(path))
    assert done.returncode == 2 and "newer than this trialbot" in done.stderr
    assert "Traceback" not in done.stderr


def test_backup_while_the_bot_writes_is_consistent(tmp_path):
    src, dst = str(tmp_path / "live.db"), str(tmp_path / "copy.db")
    Store(src)
    stop = threading.Event()
    written = []

    def writer():  # as the bot writes: WAL, transactions of 5 rows
        conn = sqlite3.connect(src, isolation_level=None, timeout=30)
        while not stop.is_set():
            conn.execute("begin immediate")
            conn.executemany("insert into jobs (workload, spec, status) values "
                             "('llm-infer', '{}', 'queued')", [()] * 5)
            conn.execute("commit")
            written.append(5)
        conn.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        while sum(written) < 50:
            stop.wait(0.001)
        copies = [backup(src, dst + str(i)) for i in range(3)]
    finally:
        stop.set()
        t.join()
    for i, copied in enumerate(copies):
        conn = sqlite3.connect(dst + str(i))
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        jobs = conn.execute("select count(*) from jobs").fetchone()[0]
        assert jobs == copied["jobs"] and jobs % 5 == 0 and jobs >= 50  # whole transactions
        assert conn.execute("pragma user_version").fetchone()[0] == migrations.LATEST
    assert not (tmp_path / "copy.db0.partial").exists()


def test_backup_command(tmp_path):
    db = tmp_path / "bot.db"
    Store(str(db)).add_job({"workload": "llm-infer", "params": {}}, "llm-infer", "U1", "C1")
    out = tmp_path / "b.db"
    done = trialbot("backup", str(out), "--db", str(db))
    assert done.returncode == 0 and "1 jobs" in done.stdout and " KiB" in done.stdout
    assert sqlite3.connect(out).execute("pragma integrity_check").fetchone()[0] == "ok"
    for args, says in [((str(out),), "--force"),
                       ((str(tmp_path / "nope" / "b.db"),), "no directory"),
                       ((str(out), "--db", str(tmp_path / "missing.db")), "no database")]:
        done = trialbot("backup", *args, *(() if "--db" in args else ("--db", str(db))))
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert trialbot("backup", str(out), "--force", "--db", str(db)).returncode == 0


def test_a_backup_onto_a_full_disk_leaves_no_partial_files(tmp_path):
    """The disk fills mid-copy (a file-size limit on the real command stands for
    it: no mount needed) after an earlier backup was killed: the command says so
    and leaves neither a partial copy nor a rollback journal behind."""
    import resource
    import signal
    db = tmp_path / "bot.db"
    store = Store(str(db))
    store.add_jobs([{"workload": "llm-infer", "params": {"pad": "x" * 4000}}] * 200,
                   ["llm-infer"] * 200, "U1", "C1")
    assert db.stat().st_size + (tmp_path / "bot.db-wal").stat().st_size > 512 * 1024

    def small_files():  # writes past 256 KiB fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    out = tmp_path / "copies" / "b.db"
    out.parent.mkdir()
    for left in ("b.db.partial", "b.db.partial-journal"):  # a backup killed mid-copy
        (out.parent / left).write_bytes(b"\0" * 4096)
    done = subprocess.run([str(BIN / "trialbot"), "backup", str(out), "--db", str(db)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          preexec_fn=small_files)
    assert done.returncode == 2 and "cannot back up" in done.stderr, done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == []
    assert trialbot("backup", str(out), "--db", str(db)).returncode == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["b.db"]


def test_worker_token_commands(tmp_path):
    db = tmp_path / "bot.db"
    Store(str(db))
    done = trialbot("worker-token", "create", "gpu-a", "--db", str(db))
    assert done.returncode == 0
    assert "trialbot-worker" in done.stdout and "--name gpu-a" in done.stdout
    token = next(w for w in done.stdout.split() if len(w) == 43)  # token_urlsafe(32)
    hashes = Store(str(db)).active_token_hashes()
    assert hashes == [("gpu-a", tokens.digest(token))]
    assert token not in db.read_bytes().decode("latin-1")
    assert tokens.caller(f"Bearer {token}", "shared", hashes) == "gpu-a"
    assert tokens.caller("Bearer shared", "shared", hashes) is tokens.SHARED
    assert tokens.caller(f"Bearer {token}x", "shared", hashes) is None
    for args, says in [(("create", "gpu-a"), "already has an active token"),
                       (("revoke", "gpu-b"), "no active token"),
                       (("create", "bad name"), "must be"),
                       (("create",), "must be")]:
        done = trialbot("worker-token", *args, "--db", str(db))
        assert done.returncode == 2 and says in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert trialbot("worker-token", "revoke", "gpu-a", "--db", str(db)).returncode == 0
    assert Store(str(db)).active_token_hashes() == []
    listing = trialbot("worker-token", "list", "--db", str(db)).stdout
    assert "gpu-a" in listing and "revoked" in listing and token not in listing
    again = trialbot("worker-token", "create", "gpu-a", "--db", str(db))  # a new one, after revoke
    assert again.returncode == 0 and token not in again.stdout


def test_token_and_backup_commands_while_the_bot_serves(served_bot, bot_env, tmp_path):
    """`trialbot worker-token create` while `trialbot serve` runs: the token
    works at once, only as its worker; revoked, it is refused at once."""
    from worker.client import ApiError, Client
    done = trialbot("worker-token", "create", "gpu-a", env=bot_env)
    assert done.returncode == 0, done.stderr
    token = next(w for w in done.stdout.split() if len(w) == 43)
    c = Client(served_bot.url, token)
    assert c.register("gpu-a", {})["worker"] == "gpu-a"
    with pytest.raises(ApiError) as err:
        c.register("gpu-b", {})
    assert err.value.status == 403
    assert trialbot("worker-token", "revoke", "gpu-a", env=bot_env).returncode == 0
    with pytest.raises(ApiError) as err:
        c.lease("gpu-a", 0)
    assert err.value.status == 401
    copy = tmp_path / "served-copy.db"
    done = trialbot("backup", str(copy), env=bot_env)
    assert done.returncode == 0, done.stderr
    assert sqlite3.connect(copy).execute("pragma integrity_check").fetchone()[0] == "ok"
    done = trialbot("doctor", env=bot_env)  # beside the running bot, on what it wrote
    assert done.returncode == 0, done.stdout
    for check, says in [("database", "the latest"), ("wal", "WAL"), ("backup", "served-copy.db"),
                        ("workers", "gpu-a (CPU, seen")]:
        assert re.search(rf"^ok +{check} .*{re.escape(says)}", done.stdout, re.M), done.stdout


def test_a_column_a_later_step_adds_to_a_baseline_table_survives_a_restart(tmp_path):
    path = str(tmp_path / "t.db")
    Store(path).db.execute("alter table actuals add column extra text")  # as a step would
    reopened = Store(path)
    assert "extra" in reopened.db["actuals"].columns_dict
