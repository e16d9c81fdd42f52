"""The weekly digest: one schedule per channel, one row per channel and
week posted, and the week's trials as the digest adds them up."""
from __future__ import annotations

import json
import time

from bot.store.base import Row
from bot.store.jobs import stored_json
from bot.store.outbox import Outbox


class Digests(Outbox):
    def set_digest(self, schedule: Row) -> Row | None:
        """Schedule the channel's digest; the schedule it replaced, if any."""
        old = self.digest(schedule["channel"])
        with self.tx():
            self.db.table("digests").upsert(dict(schedule, created=time.time()), pk="channel")
        return old

    def digest(self, channel: str) -> Row | None:
        rows = list(self.db.table("digests").rows_where("channel = ?", [channel]))
        return rows[0] if rows else None

    def digests(self) -> list[Row]:
        return list(self.db.table("digests").rows_where(order_by="channel"))

    def delete_digest(self, channel: str) -> bool:
        with self.tx():
            cur = self.db.execute("delete from digests where channel = ?", [channel])
        return cur.rowcount == 1

    def digest_sent(self, channel: str, week: str) -> bool:
        return self.db.execute("select 1 from digests_sent where channel = ? and week = ?",
                               [channel, week]).fetchone() is not None

    def post_digest(self, channel: str, week: str | None, messages: list[Row]) -> bool:
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

    def digest_trials(self, channel: str, start: float, end: float) -> list[Row]:
        """The channel's trials that ended in [start, end), with the few report
        fields a digest adds up taken out in SQL (a report is large) and their
        attempts counted: all tries, and the seconds the failed ones cost. A
        report json_extract cannot read (a NaN stored before the worker API
        refused them) is read in Python instead, its non-finite figures null."""
        fields = ", ".join(f"json_extract(j.readable, '{path}') as {name}"
                           for name, path in DIGEST_FIELDS.items())
        rows = [dict(r) for r in self.db.query(
            f"select j.id, j.status, j.finished, j.worker, {fields}, "
            "iif(j.readable is null, j.report, null) as unreadable, "
            "(select count(*) from attempts a where a.job = j.id) as tries, "
            "(select count(*) from attempts a where a.job = j.id and a.status != 'ok') "
            "as failed_tries, "
            "(select coalesce(sum(a.seconds), 0) from attempts a where a.job = j.id "
            "and a.status != 'ok') as failed_seconds "
            "from (select *, iif(json_valid(report), report, null) as readable from jobs "
            "where channel = ? and finished >= ? and finished < ? and report is not null) j "
            "order by j.finished", [channel, start, end])]
        for r in rows:
            r.update(_read_safely(r.pop("unreadable")) if r["unreadable"] else
                     {"phases": json.loads(r["phases"] or "[]")})
        return rows


# What a digest reads of each report (bot/digest/build.py), by json_extract path.
DIGEST_FIELDS = {"report_status": "$.status", "seconds": "$.seconds", "phases": "$.phases",
                 "count": "$.latency.count", "gpu_count": "$.env.gpu_count",
                 "gpu_name": "$.env.gpu_name"}


def _read_safely(text: str) -> Row:
    """The digest's fields of a report SQLite cannot parse; a phase without
    finite seconds is left out (not measured)."""
    report = stored_json(text)
    out = {}
    for name, path in DIGEST_FIELDS.items():
        value = report
        for key in path[2:].split("."):
            value = value.get(key) if isinstance(value, dict) else None
        out[name] = value
    out["phases"] = [p for p in out["phases"] or [] if isinstance(p, dict)
                     and isinstance(p.get("seconds"), (int, float))]
    return out
