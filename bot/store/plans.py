"""Plans, their blocks, confirmed prices and recorded actuals. Every change
writes its `plan_history` row in the same transaction: who, when, what, and
the old and new value."""
from __future__ import annotations

import json
import time

from bot.store.base import Base, Row

BLOCK_FIELDS = ("runs", "configs", "gpus", "trials", "sweep", "predict", "handoff", "note")


class Plans(Base):
    def _history(self, plan: str | None, what: str, action: str, old: object, new: object,
                 user: str | None,
                 item: str | None = None) -> None:
        """Inside a transaction: one change, its values as JSON (None: nothing)."""
        self.db.execute(
            "insert into plan_history (plan, item, what, action, old, new, user, at) "
            "values (?, ?, ?, ?, ?, ?, ?, ?)",
            [plan, item, what, action, None if old is None else json.dumps(old),
             None if new is None else json.dumps(new), user, time.time()])

    def history(self, plan: str, items: tuple[str, ...] = (), limit: int = 20
                ) -> tuple[list[Row], int]:
        """The plan's changes and those of the prices of `items` (GPU names,
        any case), newest first: (at most `limit` rows, how many in all)."""
        marks = ", ".join("?" * len(items))
        where = "plan = ?" + (f" or (plan is null and lower(item) in ({marks}))" if items else "")
        args = [plan, *(i.lower() for i in items)]
        n = self.db.execute(f"select count(*) from plan_history where {where}", args).fetchone()[0]
        rows = self.db.query(f"select * from plan_history where {where} order by id desc "
                             "limit ?", [*args, limit])
        return [dict(r, old=json.loads(r["old"]) if r["old"] else None,
                     new=json.loads(r["new"]) if r["new"] else None) for r in rows], n

    def add_plan(self, name: str, channel: str, user: str, facts: Row) -> bool:
        """False when a plan of that name exists already."""
        with self.tx():
            cur = self.db.execute(
                "insert into plans (name, channel, user, created, facts) values (?, ?, ?, ?, ?) "
                "on conflict(name) do nothing", [name, channel, user, time.time(),
                                                 json.dumps(facts)])
            if cur.rowcount == 1:
                self._history(name, "plan", "new", None, facts, user)
        return cur.rowcount == 1

    def plan(self, name: str) -> Row | None:
        rows = list(self.db.table("plans").rows_where("name = ?", [name]))
        if not rows:
            return None
        row = rows[0]
        return dict(row, facts=json.loads(row["facts"] or "{}"),
                    locked=json.loads(row["locked"]) if row["locked"] else None)

    def plans(self, channel: str | None = None) -> list[Row]:
        """Every plan, or `channel`'s."""
        where, args = ("channel = ?", [channel]) if channel else (None, None)
        return [p for r in self.db.table("plans").rows_where(
            where, args, select="name", order_by="created") if (p := self.plan(r["name"]))]

    def change_facts(self, name: str, changes: Row, user: str) -> Row:
        """Set facts (a value) or unset them (None); the old value of each key
        changed (None: it was not set). Unchanged keys write no history."""
        with self.tx():
            facts = json.loads(self.db.execute("select facts from plans where name = ?",
                                               [name]).fetchone()[0] or "{}")
            old = {k: facts.get(k) for k in changes}
            for key, value in changes.items():
                if value is None:
                    facts.pop(key, None)
                else:
                    facts[key] = value
                if old[key] != value:
                    self._history(name, f"fact {key}", "unset" if value is None else "set",
                                  old[key], value, user)
            self.db.execute("update plans set facts = ? where name = ?",
                            [json.dumps(facts), name])
        return old

    def set_plan_lock(self, name: str, locked: Row | None, user: str | None = None) -> None:
        with self.tx():
            old = self.db.execute("select locked from plans where name = ?", [name]).fetchone()
            self.db.execute("update plans set locked = ? where name = ?",
                            [json.dumps(locked) if locked else None, name])
            self._history(name, "plan", "lock" if locked else "unlock",
                          json.loads(old[0]) if old and old[0] else None, locked, user)

    def put_block(self, block: Row, action: str | None = None) -> bool:
        """Add or replace the plan's block of that kind; True when it replaced one.
        `action` names the change in the history (default: add or replace)."""
        row = dict(block, trials=json.dumps(block.get("trials") or []),
                   predict=json.dumps(block.get("predict") or {}))
        with self.tx():
            old = self.block(block["plan"], block["kind"])
            # A replaced block keeps its place: with rental=single the first one pays prep.
            row["created"] = old["created"] if old else time.time()
            self.db.table("blocks").upsert(row, pk=("plan", "kind"))
            self._history(block["plan"], f"block {block['kind']}",
                          action or ("replace" if old else "add"), _block_fields(old),
                          _block_fields(block), block.get("user"))
        return old is not None

    def block(self, plan: str, kind: str) -> Row | None:
        return next((b for b in self.blocks(plan) if b["kind"] == kind), None)

    def delete_block(self, plan: str, kind: str, user: str) -> Row | None:
        """Delete the block (its recorded actuals and tagged trials stay, and
        count again if a block of that kind is added); the block, or None."""
        with self.tx():
            old = self.block(plan, kind)
            if old:
                self.db.execute("delete from blocks where plan = ? and kind = ?", [plan, kind])
                self._history(plan, f"block {kind}", "delete", _block_fields(old), None, user)
        return old

    def blocks(self, plan: str) -> list[Row]:
        return [dict(b, trials=json.loads(b["trials"] or "[]"),
                     predict=json.loads(b["predict"] or "{}"))
                for b in self.db.table("blocks").rows_where("plan = ?", [plan], order_by="created")]

    def add_price(self, price: Row) -> int:
        """Record a confirmed price; its id (P7)."""
        with self.tx():
            pid = self.db.table("prices").insert(dict(price, recorded=time.time())).last_pk
            self._history(None, f"price P{pid}", "add", None, _price_fields(price),
                          price.get("user"), item=price["item"])
        assert isinstance(pid, int)  # sqlite-utils types last_pk loosely: a rowid here
        return pid

    def price(self, pid: int) -> Row | None:
        rows = list(self.db.table("prices").rows_where("id = ?", [pid]))
        return rows[0] if rows else None

    def correct_price(self, pid: int, fields: Row, user: str) -> Row | None:
        """Change a recorded price's figure, source or date; the old row, or None."""
        with self.tx():
            old = self.price(pid)
            if old:
                self.db.table("prices").update(pid, fields)
                self._history(None, f"price P{pid}", "correct", _price_fields(old),
                              _price_fields({**old, **fields}), user, item=old["item"])
        return old

    def delete_price(self, pid: int, user: str) -> Row | None:
        with self.tx():
            old = self.price(pid)
            if old:
                self.db.execute("delete from prices where id = ?", [pid])
                self._history(None, f"price P{pid}", "delete", _price_fields(old), None, user,
                              item=old["item"])
        return old

    # The figure that applies: the latest confirmation date, then the latest entered.
    _LATEST = ("(select q.id from prices q where lower(q.item) = lower(p.item) and "
               "q.kind = p.kind order by q.date desc, q.id desc limit 1)")

    def prices(self) -> list[Row]:
        """The figure that applies for each (item, kind): the one confirmed
        latest (an older quote entered later does not replace it)."""
        return list(self.db.query(f"select p.* from prices p where p.id = {self._LATEST} "
                                  "order by p.item, p.kind"))

    def all_prices(self) -> list[Row]:
        """Every recorded price, `applies` marking the ones prices() returns;
        per item and kind, the latest confirmed first."""
        return [dict(r, applies=bool(r["applies"])) for r in self.db.query(
            f"select p.*, p.id = {self._LATEST} as applies from prices p "
            "order by lower(p.item), p.kind, p.date desc, p.id desc")]

    def add_actual(self, actual: Row, request: str | None = None) -> int:
        """Record a manual actual; its number (never one handed out before). A
        Slack retry of the same command (same `request` key) raises
        DuplicateRequest and records nothing."""
        with self.tx():
            self._claim(request)
            aid = self.db.table("actuals").insert(dict(
                actual, parts=json.dumps(actual.get("parts") or {}),
                recorded=time.time())).last_pk
            self._history(actual["plan"], f"actual {actual['block']} #{aid}", "add", None,
                          _actual_fields(actual), actual["user"])
        assert isinstance(aid, int)  # sqlite-utils types last_pk loosely: a rowid here
        return aid

    def correct_actual(self, aid: int, fields: Row, user: str,
                       request: str | None = None) -> Row | None:
        """Change the given fields of recorded actual `aid` (hours, parts, runs,
        note), keeping its number and the rest; the old row, or None."""
        with self.tx():
            self._claim(request)
            old = next(iter(self._actuals("a.id = ?", [aid])), None)
            if old is None:
                return None
            new = {**old, **fields}
            self.db.table("actuals").update(aid, dict(fields, **(
                {"parts": json.dumps(fields["parts"])} if "parts" in fields else {})))
            self._history(old["plan"], f"actual {old['block']} #{aid}", "correct",
                          _actual_fields(old), _actual_fields(new), user)
        return old

    def delete_actuals(self, plan: str, block: str, user: str | None = None,
                       ids: list[int] | None = None) -> int:
        """Delete the block's recorded actuals (by hand or from Slurm), or only
        those of `ids`, each with its history row; how many."""
        with self.tx():
            rows = [a for a in self.actuals(plan) if a["block"] == block
                    and (ids is None or a["id"] in ids)]
            gone = [a["id"] for a in rows]
            for a in rows:
                self._history(plan, f"actual {block} #{a['id']}", "delete",
                              _actual_fields(a), None, user)
            if gone:
                marks = ", ".join("?" * len(gone))
                # The Slurm request stays (its answer was posted); it no longer records one.
                self.db.execute(f"update slurm_actuals set actual = null where actual in "
                                f"({marks})", gone)
                self.db.execute(f"delete from actuals where id in ({marks})", gone)
        return len(gone)

    def actuals(self, plan: str) -> list[Row]:
        """The plan's recorded actuals; `slurm` lists the job ids of one read from
        Slurm accounting (None for hours given by hand)."""
        return self._actuals("a.plan = ?", [plan])

    def _actuals(self, where: str, args: list[object]) -> list[Row]:
        return [dict(a, parts=json.loads(a["parts"] or "{}"),
                     slurm=json.loads(a["slurm"]) if a["slurm"] else None)
                for a in self.db.query(
                    "select a.*, s.jobs as slurm from actuals a left join slurm_actuals s "
                    f"on s.actual = a.id where {where} order by a.id", args)]


def _block_fields(block: Row | None) -> Row | None:
    return None if block is None else {k: block.get(k) for k in BLOCK_FIELDS}


def _price_fields(price: Row) -> Row:
    return {k: price.get(k) for k in ("item", "kind", "value", "unit", "currency", "source",
                                      "date")}


def _actual_fields(actual: Row) -> Row:
    """An actual's values as its history shows them, the parts beside the hours
    (its number is in the history row's `what`)."""
    out = {"hours": actual.get("hours"), **(actual.get("parts") or {}),
           "runs": actual.get("runs"), "note": actual.get("note")}
    if actual.get("slurm"):
        out["slurm"] = actual["slurm"]
    return {k: v for k, v in out.items() if v not in (None, {}, [])}
