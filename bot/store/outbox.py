"""The outbox: every message the bot will post, stored before it is sent,
with the paths to its requester when Slack refuses it; and the response_urls
it may use."""
from __future__ import annotations

import json
import time

from bot.store.base import Base, Row, inserted

RESPONSE_URL_SECONDS, RESPONSE_URL_USES = 30 * 60, 5  # what Slack allows a response_url


class Outbox(Base):
    def _add_message(self, message: Row, job_id: int | None) -> int:
        if message.get("update_of"):  # one pending update per message: the newest text wins
            cur = self.db.execute(
                "update outbox set text = ?, blocks = ?, kind = ?, version = version + 1 "
                "where update_of = ? and sent is null and given_up is null",
                [message["text"], json.dumps(message.get("blocks") or []), message.get("kind"),
                 message["update_of"]])
            if cur.rowcount:
                pending: int = self.db.execute(
                    "select id from outbox where update_of = ? and sent is null and given_up "
                    "is null", [message["update_of"]]).fetchone()[0]
                return pending
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
        return inserted(cur)

    def _add_response_url(self, url: str) -> None:
        # Slack takes up to 5 posts to a response_url within 30 minutes of the command.
        self.db.execute("insert into response_urls (url, expires) values (?, ?) "
                        "on conflict(url) do nothing", [url, time.time() + RESPONSE_URL_SECONDS])

    def add_messages(self, messages: list[Row]) -> None:
        """Messages that belong to no job (a plan's export), in one transaction."""
        with self.tx():
            for message in messages:
                self._add_message(message, None)

    def unsent(self, limit: int = 20, channel: str | None = None) -> list[Row]:
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
                  url: str | None = None, unredirect: int | None = None) -> bool:
        """False when the row's text changed while it was being sent (a newer
        update): it stays unsent, so the newest text goes out too. `via`: the
        path that took it when not the channel; `url`, a response_url it used;
        `unredirect`, a job whose channel took it again: its later messages go
        there (in this transaction, so the sent message cannot go twice)."""
        with self.tx():
            cur = self.db.execute("update outbox set sent = ?, ts = ?, sent_via = ? where "
                                  "id = ? and version = ?", [time.time(), ts, via, msg_id, version])
            if url:
                self.db.execute("update response_urls set uses = uses + 1 where url = ?", [url])
            if unredirect is not None:
                self.db.execute("update jobs set redirect = null where id = ?", [unredirect])
        return cur.rowcount == 1

    def message(self, msg_id: int) -> Row | None:
        rows = list(self.db.table("outbox").rows_where("id = ?", [msg_id]))
        return rows[0] if rows else None

    def mark_failed_try(self, msg_id: int, error: str) -> None:
        with self.tx():
            self.db.execute("update outbox set tries = tries + 1, last_error = ? where id = ?",
                            [error[-500:], msg_id])

    def give_up_message(self, msg_id: int, error: str, notice: Row | None = None,
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
        n: int = self.db.execute("select count(*) from outbox where job = ? and sent is null "
                                 "and given_up is null", [job_id]).fetchone()[0]
        return n

    def outbox_backlog(self) -> Row:
        """Unsent messages: how many, and the oldest one's created time, channel,
        tries and last error (None when nothing waits): /metrics, /trial workers."""
        count = self.db.execute("select count(*) from outbox where sent is null and "
                                "given_up is null").fetchone()[0]
        row = self.db.execute("select id, channel, created, tries, last_error from outbox "
                              "where sent is null and given_up is null order by id "
                              "limit 1").fetchone()
        oldest = dict(zip(("id", "channel", "created", "tries", "last_error"), row)) if row \
            else None
        return {"count": count, "oldest": oldest}

    def oldest_unsent(self, since: float) -> float | None:
        """When the oldest unsent message stored at or after `since` was stored."""
        oldest: float | None = self.db.execute(
            "select min(created) from outbox where sent is null and given_up is null and "
            "created >= ?", [since]).fetchone()[0]
        return oldest

    def told(self, url: str, kind: str) -> bool:
        """Whether a note of `kind` went to this response_url (a command's, once)."""
        return self.db.execute("select 1 from outbox where response_url = ? and kind = ? and "
                               "sent is not null limit 1", [url, kind]).fetchone() is not None

    def add_sent_notice(self, message: Row, job_id: int | None, ts: str) -> None:
        """A note sent at once, around the queue (it must not wait behind the
        messages it is about): kept as sent, with its response_url's use counted."""
        with self.tx():
            msg_id = self._add_message(message, job_id)
            self.db.execute("update outbox set sent = ?, ts = ?, sent_via = ? where id = ?",
                            [time.time(), ts, message["via"], msg_id])
            self.db.execute("update response_urls set uses = uses + 1 where url = ?",
                            [message["response_url"]])

    def stuck_messages(self, before: float, errors: frozenset[str] = frozenset()
                       ) -> list[Row]:
        """Unsent messages stored before `before` (a Unix time), or whose last
        error is one of `errors` (no wait helps those), oldest first."""
        codes = sorted(errors)
        return [dict(r) for r in self.db.query(
            "select id, channel, created, tries, last_error from outbox where sent is null "
            f"and given_up is null and (created < ? or last_error in ({','.join('?' * len(codes))}"
            ")) order by id", [before, *codes])]
