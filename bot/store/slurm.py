"""Slurm accounting requests for plan actuals: stored, leased to a Slurm
worker that runs sacct (the bot is not on the cluster), and answered."""
from __future__ import annotations

import json
import time

from bot.states import ActualStatus
from bot.store.base import Row, inserted
from bot.store.outbox import Outbox
from bot.store.plans import Plans
from bot.store.workers import Workers

QUEUED, RUNNING = ActualStatus.QUEUED, ActualStatus.RUNNING


class SlurmActuals(Plans, Outbox, Workers):
    def add_slurm_actual(self, row: Row, request: str | None = None) -> Row:
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
        added = self.slurm_actual(inserted(cur))
        assert added is not None  # added in the transaction above
        return added

    def slurm_actual(self, req_id: int) -> Row | None:
        rows = list(self.db.table("slurm_actuals").rows_where("id = ?", [req_id]))
        if not rows:
            return None
        row = rows[0]
        return dict(row, jobs=json.loads(row["jobs"]),
                    result=json.loads(row["result"]) if row["result"] else None)

    def lease_slurm_actual(self, worker: str, seconds: float, max_leases: int,
                           key: str | None = None) -> Row | None:
        """The oldest queued request, or one whose lease expired fewer than
        `max_leases` times, leased to `worker`."""
        found = self._lease_request("slurm_actuals", worker, seconds, max_leases, key)
        return self.slurm_actual(found) if found is not None else None

    def expired_slurm_actuals(self, max_leases: int) -> list[Row]:
        """Requests whose last allowed lease expired: their workers went silent."""
        return [req for i in self._expired_requests("slurm_actuals", max_leases)
                if (req := self.slurm_actual(i))]

    def finish_slurm_actual(self, req: Row, status: ActualStatus, result: Row, text: str,
                            actual: Row | None, messages: list[Row],
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
                f"and status = '{RUNNING}'" + (" and lease_expires < ?" if expired else ""),
                [status, json.dumps(result), text, now, req["id"], req["worker"], req["lease"]]
                + ([now] if expired else []))
            if cur.rowcount != 1:
                return False
            if actual is not None:
                actual_id = self.db.table("actuals").insert(dict(
                    actual, parts=json.dumps(actual.get("parts") or {}), recorded=now)).last_pk
                self.db.execute("update slurm_actuals set actual = ? where id = ?",
                                [actual_id, req["id"]])
                self._history(actual["plan"], f"actual {actual['block']} #{actual_id}", "add",
                              None, {"hours": actual.get("hours"), "slurm": req["jobs"]},
                              req["user"])
            for message in messages:
                self._add_message(message, None)
            if key is not None:
                self._worker_key(req["worker"], key, "result", req["lease"], request=req["id"])
        return True
