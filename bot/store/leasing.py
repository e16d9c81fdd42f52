"""Leasing: which needs classes have queued jobs, the fair next job among
the classes a worker can run, and expired leases put back in the queue.

Every job carries its needs class (`jobs.needs`, a `needs` row: what decides
where it may run, bot/trials/workers.py needs()). The queue asks which
classes wait, decides once per class whether this worker can run it, and
asks here for the next job among those. Each step is a walk of the index
jobs (status, needs, user, id): its cost grows with the classes and users
waiting, not with the jobs queued, so no number of trials that this worker
cannot run hides one that it can.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from bot.states import JobStatus, Outcome
from bot.store.base import Row
from bot.store.jobs import JOB_COLUMNS, Jobs, _job

QUEUED, RUNNING = JobStatus.QUEUED, JobStatus.RUNNING

# The classes with queued jobs: a loose index scan, one seek per class.
_CLASSES = f"""
with recursive c(n) as (
  select (select needs from jobs where status = '{QUEUED}' and needs is not null
          order by needs limit 1)
  union all
  select (select needs from jobs where status = '{QUEUED}' and needs > c.n
          order by needs limit 1) from c where c.n is not null)
select needs.id, needs.key from c join needs on needs.id = c.n"""

# The fair next job among the classes in the JSON list ?: for each user with
# a job of those classes queued, their oldest (one seek per class and user);
# then the user whose last lease is oldest, never leased first; then the
# oldest job. The last lease comes from the (user, started) index.
_NEXT = f"""
with recursive
wanted(n) as (select value from json_each(?)),
pairs(n, u) as (
  select n, (select user from jobs where status = '{QUEUED}' and needs is wanted.n
             order by user limit 1) from wanted
  union all
  select n, (select user from jobs where status = '{QUEUED}' and needs is pairs.n
             and user > pairs.u order by user limit 1) from pairs where u is not null),
heads(u, id) as (
  select u, min((select id from jobs where status = '{QUEUED}' and needs is pairs.n
                 and user = pairs.u order by id limit 1))
  from pairs where u is not null group by u)
select id, (select started from jobs where user = heads.u and started is not null
            order by started desc limit 1) as served
from heads order by served is not null, served, id limit 1"""


@dataclass(frozen=True)
class NeedsClass:
    """A needs class that has queued jobs."""
    id: int
    key: str  # bot/trials/workers.py needs() as canonical JSON


class Leasing(Jobs):
    def queued_needs(self) -> list[NeedsClass]:
        """Each needs class that has queued jobs."""
        return [NeedsClass(*r) for r in self.db.execute(_CLASSES).fetchall()]

    def unclassified(self, limit: int = 1000) -> list[tuple[int, Row]]:
        """Queued jobs without a needs class (from before classes, or put in by
        SQL): (id, spec). Unordered: `order by id` would walk every queued job."""
        return [(i, json.loads(spec)) for i, spec in self.db.execute(
            f"select id, spec from jobs where status = '{QUEUED}' and needs is null limit ?",
            [limit]).fetchall()]

    def classify(self, keys: dict[int, str]) -> None:
        """Give jobs their needs class: {job id: needs key}."""
        with self.tx():
            ids = self._needs_ids(list(keys.values()))
            self.db.conn.executemany(
                "update jobs set needs = ? where id = ? and needs is null",
                [(ids[key], job) for job, key in keys.items()])

    def lease_next(self, worker: str, seconds: float, needs: list[int] | None = None,
                   key: str | None = None) -> Row | None:
        """Lease `worker` the fair next queued job (_NEXT) of the `needs`
        classes (None: of any class, unclassified ones too). The conditional
        UPDATE makes racing workers safe: only one takes a job; the others
        pick again."""
        wanted: list[int | None] = (
            [*(c.id for c in self.queued_needs()), None] if needs is None else list(needs))
        while wanted and (row := self.db.execute(_NEXT, [json.dumps(wanted)]).fetchone()):
            if self._take(row[0], worker, seconds, key):
                return self.job(row[0])
        return None

    def _take(self, job_id: int, worker: str, seconds: float, key: str | None) -> bool:
        """Lease a queued job to `worker`; False when another worker took it first."""
        now, lease = time.time(), uuid.uuid4().hex
        with self.tx():
            cur = self.db.execute(
                f"update jobs set status = '{RUNNING}', worker = ?, lease = ?, "
                "lease_expires = ?, attempts = attempts + 1, started = ? "
                f"where id = ? and status = '{QUEUED}'",
                [worker, lease, now + seconds, now, job_id])
            if cur.rowcount != 1:
                return False
            self.db.execute("update workers set job = ?, last_seen = ? where name = ?",
                            [job_id, now, worker])
            self._leased_under(worker, key, lease, job=job_id)
        return True

    def lapsed_jobs(self, max_leases: int) -> list[Row]:
        """Running jobs whose lease expired with leases left (fewer than
        `max_leases`) and no cancel asked: they go back to the queue."""
        return [_job(r) for r in self.db.table("jobs").rows_where(
            f"status = '{RUNNING}' and lease_expires < ? and attempts < ? and cancel is null",
            [time.time(), max_leases], order_by="id", select=JOB_COLUMNS)]

    def requeue_lapsed(self, job: Row, card: Row | None) -> bool:
        """Queue again a job whose worker went silent, recording the lost lease
        as a `killed` attempt; only while that lease still holds it and is
        still expired. `card` is the card's edit (None: it has no card)."""
        now = time.time()
        with self.tx():
            cur = self.db.execute(
                f"update jobs set status = '{QUEUED}', worker = null, lease = null, "
                "lease_expires = null, started = null where id = ? and lease = ? "
                f"and status = '{RUNNING}' and lease_expires < ? and cancel is null",
                [job["id"], job["lease"], now])
            if cur.rowcount != 1:
                return False
            self._add_attempt(job["id"], job["worker"], {
                "status": Outcome.FAILED, "error_class": "killed", "expired": True,
                "message": f"lease expired: {job['worker']} sent no heartbeat "
                           "(worker died, or lost its network); re-queued",
                "seconds": now - (job["started"] or now)})
            self.db.execute("update workers set job = null where name = ? and job = ?",
                            [job["worker"], job["id"]])
            if card:
                self._add_message(card, job["id"])
        return True
