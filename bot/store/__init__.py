"""All state, in one SQLite file (WAL), through sqlite-utils. The only module
with SQL in it (with bot/migrations.py, the versioned schema steps).

Rows: `jobs` (a trial request and its lease), `attempts` (every try of a job),
`workers`, `worker_idle` (seconds ready with nothing to run, per day),
`worker_requests` (the workers' idempotency keys, a day of them),
`outbox` (every message the bot will post, stored before it is sent),
`worker_tokens` (per-worker API tokens, hashed), the
plans' tables, and `digests` / `digests_sent` (the weekly digest's schedule
per channel, and each week posted).
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import sqlite_utils

from bot.store import migrations


ENDED = ("done", "failed", "cancelled")  # a job's status once nothing more will happen
RESPONSE_URL_SECONDS, RESPONSE_URL_USES = 30 * 60, 5  # what Slack allows a response_url

# Every jobs column but the timeline, which only the chart reads.
JOB_COLUMNS = ("id, workload, spec, words, user, channel, status, worker, lease, lease_expires, "
               "attempts, created, started, finished, report, error_class, started_msg, sweep, plan, block, "
               "ladder, budget, group_kind, progress, cancel, cancelled_by, response_url, redirect")


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


class Store:
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
        kept); then the versioned steps in bot/migrations.py. A file already at
        the baseline or later is not transformed: transform drops columns it
        does not list, which would undo a later step's `alter table ... add`.
        A file from a newer trialbot is refused before anything is written."""
        db = self.db
        found = migrations.check_not_newer(db.conn, self.path)
        db.enable_wal()
        if found < migrations.BASELINE:
            self._baseline()
        migrations.migrate(db.conn, self.path)

    def _baseline(self) -> None:
        """Schema version 1. Frozen: a change to the schema is a new step in
        bot/migrations.py, never an edit here."""
        db = self.db
        db["jobs"].create({
            "id": int, "workload": str, "spec": str, "words": str, "user": str,
            "channel": str, "status": str, "worker": str, "lease": str,
            "lease_expires": float, "attempts": int, "created": float, "started": float,
            "finished": float, "report": str, "error_class": str, "started_msg": int,
            "timeline": str,  # apart from `report`: status and list stay light
            "sweep": int,  # the first job's id, for every job of one `/trial sweep`
            "plan": str, "block": str,  # `/trial ... plan=NAME block=KIND`: an actual
            "ladder": int, "budget": float,  # `/trial ladder`: first job's id, memory budget
            "group_kind": str,  # "ladder" or "ab": what the `ladder` group's message is
            "progress": str,  # the worker's last heartbeat: phase and attempt
            "cancel": float, "cancelled_by": str,  # a cancel asked for, and by whom
        }, pk="id", not_null={"workload", "spec", "status"},
            defaults={"attempts": 0}, transform=True)
        db["jobs"].create_index(["status"], if_not_exists=True)
        db["jobs"].create_index(["user", "started"], if_not_exists=True)  # fair leasing
        # A Slack request that queued jobs, by its trigger_id: a retried or
        # doubled request finds its key taken and queues nothing.
        db["requests"].create({"key": str, "jobs": str, "created": float}, pk="key",
                              transform=True)
        db["workers"].create({"name": str, "info": str, "registered": float,
                              "last_seen": float, "job": int},
                             pk="name", transform=True)
        db["outbox"].create({
            "id": int, "channel": str, "thread_of": int, "job": int, "kind": str,
            "text": str, "blocks": str, "created": float, "sent": float, "ts": str,
            "tries": int, "last_error": str, "given_up": float, "file": str,
            "content": str,  # a file's text (an export); a chart is drawn at send time
            "update_of": int,  # chat.update of that message instead of a new post
            "version": int,  # bumped when a pending update's text is replaced
        }, pk="id", defaults={"tries": 0, "version": 0}, transform=True)
        db["outbox"].create_index(["sent"], if_not_exists=True)
        # Every try of a job: the worker's own retries and leases that expired.
        db["attempts"].create({
            "id": int, "job": int, "n": int, "worker": str, "status": str, "error_class": str,
            "message": str, "seconds": float, "changed": str, "next": str, "recorded": float,
        }, pk="id", transform=True)
        db["attempts"].create_index(["job"], if_not_exists=True)
        db["worker_idle"].create({"worker": str, "day": str, "seconds": float},
                                 pk=("worker", "day"), transform=True)
        # Plans: `facts` holds the checklist and the planning settings, `locked` the
        # config and code version each block's trials had when the plan was locked.
        db["plans"].create({"name": str, "channel": str, "user": str, "created": float,
                            "facts": str, "locked": str}, pk="name", transform=True)
        db["blocks"].create({"plan": str, "kind": str, "runs": int, "configs": int,
                             "gpus": int, "trials": str, "sweep": int, "predict": str,
                             "handoff": float, "note": str, "user": str, "created": float},
                            pk=("plan", "kind"), transform=True)
        db["prices"].create({"id": int, "item": str, "kind": str, "value": float,
                             "unit": str, "currency": str, "source": str, "date": str,
                             "user": str, "recorded": float}, pk="id", transform=True)
        db["actuals"].create({"id": int, "plan": str, "block": str, "hours": float,
                              "parts": str, "runs": int, "note": str, "user": str,
                              "recorded": float},
                             pk="id", transform=True)
        # The weekly digest: one schedule per channel, and one row per channel and
        # week posted (its key makes a second post of a week impossible).
        db["digests"].create({"channel": str, "weekday": str, "hour": int, "minute": int,
                              "tz": str, "user": str, "created": float},
                             pk="channel", transform=True)
        db["digests_sent"].create({"channel": str, "week": str, "posted": float,
                                   "message": int}, pk=("channel", "week"), transform=True)
        db["jobs"].create_index(["channel", "finished"], if_not_exists=True)
        db["jobs"].create_index(["plan"], if_not_exists=True)  # a plan's actuals

    # jobs ------------------------------------------------------------------

    def add_job(self, spec: dict, words: str, user: str, channel: str) -> dict:
        return self.add_jobs([spec], [words], user, channel)[0]

    def add_jobs(self, specs: list[dict], words: list[str], user: str, channel: str,
                 sweep: bool = False, tags: dict | None = None, group: str | None = None,
                 budget: float | None = None, request: str | None = None,
                 response_url: str | None = None) -> list[dict]:
        """Queue several jobs in one transaction; with `sweep`, all of them carry
        the first one's id as their sweep id; `tags` ({plan, block}) make them a
        plan's actuals. A `request` key already used raises DuplicateRequest and
        queues nothing; `request` is Slack's trigger_id, or a list of (key,
        seconds it holds or None for a day). `response_url` (the command's)
        reaches the requester if the channel refuses the trial's messages."""
        ids = []
        tags = tags or {}
        keys = [(request, None)] if isinstance(request, str) else [
            (key, within) for key, within in request or [] if key is not None]
        with self.tx():
            for key, within in keys:
                self._claim(key, within)
            if response_url:
                self._add_response_url(response_url)
            for spec, w in zip(specs, words):
                cur = self.db.execute(
                    "insert into jobs (workload, spec, words, user, channel, status, created, "
                    "plan, block, response_url) values (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                    [spec["workload"], json.dumps(spec), w, user, channel, time.time(),
                     tags.get("plan"), tags.get("block"), response_url])
                ids.append(cur.lastrowid)
            column = "sweep" if sweep else "ladder" if group else None
            if column:  # the group's id is its first job's
                self.db.execute(f"update jobs set {column} = ?, budget = ?, group_kind = ? "
                                f"where id in ({','.join('?' * len(ids))})",
                                [ids[0], budget, group, *ids])
            for key, _ in keys:
                self.db.execute("update requests set jobs = ? where key = ?",
                                [json.dumps(ids), key])
        return [self.job(i) for i in ids]

    def sweep_jobs(self, sweep: int) -> list[dict]:
        return [_job(r) for r in self.db["jobs"].rows_where(
            "sweep = ?", [sweep], order_by="id", select=JOB_COLUMNS)]

    def ladder_jobs(self, ladder: int) -> list[dict]:
        return [_job(r) for r in self.db["jobs"].rows_where(
            "ladder = ?", [ladder], order_by="id", select=JOB_COLUMNS)]

    def job(self, job_id: int) -> dict | None:
        rows = list(self.db["jobs"].rows_where("id = ?", [job_id], select=JOB_COLUMNS))
        return _job(rows[0]) if rows else None

    def report_with_timeline(self, job_id: int) -> dict:
        """The full report, memory timeline included (for the chart)."""
        row = self.db.execute("select report, timeline from jobs where id = ?",
                              [job_id]).fetchone()
        report = json.loads(row[0])
        report["timeline"] = json.loads(row[1]) if row[1] else None
        return report

    def jobs(self, limit: int = 10, channel: str | None = None, user: str | None = None,
             status: tuple[str, ...] = ()) -> list[dict]:
        """Newest first; `user` and `status` narrow it (`/trial list mine|running|failed`)."""
        clauses, args = [], []
        for column, value in (("channel", channel), ("user", user)):
            if value:
                clauses.append(f"{column} = ?")
                args.append(value)
        if status:
            clauses.append(f"status in ({','.join('?' * len(status))})")
            args += list(status)
        return [_job(r) for r in self.db["jobs"].rows_where(
            " and ".join(clauses) or None, args or None, order_by="id desc", limit=limit,
            select=JOB_COLUMNS)]

    def lease_next(self, worker: str, seconds: float, can_run=lambda spec: True,
                   max_leases: int = 2, key: str | None = None) -> dict | None:
        """Give a queued job (or one whose lease expired, fewer than `max_leases`
        times leased) that `worker` can run: fairly across users — first the job
        whose owner has had the fewest jobs started since it was queued, then
        the oldest — so one user's sweep of 50 does not starve another's single
        trial. The conditional UPDATE makes racing workers safe: only one matches."""
        now = time.time()
        for row in list(self.db.query(
                "select id, status, spec, worker, started from jobs j where status = 'queued' "
                "or (status = 'running' and lease_expires < ? and attempts < ? "
                "and cancel is null) order by "
                "(select count(*) from jobs r where r.user = j.user and r.started >= j.created),"
                " id limit 50", [now, max_leases])):
            if not can_run(json.loads(row["spec"])):
                continue
            lease = uuid.uuid4().hex
            with self.tx():
                cur = self.db.execute(
                    "update jobs set status = 'running', worker = ?, lease = ?, "
                    "lease_expires = ?, attempts = attempts + 1, started = ? "
                    "where id = ? and (status = 'queued' or "
                    "(status = 'running' and lease_expires < ? and cancel is null))",
                    [worker, lease, now + seconds, now, row["id"], now])
                if cur.rowcount != 1:
                    continue  # another worker took it first: it records the lost lease
                if row["status"] == "running":  # the previous worker went silent
                    self._add_attempt(row["id"], row["worker"], {
                        "status": "failed", "error_class": "killed",
                        "message": f"lease expired: {row['worker']} sent no heartbeat "
                                   "(worker died, or lost its network); re-queued",
                        "seconds": now - (row["started"] or now)})
                self.db.execute("update workers set job = ?, last_seen = ? where name = ?",
                                [row["id"], now, worker])
                self._leased_under(worker, key, lease, job=row["id"])
                return self.job(row["id"])
        return None

    def expired_jobs(self, max_leases: int) -> list[dict]:
        """Running jobs whose lease expired after their last allowed lease, or
        that were cancelled before their worker went silent (never re-leased)."""
        rows = self.db["jobs"].rows_where(
            "status = 'running' and lease_expires < ? and (attempts >= ? or cancel is not null)",
            [time.time(), max_leases], order_by="id", select=JOB_COLUMNS)
        return [_job(r) for r in rows]

    def fail_expired(self, job: dict, report: dict, messages: list[dict]) -> bool:
        """End a job whose last lease expired; only if it is still that lease."""
        lost = {"status": "failed", "error_class": report["error"]["class"],
                "message": report["error"]["message"],
                "seconds": time.time() - (job["started"] or time.time())}
        return self._finish(job["id"], job["worker"], job["lease"], report, messages, [lost],
                            expired=True)

    def extend_lease(self, job_id: int, worker: str, lease: str, seconds: float) -> bool:
        with self.tx():
            cur = self.db.execute(
                "update jobs set lease_expires = ? where id = ? and worker = ? and lease = ? "
                "and status = 'running'", [time.time() + seconds, job_id, worker, lease])
            if cur.rowcount == 1:  # a refused heartbeat changes nothing, not even last_seen
                self.db.execute("update workers set last_seen = ? where name = ?",
                                [time.time(), worker])
        return cur.rowcount == 1

    def finish_job(self, job_id: int, worker: str, lease: str, report: dict,
                   messages: list[dict], key: str | None = None) -> bool:
        """Store the report and its outbox messages in one transaction, only if
        `lease` still holds the job: a late worker cannot overwrite a newer attempt.
        The worker's request `key` is kept with it (a retry finds it answered)."""
        tries = report.get("attempts") or [{
            "status": report["status"], "error_class": (report.get("error") or {}).get("class"),
            "message": (report.get("error") or {}).get("message"),
            "seconds": report.get("seconds")}]
        return self._finish(job_id, worker, lease, report, messages, tries, key=key)

    def _finish(self, job_id, worker, lease, report, messages, tries, expired=False,
                key=None) -> bool:
        error = (report.get("error") or {}).get("class")
        status = ("done" if report["status"] == "ok" else
                  "cancelled" if error == "cancelled" else "failed")
        now = time.time()
        light = {k: v for k, v in report.items() if k != "timeline"}
        timeline = json.dumps(report["timeline"]) if report.get("timeline") else None
        with self.tx():
            cur = self.db.execute(
                "update jobs set status = ?, report = ?, timeline = ?, error_class = ?, "
                "finished = ?, lease = null, lease_expires = null where id = ? and worker = ? "
                "and lease = ? and status = 'running'"
                + (" and lease_expires < ?" if expired else ""),
                [status, json.dumps(light), timeline, error, now, job_id, worker, lease]
                + ([now] if expired else []))
            if cur.rowcount != 1:
                return False
            if expired:  # the worker went silent: not "seen"
                self.db.execute("update workers set job = null where name = ?", [worker])
            else:
                self.db.execute("update workers set job = null, last_seen = ? where name = ?",
                                [now, worker])
            for attempt in tries:
                self._add_attempt(job_id, worker, attempt)
            for message in messages:
                self._add_message(message, job_id)
            if key is not None:
                self._worker_key(worker, key, "report", lease, job=job_id)
        return True

    def _add_attempt(self, job_id: int, worker: str, a: dict) -> None:
        n = self.db.execute("select count(*) from attempts where job = ?", [job_id]).fetchone()[0]
        self.db.execute(
            "insert into attempts (job, n, worker, status, error_class, message, seconds, "
            "changed, next, recorded) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [job_id, n + 1, worker, a["status"], a.get("error_class"),
             (a.get("message") or "")[-500:], a.get("seconds"), json.dumps(a.get("changed") or {}),
             a.get("next"), time.time()])

    def attempts(self, job_id: int) -> list[dict]:
        return list(self.db["attempts"].rows_where("job = ?", [job_id], order_by="n"))

    def attempts_of(self, job_ids: list[int]) -> dict[int, list[dict]]:
        """Several jobs' attempts in one query (a plan's trials)."""
        out = {i: [] for i in job_ids}
        for chunk in range(0, len(job_ids), 500):
            ids = job_ids[chunk:chunk + 500]
            for row in self.db.query(f"select * from attempts where job in "
                                     f"({','.join('?' * len(ids))}) order by job, n", ids):
                out[row["job"]].append(row)
        return out

    def set_started_message(self, job_id: int, message: dict) -> int:
        """The trial's card; on a re-lease, an edit of the card it already has."""
        with self.tx():
            card = self.db.execute("select started_msg from jobs where id = ?",
                                   [job_id]).fetchone()[0]
            if card:
                self._add_message(dict(message, update_of=card), job_id)
                return card
            msg_id = self._add_message(message, job_id)
            self.db.execute("update jobs set started_msg = ? where id = ?", [msg_id, job_id])
        return msg_id

    def set_progress(self, job_id: int, lease: str, progress: dict,
                     messages: list[dict]) -> bool:
        """Store the worker's progress and queue its messages (the card's edit, a
        failed try in the thread), while `lease` still holds the job."""
        with self.tx():
            cur = self.db.execute("update jobs set progress = ? where id = ? and lease = ? "
                                  "and status = 'running'", [json.dumps(progress), job_id, lease])
            if cur.rowcount != 1:
                return False
            cancelled = self.db.execute("select cancel from jobs where id = ?",
                                        [job_id]).fetchone()[0]
            for message in messages:
                if cancelled and message.get("update_of"):
                    continue  # a cancel landed since the card was drawn: its card stays
                self._add_message(message, job_id)
        return True

    def cancel_queued(self, job_id: int, user: str, report: dict, messages: list[dict]) -> bool:
        """Cancel a job no worker has leased yet; False if one has."""
        with self.tx():
            cur = self.db.execute(
                "update jobs set status = 'cancelled', cancel = ?, cancelled_by = ?, "
                "finished = ?, report = ?, error_class = 'cancelled' where id = ? and "
                "status = 'queued'", [time.time(), user, time.time(), json.dumps(report), job_id])
            if cur.rowcount != 1:
                return False
            for message in messages:
                self._add_message(message, job_id)
        return True

    def request_cancel(self, job_id: int, user: str, card: dict | None) -> bool:
        """Mark a running job to be cancelled (the next heartbeat tells its worker);
        `card` is the card's edit, None while the job has no card yet."""
        with self.tx():
            cur = self.db.execute("update jobs set cancel = ?, cancelled_by = ? where id = ? "
                                  "and status = 'running' and cancel is null",
                                  [time.time(), user, job_id])
            if cur.rowcount != 1:
                return False
            if card:
                self._add_message(card, job_id)
        return True

    # workers ---------------------------------------------------------------

    def upsert_worker(self, name: str, info: dict) -> None:
        now = time.time()
        with self.tx():
            self.db.execute(
                "insert into workers (name, info, registered, last_seen) values (?, ?, ?, ?) "
                "on conflict(name) do update set info = excluded.info, "
                "last_seen = excluded.last_seen", [name, json.dumps(info), now, now])

    def seen_worker(self, name: str) -> None:
        with self.tx():
            self.db.execute("update workers set last_seen = ? where name = ?",
                            [time.time(), name])

    def add_idle(self, worker: str, per_day: dict[str, float], key: str | None = None) -> bool:
        """Count a lease request's idle seconds; False, counting nothing, when its
        `key` was seen (the worker sent the request again: its answer was lost)."""
        with self.tx():
            if key is not None and not self._worker_key(worker, key, "lease"):
                return False
            for day, seconds in per_day.items():
                self.db.execute(
                    "insert into worker_idle (worker, day, seconds) values (?, ?, ?) "
                    "on conflict(worker, day) do update set seconds = seconds + excluded.seconds",
                    [worker, day, seconds])
        return True

    def _worker_key(self, worker: str, key: str, kind: str, lease: str | None = None,
                    job: int | None = None, request: int | None = None) -> bool:
        """Inside a transaction: keep a worker request's idempotency key and what
        it did; False when it was kept already. A worker retries for minutes: a
        day of keys is plenty to keep."""
        now = time.time()
        self.db.execute("delete from worker_requests where created < ?", [now - 86400])
        return self.db.execute(
            "insert into worker_requests (worker, key, kind, job, request, lease, created) "
            "values (?, ?, ?, ?, ?, ?, ?) on conflict do nothing",
            [worker, key, kind, job, request, lease, now]).rowcount == 1

    def _leased_under(self, worker: str, key: str | None, lease: str, job: int | None = None,
                      request: int | None = None) -> None:
        """Inside the lease's transaction: the lease a keyed lease request got."""
        if key is not None:
            self.db.execute("update worker_requests set job = ?, request = ?, lease = ? "
                            "where worker = ? and key = ?", [job, request, lease, worker, key])

    def worker_request(self, worker: str, key: str) -> dict | None:
        """What the request with this key did, if it was seen."""
        rows = list(self.db["worker_requests"].rows_where("worker = ? and key = ?",
                                                          [worker, key]))
        return rows[0] if rows else None

    def idle(self, worker: str | None = None) -> list[dict]:
        where, args = ("worker = ?", [worker]) if worker else (None, None)
        return list(self.db["worker_idle"].rows_where(where, args, order_by="worker, day"))

    def worker_states(self, since_day: str) -> list[dict]:
        """Each worker with its current job's start, its last job's end, and its
        idle seconds on days from `since_day` (YYYY-MM-DD) on: `/trial workers`."""
        rows = self.db.query(
            "select w.name, w.info, w.registered, w.last_seen, w.job, "
            "(select started from jobs where id = w.job) as job_started, "
            "(select max(finished) from jobs where worker = w.name) as last_finished, "
            "(select coalesce(sum(seconds), 0) from worker_idle where worker = w.name "
            "and day >= ?) as idle_seconds from workers w order by w.name", [since_day])
        return [dict(r, info=json.loads(r["info"] or "{}")) for r in rows]

    def workers(self, seen_within: float | None = None) -> list[dict]:
        where, args = (("last_seen >= ?", [time.time() - seen_within])
                       if seen_within is not None else (None, None))
        return [dict(w, info=json.loads(w["info"] or "{}"))
                for w in self.db["workers"].rows_where(where, args, order_by="name")]

    # worker tokens ---------------------------------------------------------

    def add_worker_token(self, name: str, digest: str) -> bool:
        """False when `name` has an active token; a revoked name gets a new one."""
        with self.tx():
            cur = self.db.execute(
                "insert into worker_tokens (name, hash, created) values (?, ?, ?) "
                "on conflict(name) do update set hash = excluded.hash, "
                "created = excluded.created, revoked = null where revoked is not null",
                [name, digest, time.time()])
        return cur.rowcount == 1

    def revoke_worker_token(self, name: str) -> bool:
        """False when `name` has no active token."""
        with self.tx():
            cur = self.db.execute("update worker_tokens set revoked = ? where name = ? and "
                                  "revoked is null", [time.time(), name])
        return cur.rowcount == 1

    def worker_tokens(self) -> list[dict]:
        """Every token's name, created and revoked: never its hash."""
        return [dict(r) for r in self.db.query(
            "select name, created, revoked from worker_tokens order by name")]

    def active_token_hashes(self) -> list[tuple[str, str]]:
        """(name, hash) of every active token, read on each request so a revoke
        from `trialbot worker-token revoke` (another process) counts at once."""
        return [tuple(r) for r in self.db.execute(
            "select name, hash from worker_tokens where revoked is null").fetchall()]

    # outbox ----------------------------------------------------------------

    def _add_message(self, message: dict, job_id: int | None) -> int:
        if message.get("update_of"):  # one pending update per message: the newest text wins
            cur = self.db.execute(
                "update outbox set text = ?, blocks = ?, kind = ?, version = version + 1 "
                "where update_of = ? and sent is null and given_up is null",
                [message["text"], json.dumps(message.get("blocks") or []), message.get("kind"),
                 message["update_of"]])
            if cur.rowcount:
                return self.db.execute("select id from outbox where update_of = ? and sent is "
                                       "null and given_up is null",
                                       [message["update_of"]]).fetchone()[0]
        if message.get("response_url"):
            self._add_response_url(message["response_url"])
        cur = self.db.execute(
            "insert into outbox (channel, thread_of, job, kind, text, blocks, file, content, "
            "update_of, via, user, response_url, created) "
            "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [message["channel"], message.get("thread_of"), job_id, message.get("kind"),
             message["text"], json.dumps(message.get("blocks") or []), message.get("file"),
             message.get("content"), message.get("update_of"), message.get("via"),
             message.get("user"), message.get("response_url"), time.time()])
        return cur.lastrowid

    def _add_response_url(self, url: str) -> None:
        # Slack takes up to 5 posts to a response_url within 30 minutes of the command.
        self.db.execute("insert into response_urls (url, expires) values (?, ?) "
                        "on conflict(url) do nothing", [url, time.time() + RESPONSE_URL_SECONDS])

    def add_messages(self, messages: list[dict]) -> None:
        """Messages that belong to no job (a plan's export), in one transaction."""
        with self.tx():
            for message in messages:
                self._add_message(message, None)

    def unsent(self, limit: int = 20, channel: str | None = None) -> list[dict]:
        """Unsent messages in order (of one channel, if given), each with its
        thread parent's ts (or, for an update, the ts of the message it
        replaces) and whether that was given up; and who asked for it: the
        trial's user and response_url for a trial's message, the row's own
        otherwise, and `redirect` when the trial's channel refused it."""
        rows = self.db.query(
            "select o.*, p.ts as thread_ts, p.given_up is not null as parent_given_up, "
            "p.via as parent_via, coalesce(o.user, j.user) as requester, "
            "coalesce(o.response_url, j.response_url) as url, j.redirect as redirect "
            "from outbox o left join outbox p on p.id = coalesce(o.thread_of, o.update_of) "
            "left join jobs j on j.id = o.job "
            "where o.sent is null and o.given_up is null"
            + (" and o.channel = ?" if channel is not None else "")
            + " order by o.id limit ?", ([channel] if channel is not None else []) + [limit])
        return [dict(r, blocks=json.loads(r["blocks"] or "[]")) for r in rows]

    def unsent_channels(self) -> list[str]:
        """Channels with unsent messages, the one waiting longest first."""
        return [r[0] for r in self.db.execute(
            "select channel from outbox where sent is null and given_up is null "
            "group by channel order by min(id)").fetchall()]

    def mark_sent(self, msg_id: int, ts: str, version: int = 0, via: str | None = None,
                  url: str | None = None) -> bool:
        """False when the row's text changed while it was being sent (a newer
        update): it stays unsent, so the newest text goes out too. `via`: the
        path that took it when not the channel; `url`, a response_url it used."""
        with self.tx():
            cur = self.db.execute("update outbox set sent = ?, ts = ?, sent_via = ? where "
                                  "id = ? and version = ?", [time.time(), ts, via, msg_id, version])
            if url:
                self.db.execute("update response_urls set uses = uses + 1 where url = ?", [url])
        return cur.rowcount == 1

    def message(self, msg_id: int) -> dict | None:
        rows = list(self.db["outbox"].rows_where("id = ?", [msg_id]))
        return rows[0] if rows else None

    def mark_failed_try(self, msg_id: int, error: str) -> None:
        with self.tx():
            self.db.execute("update outbox set tries = tries + 1, last_error = ? where id = ?",
                            [error[-500:], msg_id])

    def give_up_message(self, msg_id: int, error: str, notice: dict | None = None,
                        job_id: int | None = None) -> None:
        """Set the message aside; `notice` (the requester's note about it) is
        stored in the same transaction, so a crash loses neither."""
        with self.tx():
            self.db.execute("update outbox set given_up = ?, last_error = ? where id = ?",
                            [time.time(), error[-500:], msg_id])
            if notice:
                self._add_message(notice, job_id)

    def redirect(self, msg_id: int, job_id: int | None, error: str) -> None:
        """The channel refused the message: it, and a trial's later messages,
        go to the requester instead (the outbox picks the path)."""
        with self.tx():
            self.db.execute("update outbox set via = 'redirect', last_error = ? where id = ?",
                            [error[-500:], msg_id])
            if job_id is not None:
                self.db.execute("update jobs set redirect = ? where id = ? and redirect is null",
                                [error, job_id])

    def response_url_usable(self, url: str) -> bool:
        """Not expired, and posted to fewer than 5 times."""
        row = self.db.execute("select expires, uses from response_urls where url = ?",
                              [url]).fetchone()
        return bool(row) and row[0] > time.time() and row[1] < RESPONSE_URL_USES

    def spend_response_url(self, url: str) -> None:
        """Slack refused it (expired or used up): never try it again."""
        with self.tx():
            self.db.execute("update response_urls set uses = ? where url = ?",
                            [RESPONSE_URL_USES, url])

    def unsent_for(self, job_id: int) -> int:
        return self.db.execute("select count(*) from outbox where job = ? and sent is null "
                               "and given_up is null", [job_id]).fetchone()[0]

    # plans -----------------------------------------------------------------

    def add_plan(self, name: str, channel: str, user: str, facts: dict) -> bool:
        """False when a plan of that name exists already."""
        with self.tx():
            cur = self.db.execute(
                "insert into plans (name, channel, user, created, facts) values (?, ?, ?, ?, ?) "
                "on conflict(name) do nothing", [name, channel, user, time.time(),
                                                 json.dumps(facts)])
        return cur.rowcount == 1

    def plan(self, name: str) -> dict | None:
        rows = list(self.db["plans"].rows_where("name = ?", [name]))
        if not rows:
            return None
        row = rows[0]
        return dict(row, facts=json.loads(row["facts"] or "{}"),
                    locked=json.loads(row["locked"]) if row["locked"] else None)

    def plans(self, channel: str | None = None) -> list[dict]:
        """Every plan, or `channel`'s."""
        where, args = ("channel = ?", [channel]) if channel else (None, None)
        return [self.plan(r["name"]) for r in self.db["plans"].rows_where(
            where, args, select="name", order_by="created")]

    def set_plan_facts(self, name: str, facts: dict) -> None:
        with self.tx():
            self.db.execute("update plans set facts = ? where name = ?",
                            [json.dumps(facts), name])

    def set_plan_lock(self, name: str, locked: dict | None) -> None:
        with self.tx():
            self.db.execute("update plans set locked = ? where name = ?",
                            [json.dumps(locked) if locked else None, name])

    def put_block(self, block: dict) -> bool:
        """Add or replace the plan's block of that kind; True when it replaced one."""
        row = dict(block, trials=json.dumps(block.get("trials") or []),
                   predict=json.dumps(block.get("predict") or {}))
        with self.tx():
            old = self.db.execute("select created from blocks where plan = ? and kind = ?",
                                  [block["plan"], block["kind"]]).fetchone()
            # A replaced block keeps its place: with rental=single the first one pays prep.
            row["created"] = old[0] if old else time.time()
            self.db["blocks"].upsert(row, pk=("plan", "kind"))
        return old is not None

    def blocks(self, plan: str) -> list[dict]:
        return [dict(b, trials=json.loads(b["trials"] or "[]"),
                     predict=json.loads(b["predict"] or "{}"))
                for b in self.db["blocks"].rows_where("plan = ?", [plan], order_by="created")]

    def add_price(self, price: dict) -> None:
        with self.tx():
            self.db["prices"].insert(dict(price, recorded=time.time()))

    def prices(self) -> list[dict]:
        """The latest confirmed figure for each (item, kind)."""
        return list(self.db.query(
            "select p.* from prices p where p.id = (select max(id) from prices q "
            "where lower(q.item) = lower(p.item) and q.kind = p.kind) order by p.item, p.kind"))

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

    def add_actual(self, actual: dict, request: str | None = None) -> None:
        """Record a manual actual; a Slack retry of the same command (same
        `request` key) raises DuplicateRequest and records nothing."""
        with self.tx():
            self._claim(request)
            self.db["actuals"].insert(dict(actual, parts=json.dumps(actual.get("parts") or {}),
                                           recorded=time.time()))

    def actuals(self, plan: str) -> list[dict]:
        """The plan's recorded actuals; `slurm` lists the job ids of one read from
        Slurm accounting (None for hours given by hand)."""
        return [dict(a, parts=json.loads(a["parts"] or "{}"),
                     slurm=json.loads(a["slurm"]) if a["slurm"] else None)
                for a in self.db.query(
                    "select a.*, s.jobs as slurm from actuals a left join slurm_actuals s "
                    "on s.actual = a.id where a.plan = ? order by a.id", [plan])]

    # Slurm actuals: requests a Slurm worker leases to run sacct ---------------

    def add_slurm_actual(self, row: dict, request: str | None = None) -> dict:
        """Queue a request; a `request` key seen before (Slack retried) raises
        DuplicateRequest with the id it queued, and queues nothing."""
        with self.tx():
            self._claim(request)
            cur = self.db.execute(
                "insert into slurm_actuals (plan, block, jobs, runs, note, user, channel, "
                "created) values (?, ?, ?, ?, ?, ?, ?, ?)",
                [row["plan"], row["block"], json.dumps(row["jobs"]), row.get("runs"),
                 row.get("note"), row["user"], row["channel"], time.time()])
            if request is not None:
                self.db.execute("update requests set jobs = ? where key = ?",
                                [json.dumps([cur.lastrowid]), request])
        return self.slurm_actual(cur.lastrowid)

    def slurm_actual(self, req_id: int) -> dict | None:
        rows = list(self.db["slurm_actuals"].rows_where("id = ?", [req_id]))
        if not rows:
            return None
        row = rows[0]
        return dict(row, jobs=json.loads(row["jobs"]),
                    result=json.loads(row["result"]) if row["result"] else None)

    def lease_slurm_actual(self, worker: str, seconds: float, max_leases: int,
                           key: str | None = None) -> dict | None:
        """The oldest queued request, or one whose lease expired fewer than
        `max_leases` times; the conditional UPDATE lets one racing worker win."""
        now = time.time()
        for (req_id,) in self.db.execute(
                "select id from slurm_actuals where status = 'queued' or (status = 'running' "
                "and lease_expires < ? and attempts < ?) order by id limit 20",
                [now, max_leases]).fetchall():
            lease = uuid.uuid4().hex
            with self.tx():
                cur = self.db.execute(
                    "update slurm_actuals set status = 'running', worker = ?, lease = ?, "
                    "lease_expires = ?, attempts = attempts + 1 where id = ? and "
                    "(status = 'queued' or (status = 'running' and lease_expires < ?))",
                    [worker, lease, now + seconds, req_id, now])
                if cur.rowcount != 1:
                    continue
                self.db.execute("update workers set last_seen = ? where name = ?", [now, worker])
                self._leased_under(worker, key, lease, request=req_id)
            return self.slurm_actual(req_id)
        return None

    def expired_slurm_actuals(self, max_leases: int) -> list[dict]:
        """Requests whose last allowed lease expired: their workers went silent."""
        return [self.slurm_actual(r[0]) for r in self.db.execute(
            "select id from slurm_actuals where status = 'running' and lease_expires < ? and "
            "attempts >= ? order by id", [time.time(), max_leases]).fetchall()]

    def finish_slurm_actual(self, req: dict, status: str, result: dict, text: str,
                            actual: dict | None, messages: list[dict],
                            expired: bool = False, key: str | None = None) -> bool:
        """End a request held by `req`'s worker and lease: the actual (if any),
        the request's outcome, the channel's message and the worker's request
        `key` in one transaction, so a crash records all of it or none. False
        when the lease is no longer theirs (or, with `expired`, when it has not
        expired)."""
        now = time.time()
        with self.tx():
            cur = self.db.execute(
                "update slurm_actuals set status = ?, result = ?, message = ?, finished = ?, "
                "lease = null, lease_expires = null where id = ? and worker = ? and lease = ? "
                "and status = 'running'" + (" and lease_expires < ?" if expired else ""),
                [status, json.dumps(result), text, now, req["id"], req["worker"], req["lease"]]
                + ([now] if expired else []))
            if cur.rowcount != 1:
                return False
            if actual is not None:
                actual_id = self.db["actuals"].insert(dict(
                    actual, parts=json.dumps(actual.get("parts") or {}), recorded=now)).last_pk
                self.db.execute("update slurm_actuals set actual = ? where id = ?",
                                [actual_id, req["id"]])
            for message in messages:
                self._add_message(message, None)
            if key is not None:
                self._worker_key(req["worker"], key, "result", req["lease"], request=req["id"])
        return True

    def tag_job(self, job_id: int, plan: str, block: str) -> None:
        with self.tx():
            self.db.execute("update jobs set plan = ?, block = ? where id = ?",
                            [plan, block, job_id])

    def plan_jobs(self, plan: str) -> list[dict]:
        """Jobs tagged with the plan: the experiment's actual runs."""
        return [_job(r) for r in self.db["jobs"].rows_where(
            "plan = ?", [plan], order_by="id", select=JOB_COLUMNS)]

    # digests ---------------------------------------------------------------

    def set_digest(self, schedule: dict) -> dict | None:
        """Schedule the channel's digest; the schedule it replaced, if any."""
        old = self.digest(schedule["channel"])
        with self.tx():
            self.db["digests"].upsert(dict(schedule, created=time.time()), pk="channel")
        return old

    def digest(self, channel: str) -> dict | None:
        rows = list(self.db["digests"].rows_where("channel = ?", [channel]))
        return rows[0] if rows else None

    def digests(self) -> list[dict]:
        return list(self.db["digests"].rows_where(order_by="channel"))

    def delete_digest(self, channel: str) -> bool:
        with self.tx():
            cur = self.db.execute("delete from digests where channel = ?", [channel])
        return cur.rowcount == 1

    def digest_sent(self, channel: str, week: str) -> bool:
        return self.db.execute("select 1 from digests_sent where channel = ? and week = ?",
                               [channel, week]).fetchone() is not None

    def post_digest(self, channel: str, week: str | None, messages: list[dict]) -> bool:
        """Store the digest and the messages in its thread (the chart, the
        replies that continue its lists) in one transaction, with the row that
        says `week` was posted: False, storing nothing, when it was already.
        `week` None (`digest now`) records no week."""
        with self.tx():
            if week is not None:
                cur = self.db.execute(
                    "insert into digests_sent (channel, week, posted) values (?, ?, ?) "
                    "on conflict do nothing", [channel, week, time.time()])
                if cur.rowcount != 1:
                    return False
            parent = self._add_message(messages[0], None)
            for message in messages[1:]:
                self._add_message(dict(message, thread_of=parent), None)
            if week is not None:
                self.db.execute("update digests_sent set message = ? where channel = ? and "
                                "week = ?", [parent, channel, week])
        return True

    def digest_trials(self, channel: str, start: float, end: float) -> list[dict]:
        """The channel's trials that ended in [start, end), with the few report
        fields a digest adds up taken out in SQL (a report is large) and their
        attempts counted: all tries, and the seconds the failed ones cost."""
        return [dict(r, phases=json.loads(r["phases"] or "[]")) for r in self.db.query(
            "select j.id, j.status, j.finished, j.worker, "
            "json_extract(j.report, '$.status') as report_status, "
            "json_extract(j.report, '$.seconds') as seconds, "
            "json_extract(j.report, '$.phases') as phases, "
            "json_extract(j.report, '$.latency.count') as count, "
            "json_extract(j.report, '$.env.gpu_count') as gpu_count, "
            "json_extract(j.report, '$.env.gpu_name') as gpu_name, "
            "(select count(*) from attempts a where a.job = j.id) as tries, "
            "(select count(*) from attempts a where a.job = j.id and a.status != 'ok') "
            "as failed_tries, "
            "(select coalesce(sum(a.seconds), 0) from attempts a where a.job = j.id "
            "and a.status != 'ok') as failed_seconds "
            "from jobs j where j.channel = ? and j.finished >= ? and j.finished < ? "
            "and j.report is not null order by j.finished", [channel, start, end])]

    def idle_by_worker(self, first_day: str, last_day: str) -> list[dict]:
        """Idle seconds per worker and day from `first_day` to `last_day` (UTC
        dates, inclusive), with the GPU names the worker registered."""
        return [dict(r, gpus=json.loads(r["gpus"] or "[]")) for r in self.db.query(
            "select i.worker, i.day, i.seconds, json_extract(w.info, '$.gpus') as gpus "
            "from worker_idle i left join workers w on w.name = i.worker "
            "where i.day between ? and ? order by i.worker, i.day", [first_day, last_day])]

    def worker_usage(self, worker: str) -> dict:
        """Seconds idle and busy (leased jobs' wall time) on the days idle was
        measured: the worker's measured idle share."""
        rows = self.idle(worker)
        if not rows:
            return {"idle": 0.0, "busy": 0.0, "days": 0}
        days = [r["day"] for r in rows]
        idle = sum(r["seconds"] for r in rows)
        busy = self.db.execute(
            "select coalesce(sum(finished - started), 0) from jobs where worker = ? and "
            "finished is not null and date(started, 'unixepoch') between ? and ?",
            [worker, min(days), max(days)]).fetchone()[0]
        return {"idle": idle, "busy": float(busy), "days": len(days)}


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


def _job(row: dict) -> dict:
    row = dict(row)
    row["spec"] = json.loads(row["spec"])
    row["report"] = json.loads(row["report"]) if row.get("report") else None
    row["progress"] = json.loads(row["progress"]) if row.get("progress") else None
    row["trial"] = f"T{row['id']}"
    return row
