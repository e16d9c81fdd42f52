"""Plans, their blocks, confirmed prices and recorded actuals."""
from __future__ import annotations

import json
import time


class Plans:
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

    def add_actual(self, actual: dict, request: str | None = None,
                   replace: bool = False) -> int:
        """Record a manual actual; a Slack retry of the same command (same
        `request` key) raises DuplicateRequest and records nothing. `replace`
        (a correction) deletes the block's earlier recorded actuals in the same
        transaction; returns how many it deleted."""
        with self.tx():
            self._claim(request)
            gone = self._delete_actuals(actual["plan"], actual["block"]) if replace else 0
            self.db["actuals"].insert(dict(actual, parts=json.dumps(actual.get("parts") or {}),
                                           recorded=time.time()))
        return gone

    def delete_actuals(self, plan: str, block: str) -> int:
        """Delete the block's recorded actuals (by hand or from Slurm); how many."""
        with self.tx():
            return self._delete_actuals(plan, block)

    def _delete_actuals(self, plan: str, block: str) -> int:
        ids = [r[0] for r in self.db.execute(
            "select id from actuals where plan = ? and block = ?", [plan, block]).fetchall()]
        if ids:
            marks = ", ".join("?" * len(ids))
            # The Slurm request stays (its answer was posted); it no longer records an actual.
            self.db.execute(f"update slurm_actuals set actual = null where actual in ({marks})",
                            ids)
            self.db.execute(f"delete from actuals where id in ({marks})", ids)
        return len(ids)

    def actuals(self, plan: str) -> list[dict]:
        """The plan's recorded actuals; `slurm` lists the job ids of one read from
        Slurm accounting (None for hours given by hand)."""
        return [dict(a, parts=json.loads(a["parts"] or "{}"),
                     slurm=json.loads(a["slurm"]) if a["slurm"] else None)
                for a in self.db.query(
                    "select a.*, s.jobs as slurm from actuals a left join slurm_actuals s "
                    "on s.actual = a.id where a.plan = ? order by a.id", [plan])]
