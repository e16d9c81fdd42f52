"""Workers: their registration, idle seconds per day, request keys (a
lease or report sent again is applied once) and API tokens (hashed)."""
from __future__ import annotations

import json
import time
import uuid

from bot.store.base import Base, Row


class Workers(Base):
    def upsert_worker(self, name: str, info: Row) -> None:
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

    # A plan's request to a worker (a Slurm accounting request, a compatibility
    # check) is a row of its own table with the same lease columns: status
    # queued|running, worker, lease, lease_expires, attempts.
    def _lease_request(self, table: str, worker: str, seconds: float, max_leases: int,
                       key: str | None) -> int | None:
        """The id of `table`'s oldest queued row, or one whose lease expired fewer
        than `max_leases` times, now leased; the conditional UPDATE lets one
        racing worker win."""
        now = time.time()
        for (row_id,) in self.db.execute(
                f"select id from {table} where status = 'queued' or (status = 'running' "
                "and lease_expires < ? and attempts < ?) order by id limit 20",
                [now, max_leases]).fetchall():
            lease = uuid.uuid4().hex
            with self.tx():
                cur = self.db.execute(
                    f"update {table} set status = 'running', worker = ?, lease = ?, "
                    "lease_expires = ?, attempts = attempts + 1 where id = ? and "
                    "(status = 'queued' or (status = 'running' and lease_expires < ?))",
                    [worker, lease, now + seconds, row_id, now])
                if cur.rowcount != 1:
                    continue
                self.db.execute("update workers set last_seen = ? where name = ?", [now, worker])
                self._leased_under(worker, key, lease, request=row_id)
            return int(row_id)
        return None

    def _give_back_request(self, table: str, row_id: int, worker: str, lease: str) -> bool:
        """A lease its worker never received (the answer could not be written, or
        the worker stopped): queued again at once, the try not counted."""
        with self.tx():
            cur = self.db.execute(
                f"update {table} set status = 'queued', worker = null, lease = null, "
                "lease_expires = null, attempts = max(0, attempts - 1) where id = ? and "
                "worker = ? and lease = ? and status = 'running'", [row_id, worker, lease])
        return cur.rowcount == 1

    def _expired_requests(self, table: str, max_leases: int) -> list[int]:
        """Ids of `table`'s rows whose last allowed lease expired: their workers went silent."""
        return [int(r[0]) for r in self.db.execute(
            f"select id from {table} where status = 'running' and lease_expires < ? and "
            "attempts >= ? order by id", [time.time(), max_leases]).fetchall()]

    def worker_request(self, worker: str, key: str) -> Row | None:
        """What the request with this key did, if it was seen."""
        rows = list(self.db.table("worker_requests").rows_where("worker = ? and key = ?",
                                                          [worker, key]))
        return rows[0] if rows else None

    def idle(self, worker: str | None = None) -> list[Row]:
        where, args = ("worker = ?", [worker]) if worker else (None, None)
        return list(self.db.table("worker_idle").rows_where(where, args, order_by="worker, day"))

    def worker_states(self, since_day: str) -> list[Row]:
        """Each worker with its current job's start, its last job's end, and its
        idle seconds on days from `since_day` (YYYY-MM-DD) on: `/trial workers`."""
        rows = self.db.query(
            "select w.name, w.info, w.registered, w.last_seen, w.job, "
            "(select started from jobs where id = w.job) as job_started, "
            "(select max(finished) from jobs where worker = w.name) as last_finished, "
            "(select coalesce(sum(seconds), 0) from worker_idle where worker = w.name "
            "and day >= ?) as idle_seconds from workers w order by w.name", [since_day])
        return [dict(r, info=json.loads(r["info"] or "{}")) for r in rows]

    def workers(self, seen_within: float | None = None) -> list[Row]:
        where, args = (("where last_seen >= ?", [time.time() - seen_within])
                       if seen_within is not None else ("", []))
        return [dict(w, info=json.loads(w["info"] or "{}"))
                for w in self.rows(f"select * from workers {where} order by name", args)]

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

    def worker_tokens(self) -> list[Row]:
        """Every token's name, created and revoked: never its hash."""
        return [dict(r) for r in self.db.query(
            "select name, created, revoked from worker_tokens order by name")]

    def active_token_hashes(self) -> list[tuple[str, str]]:
        """(name, hash) of every active token, read on each request so a revoke
        from `trialbot worker-token revoke` (another process) counts at once."""
        return [tuple(r) for r in self.db.execute(
            "select name, hash from worker_tokens where revoked is null").fetchall()]

    def idle_by_worker(self, first_day: str, last_day: str) -> list[Row]:
        """Idle seconds per worker and day from `first_day` to `last_day` (UTC
        dates, inclusive), with the GPU names the worker registered."""
        return [dict(r, gpus=json.loads(r["gpus"] or "[]")) for r in self.db.query(
            "select i.worker, i.day, i.seconds, "
            "iif(json_valid(w.info), json_extract(w.info, '$.gpus'), null) as gpus "
            "from worker_idle i left join workers w on w.name = i.worker "
            "where i.day between ? and ? order by i.worker, i.day", [first_day, last_day])]

    def worker_usage(self, worker: str) -> Row:
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
