"""Compatibility checks (`/plan NAME check`, #34): stored, leased to a worker
that fetches the repository at its commit and reads it without running it,
and answered. The lease works as a Slurm accounting request's (slurm.py): a
worker that dies lets it expire, and it is leased again, at most
`max_leases` times."""
from __future__ import annotations

import json
import time
from collections.abc import Callable

from bot.states import CheckStatus
from bot.store.base import Row, inserted
from bot.store.outbox import Outbox
from bot.store.plans import Plans
from bot.store.workers import Workers

QUEUED, RUNNING = CheckStatus.QUEUED, CheckStatus.RUNNING


class Checks(Plans, Outbox, Workers):
    def add_check(self, row: Row, request: str | None = None) -> Row:
        """Queue a check; a `request` key seen before (Slack retried) raises
        DuplicateRequest with the id it queued, and queues nothing."""
        with self.tx():
            self._claim(request)
            cur = self.db.execute(
                "insert into compat_checks (plan, repo, commit_asked, user, channel, created) "
                "values (?, ?, ?, ?, ?, ?)",
                [row["plan"], row["repo"], row.get("commit"), row["user"], row["channel"],
                 time.time()])
            if request is not None:
                self.db.execute("update requests set jobs = ? where key = ?",
                                [json.dumps([cur.lastrowid]), request])
        added = self.check(inserted(cur))
        assert added is not None  # added in the transaction above
        return added

    def check(self, check_id: int) -> Row | None:
        rows = list(self.db.table("compat_checks").rows_where("id = ?", [check_id]))
        if not rows:
            return None
        row = rows[0]
        return dict(row, result=json.loads(row["result"]) if row["result"] else None,
                    filled=json.loads(row["filled"]) if row["filled"] else {})

    def latest_check(self, plan: str) -> Row | None:
        """The plan's newest check that read a report."""
        found = self.db.execute(
            f"select id from compat_checks where plan = ? and status = '{CheckStatus.DONE}' "
            "order by id desc limit 1", [plan]).fetchone()
        return self.check(found[0]) if found else None

    def checks_open(self) -> int:
        """Checks not answered yet: queued, or leased to a worker."""
        return int(self.db.execute(
            f"select count(*) from compat_checks where status in ('{QUEUED}', '{RUNNING}')"
        ).fetchone()[0])

    def lease_check(self, worker: str, seconds: float, max_leases: int,
                    key: str | None = None) -> Row | None:
        """The oldest queued check, or one whose lease expired fewer than
        `max_leases` times, leased to `worker`."""
        found = self._lease_request("compat_checks", worker, seconds, max_leases, key)
        return self.check(found) if found is not None else None

    def give_back_check(self, check_id: int, worker: str, lease: str) -> bool:
        """A check whose lease never reached its worker, queued again (False: it is
        not leased to `worker` under `lease`)."""
        return self._give_back_request("compat_checks", check_id, worker, lease)

    def expired_checks(self, max_leases: int) -> list[Row]:
        """Checks whose last allowed lease expired: their workers went silent."""
        return [c for i in self._expired_requests("compat_checks", max_leases)
                if (c := self.check(i))]

    def finish_check(self, held: Row, status: CheckStatus, result: Row, fills: Row,
                     say: Callable[[Row], Row], expired: bool = False,
                     key: str | None = None) -> Row | None:
        """End a check held by `held`'s worker and lease: its result, the
        checklist items it fills (only those still empty when it commits: a
        person's value is never overwritten), the channel's message (`say`
        makes it from the items filled) and the worker's request `key`, in one
        transaction. The items filled, or None when the lease is no longer
        theirs (or, with `expired`, has not expired)."""
        now = time.time()
        with self.tx():
            cur = self.db.execute(
                "update compat_checks set status = ?, result = ?, finished = ?, "
                "commit_read = ?, lease = null, lease_expires = null where id = ? and "
                f"worker = ? and lease = ? and status = '{RUNNING}'"
                + (" and lease_expires < ?" if expired else ""),
                [status, json.dumps(result), now, result.get("commit"), held["id"],
                 held["worker"], held["lease"]] + ([now] if expired else []))
            if cur.rowcount != 1:
                return None
            filled = self._fill(held, fills)
            message = say(filled)
            self.db.execute("update compat_checks set filled = ?, message = ? where id = ?",
                            [json.dumps(filled), message["text"], held["id"]])
            self._add_message(message, None)
            if key is not None:
                self._worker_key(held["worker"], key, "check", held["lease"],
                                 request=held["id"])
        return filled

    def _fill(self, held: Row, fills: Row) -> Row:
        """Inside finish_check's transaction: set the facts still empty."""
        found = self.db.execute("select facts from plans where name = ?",
                                [held["plan"]]).fetchone()
        if found is None or not fills:
            return {}
        facts = json.loads(found[0] or "{}")
        filled = {k: v for k, v in fills.items() if facts.get(k) in (None, "")}
        for k, v in filled.items():
            self._history(held["plan"], f"fact {k}", "set", None, v, held["user"])
        if filled:
            self.db.execute("update plans set facts = ? where name = ?",
                            [json.dumps({**facts, **filled}), held["plan"]])
        return filled
