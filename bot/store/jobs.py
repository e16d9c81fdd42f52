"""Jobs (a trial request and its lease) and their attempts (every try, the
worker's own retries and leases that expired)."""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from bot.states import JobStatus, Outcome
from bot.store.base import Posted, Row, inserted
from bot.store.outbox import Outbox
from bot.store.workers import Workers

HELD, QUEUED, RUNNING = JobStatus.HELD, JobStatus.QUEUED, JobStatus.RUNNING
CANCELLED = JobStatus.CANCELLED

# Every jobs column but the timeline, which only the chart reads.
JOB_COLUMNS = ("id, workload, spec, words, user, channel, status, worker, lease, lease_expires, "
               "attempts, created, started, finished, report, error_class, started_msg, sweep, "
               "plan, block, "
               "ladder, budget, group_kind, progress, cancel, cancelled_by, response_url, redirect")


class Jobs(Outbox, Workers):
    """On the outbox and the workers: a job's end stores its messages and frees
    its worker in one transaction."""

    def add_job(self, spec: Row, words: str, user: str, channel: str) -> Row:
        return self.add_jobs([spec], [words], user, channel)[0]

    def add_jobs(self, specs: list[Row], words: list[str], user: str, channel: str,
                 sweep: bool = False, tags: Row | None = None, group: str | None = None,
                 budget: float | None = None,
                 request: str | list[tuple[str | None, float | None]] | None = None,
                 response_url: str | None = None, needs: list[str] | None = None,
                 held: bool = False) -> list[Row]:
        """Queue several jobs in one transaction; with `sweep`, all of them carry
        the first one's id as their sweep id; `tags` ({plan, block}) make them a
        plan's actuals. A `request` key already used raises DuplicateRequest and
        queues nothing; `request` is Slack's trigger_id, or a list of (key,
        seconds it holds or None for a day). `response_url` (the command's)
        reaches the requester if the channel refuses the trial's messages.
        `needs` is each spec's needs key (bot/store/leasing.py); without it, the
        next lease classifies the jobs. `held`: stored as held, which no worker
        leases, until Slack says the bot may post in the channel (release_held,
        end_held)."""
        ids: list[int] = []
        tags = tags or {}
        keys: list[tuple[str, float | None]] = [(request, None)] if isinstance(request, str) else [
            (key, within) for key, within in request or [] if key is not None]
        with self.tx():
            for key, within in keys:
                self._claim(key, within)
            if response_url:
                self._add_response_url(response_url)
            classes = self._needs_ids(needs) if needs else {}
            needs_keys: list[str | None] = list(needs) if needs else [None] * len(specs)
            for spec, w, need in zip(specs, words, needs_keys):
                cur = self.db.execute(
                    "insert into jobs (workload, spec, words, user, channel, status, created, "
                    "plan, block, response_url, needs) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [spec["workload"], json.dumps(spec), w, user, channel,
                     HELD if held else QUEUED, time.time(), tags.get("plan"),
                     tags.get("block"), response_url, classes.get(need) if need else None])
                ids.append(inserted(cur))
            column = "sweep" if sweep else "ladder" if group else None
            if column:  # the group's id is its first job's
                self.db.execute(f"update jobs set {column} = ?, budget = ?, group_kind = ? "
                                f"where id in ({','.join('?' * len(ids))})",
                                [ids[0], budget, group, *ids])
            for key, _ in keys:
                self.db.execute("update requests set jobs = ? where key = ?",
                                [json.dumps(ids), key])
        return self._jobs_by_id(ids)

    def _needs_ids(self, keys: list[str]) -> dict[str, int]:
        """Inside a transaction: the id of each needs class (leasing.py), added when new."""
        out: dict[str, int] = {}
        for key in dict.fromkeys(keys):
            self.db.execute("insert into needs (key) values (?) on conflict(key) do nothing",
                            [key])
            out[key] = self.db.execute("select id from needs where key = ?",
                                       [key]).fetchone()[0]
        return out

    def sweep_jobs(self, sweep: int) -> list[Row]:
        return [_job(r) for r in self.db.table("jobs").rows_where(
            "sweep = ?", [sweep], order_by="id", select=JOB_COLUMNS)]

    def ladder_jobs(self, ladder: int) -> list[Row]:
        return [_job(r) for r in self.db.table("jobs").rows_where(
            "ladder = ?", [ladder], order_by="id", select=JOB_COLUMNS)]

    def job(self, job_id: int) -> Row | None:
        # One statement: sqlite-utils' rows_where asks for the table and view names first.
        rows = self.rows(f"select {JOB_COLUMNS} from jobs where id = ?", [job_id])
        return _job(rows[0]) if rows else None

    def _jobs_by_id(self, ids: list[int]) -> list[Row]:
        return [_job(r) for r in self.rows(
            f"select {JOB_COLUMNS} from jobs where id in ({','.join('?' * len(ids))}) "
            "order by id", ids)]

    def report_with_timeline(self, job_id: int) -> Row:
        """The full report, memory timeline included (for the chart)."""
        row = self.db.execute("select report, timeline from jobs where id = ?",
                              [job_id]).fetchone()
        report: Row = stored_json(row[0])
        report["timeline"] = stored_json(row[1]) if row[1] else None
        return report

    def jobs(self, limit: int = 10, channel: str | None = None, user: str | None = None,
             status: tuple[str, ...] = ()) -> list[Row]:
        """Newest first; `user` and `status` narrow it (`/trial list mine|running|failed`)."""
        clauses, args = [], []
        for column, value in (("channel", channel), ("user", user)):
            if value:
                clauses.append(f"{column} = ?")
                args.append(value)
        if status:
            clauses.append(f"status in ({','.join('?' * len(status))})")
            args += list(status)
        return [_job(r) for r in self.db.table("jobs").rows_where(
            " and ".join(clauses) or None, args or None, order_by="id desc", limit=limit,
            select=JOB_COLUMNS)]

    def worker_trials(self, worker: str, workload: str, limit: int) -> list[Row]:
        """A worker's latest finished trials of one workload, newest first: its
        box's own history (bot/plans/perrun.history)."""
        return [_job(r) for r in self.rows(
            f"select {JOB_COLUMNS} from jobs where worker = ? and workload = ? and status = ? "
            "order by id desc limit ?", [worker, workload, JobStatus.DONE, limit])]

    def expired_jobs(self, max_leases: int) -> list[Row]:
        """Running jobs whose lease expired after their last allowed lease, or
        that were cancelled before their worker went silent (never re-leased;
        the others are queued again: bot/store/leasing.py)."""
        rows = self.db.table("jobs").rows_where(
            f"status = '{RUNNING}' and lease_expires < ? and (attempts >= ? or cancel is not null)",
            [time.time(), max_leases], order_by="id", select=JOB_COLUMNS)
        return [_job(r) for r in rows]

    def fail_expired(self, job: Row, report: Posted, messages: list[Row]) -> bool:
        """End a job whose last lease expired; only if it is still that lease."""
        lost = {"status": Outcome.FAILED, "error_class": report["error"]["class"], "expired": True,
                "message": report["error"]["message"],
                "seconds": time.time() - (job["started"] or time.time())}
        return self._finish(job["id"], job["worker"], job["lease"], report, messages, [lost],
                            expired=True)

    def release_lease(self, job_id: int, worker: str, lease: str,
                      card: Row | None = None, key: str | None = None) -> bool:
        """Back to the queue, as if never leased, a lease whose answer never reached
        its worker (the connection was gone), or that a stopping worker handed
        back: it cost no attempt. Only while that lease still holds the job and
        nobody cancelled it (a cancelled trial ends instead: it must not wait in
        the queue with its cancel asked); `card` is the card's edit, None while
        the job has no card; the worker's request `key` is kept with it (a retry
        finds it answered)."""
        with self.tx():
            cur = self.db.execute(
                f"update jobs set status = '{QUEUED}', worker = null, lease = null, "
                "lease_expires = null, started = null, attempts = attempts - 1 "
                f"where id = ? and worker = ? and lease = ? and status = '{RUNNING}' "
                "and cancel is null", [job_id, worker, lease])
            if cur.rowcount == 1:
                self.db.execute("update workers set job = null where name = ? and job = ?",
                                [worker, job_id])
                if card:
                    self._add_message(card, job_id)
                if key is not None:
                    self._worker_key(worker, key, "release", lease, job=job_id)
        return cur.rowcount == 1

    def extend_lease(self, job_id: int, worker: str, lease: str, seconds: float) -> bool:
        with self.tx():
            cur = self.db.execute(
                "update jobs set lease_expires = ? where id = ? and worker = ? and lease = ? "
                f"and status = '{RUNNING}'", [time.time() + seconds, job_id, worker, lease])
            if cur.rowcount == 1:  # a refused heartbeat changes nothing, not even last_seen
                self.db.execute("update workers set last_seen = ? where name = ?",
                                [time.time(), worker])
        return cur.rowcount == 1

    def finish_job(self, job_id: int, worker: str, lease: str, report: Posted,
                   messages: list[Row], key: str | None = None) -> bool:
        """Store the report and its outbox messages in one transaction, only if
        `lease` still holds the job: a late worker cannot overwrite a newer attempt.
        The worker's request `key` is kept with it (a retry finds it answered)."""
        tries = report.get("attempts") or [{
            "status": report["status"], "error_class": (report.get("error") or {}).get("class"),
            "message": (report.get("error") or {}).get("message"),
            "seconds": report.get("seconds")}]
        return self._finish(job_id, worker, lease, report, messages, tries, key=key)

    def _finish(self, job_id: int, worker: str, lease: str, report: Posted, messages: list[Row],
                tries: list[Row], expired: bool = False, key: str | None = None) -> bool:
        error = (report.get("error") or {}).get("class")
        status = (JobStatus.DONE if report["status"] == Outcome.OK else
                  CANCELLED if error == "cancelled" else JobStatus.FAILED)
        now = time.time()
        light = {k: v for k, v in report.items() if k != "timeline"}
        # No NaN or Infinity is ever written: SQLite's json_extract refuses the row
        timeline = (json.dumps(report["timeline"], allow_nan=False) if report.get("timeline")
                    else None)
        with self.tx():
            cur = self.db.execute(
                "update jobs set status = ?, report = ?, timeline = ?, error_class = ?, "
                "finished = ?, lease = null, lease_expires = null where id = ? and worker = ? "
                f"and lease = ? and status = '{RUNNING}'"
                + (" and lease_expires < ?" if expired else ""),
                [status, json.dumps(light, allow_nan=False), timeline, error, now, job_id,
                 worker, lease]
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

    def _add_attempt(self, job_id: int, worker: str, a: Row) -> None:
        n = self.db.execute("select count(*) from attempts where job = ?", [job_id]).fetchone()[0]
        self.db.execute(
            "insert into attempts (job, n, worker, status, error_class, message, seconds, "
            "changed, next, recorded, expired) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [job_id, n + 1, worker, a["status"], a.get("error_class"),
             (a.get("message") or "")[-500:], a.get("seconds"), json.dumps(a.get("changed") or {}),
             a.get("next"), time.time(), int(bool(a.get("expired")))])

    def attempts(self, job_id: int) -> list[Row]:
        return list(self.db.table("attempts").rows_where("job = ?", [job_id], order_by="n"))

    def attempts_of(self, job_ids: list[int]) -> dict[int, list[Row]]:
        """Several jobs' attempts in one query (a plan's trials)."""
        out: dict[int, list[Row]] = {i: [] for i in job_ids}
        for chunk in range(0, len(job_ids), 500):
            ids = job_ids[chunk:chunk + 500]
            for row in self.db.query(f"select * from attempts where job in "
                                     f"({','.join('?' * len(ids))}) order by job, n", ids):
                out[row["job"]].append(row)
        return out

    def set_started_message(self, job_id: int, message: Row) -> int:
        """The trial's card; on a re-lease, an edit of the card it already has."""
        with self.tx():
            card: int | None = self.db.execute("select started_msg from jobs where id = ?",
                                   [job_id]).fetchone()[0]
            if card:
                self._add_message(dict(message, update_of=card), job_id)
                return card
            msg_id = self._add_message(message, job_id)
            self.db.execute("update jobs set started_msg = ? where id = ?", [msg_id, job_id])
        return msg_id

    def set_progress(self, job_id: int, lease: str, progress: Row,
                     messages: list[Row]) -> bool:
        """Store the worker's progress and queue its messages (the card's edit, a
        failed try in the thread), while `lease` still holds the job."""
        with self.tx():
            cur = self.db.execute("update jobs set progress = ? where id = ? and lease = ? "
                                  f"and status = '{RUNNING}'",
                                  [json.dumps(progress), job_id, lease])
            if cur.rowcount != 1:
                return False
            cancelled = self.db.execute("select cancel from jobs where id = ?",
                                        [job_id]).fetchone()[0]
            for message in messages:
                if cancelled and message.get("update_of"):
                    continue  # a cancel landed since the card was drawn: its card stays
                self._add_message(message, job_id)
        return True

    def cancel_queued(self, job_id: int, user: str, report: Posted, messages: list[Row]) -> bool:
        """Cancel a job no worker has leased yet (queued or held); False if one has."""
        with self.tx():
            cur = self.db.execute(
                f"update jobs set status = '{CANCELLED}', cancel = ?, cancelled_by = ?, "
                f"finished = ?, report = ?, error_class = 'cancelled' where id = ? and "
                f"status in ('{QUEUED}', '{HELD}')",
                [time.time(), user, time.time(), json.dumps(report), job_id])
            if cur.rowcount != 1:
                return False
            for message in messages:
                self._add_message(message, job_id)
        return True

    def held_channels(self) -> list[str]:
        """Channels with held jobs (waiting for Slack to say the bot may post there)."""
        return [r[0] for r in self.db.execute("select distinct channel from jobs "
                                              f"where status = '{HELD}'")]

    def held_jobs(self, channel: str) -> list[Row]:
        return [_job(r) for r in self.rows(f"select {JOB_COLUMNS} from jobs where "
                                           f"channel = ? and status = '{HELD}' order by id",
                                           [channel])]

    def release_held(self, channel: str) -> int:
        """The channel's held jobs join the queue (as of when they were asked for)."""
        with self.tx():
            return self.db.execute(f"update jobs set status = '{QUEUED}' where channel = ? and "
                                   f"status = '{HELD}'", [channel]).rowcount

    def end_held(self, reports: Mapping[int, Posted], messages: list[Row]) -> int:
        """End held jobs unrun (the bot may not post in their channel) with their
        reports, and store `messages` (the requesters' notes) in the same
        transaction, unless none was still held. How many were ended."""
        now, ended = time.time(), 0
        with self.tx():
            for job_id, report in reports.items():
                ended += self.db.execute(
                    f"update jobs set status = '{CANCELLED}', finished = ?, report = ?, "
                    f"error_class = 'cancelled' where id = ? and status = '{HELD}'",
                    [now, json.dumps(report), job_id]).rowcount
            if ended:
                for message in messages:
                    self._add_message(message, None)
        return ended

    def request_cancel(self, job_id: int, user: str, card: Row | None) -> bool:
        """Mark a running job to be cancelled (the next heartbeat tells its worker);
        `card` is the card's edit, None while the job has no card yet."""
        with self.tx():
            cur = self.db.execute("update jobs set cancel = ?, cancelled_by = ? where id = ? "
                                  f"and status = '{RUNNING}' and cancel is null",
                                  [time.time(), user, job_id])
            if cur.rowcount != 1:
                return False
            if card:
                self._add_message(card, job_id)
        return True

    def tag_job(self, job_id: int, plan: str, block: str) -> None:
        with self.tx():
            self.db.execute("update jobs set plan = ?, block = ? where id = ?",
                            [plan, block, job_id])

    def plan_jobs(self, plan: str) -> list[Row]:
        """Jobs tagged with the plan: the experiment's actual runs."""
        return [_job(r) for r in self.db.table("jobs").rows_where(
            "plan = ?", [plan], order_by="id", select=JOB_COLUMNS)]

    def job_counts(self) -> dict[str, int]:
        """How many jobs are in each state (/metrics)."""
        return dict(self.db.execute("select status, count(*) from jobs "
                                    "group by status").fetchall())

    def oldest_queued(self) -> float | None:
        """When the longest-waiting queued job was queued (a Unix time)."""
        oldest: float | None = self.db.execute("select min(created) from jobs where "
                                               f"status = '{QUEUED}'").fetchone()[0]
        return oldest

    def queue_waits(self, bounds: tuple[float, ...]) -> tuple[list[int], float, int]:
        """Seconds from queued to leased (started - created) of every job leased
        once at least: the count at or under each bound, their sum and count. A
        job leased again after its lease expired counts its latest lease."""
        cols = ", ".join(f"coalesce(sum(started - created <= {float(b)!r}), 0)"
                         for b in bounds)
        row = self.db.execute(f"select {cols}, coalesce(sum(started - created), 0), count(*) "
                              "from jobs where started is not null").fetchone()
        return list(row[:len(bounds)]), float(row[-2]), row[-1]

    def lease_expiries(self) -> int:
        """Leases that expired without a heartbeat: those taken over by another
        lease and those that were a job's last (it ended failed or cancelled)."""
        n: int = self.db.execute("select count(*) from attempts where expired = 1").fetchone()[0]
        return n


def _job(row: Row) -> Row:
    row = dict(row)
    row["spec"] = json.loads(row["spec"])
    row["report"] = stored_json(row["report"]) if row.get("report") else None
    row["progress"] = json.loads(row["progress"]) if row.get("progress") else None
    row["trial"] = f"T{row['id']}"
    return row


def stored_json(text: str) -> Any:
    """A stored report as Python: a NaN or Infinity that a row from before the
    worker API refused them holds reads as null (not measured)."""
    return json.loads(text, parse_constant=lambda _: None)
