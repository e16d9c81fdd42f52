"""Delivery of stored messages, oldest first, to a transport (Slack or the
console). A message is marked sent only once the transport accepted it, so a
Slack outage or a restart delays messages and loses none."""
from __future__ import annotations

import json
import logging
import os
import threading
import time

from bot import chart
from bot.store import Store

log = logging.getLogger("trialbot.outbox")


FILE_TRIES = 3  # a file (chart) is given up after this many failed tries
# chat.update is Tier 3 (about 50 a minute); progress edits wait their turn
# rather than spend the app's budget (and coalesce meanwhile: see Store._add_message).
UPDATE_INTERVAL = 1.2


class Undeliverable(Exception):
    """Slack refused the message itself (e.g. channel_not_found): retrying
    cannot help, so it is set aside with the reason instead of blocking the queue."""


# Errors about this one message. Anything else (invalid_auth, internal_error,
# ratelimited, ...) is about the app or Slack and is retried: the message waits.
PER_MESSAGE_ERRORS = {"channel_not_found", "is_archived", "msg_too_long", "no_text",
                      "too_many_attachments", "invalid_blocks", "invalid_blocks_format",
                      "invalid_thread_ts", "cannot_reply_to_message", "restricted_action",
                      "message_limit_exceeded", "message_not_found", "cant_update_message",
                      "edit_window_closed"}


class SlackTransport:
    """chat.postMessage through slack_sdk's WebClient (which honours 429
    Retry-After through its RateLimitErrorRetryHandler)."""

    def __init__(self, client):
        from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
        client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=3))
        self.client = client

    def send(self, payload: dict) -> str:
        from slack_sdk.errors import SlackApiError
        try:
            if payload.get("update"):  # replace an earlier message's text in place
                self.client.chat_update(channel=payload["channel"], ts=payload["ts"],
                                        text=payload["text"], blocks=payload.get("blocks"))
                return payload["ts"]
            if "content" in payload:  # a file into the thread
                resp = self.client.files_upload_v2(
                    channel=payload["channel"], thread_ts=payload.get("thread_ts"),
                    content=payload["content"], filename=payload["file"],
                    title=payload["text"], initial_comment=payload["text"])
                return resp["files"][0]["id"] if resp.get("files") else "file"
            resp = self.client.chat_postMessage(**payload)
        except SlackApiError as exc:
            error = exc.response.get("error", "")
            if error in ("invalid_blocks", "invalid_blocks_format") and payload.get("blocks"):
                # The text alone still says everything; send that rather than nothing.
                return self.send({k: v for k, v in payload.items() if k != "blocks"})
            if exc.response.status_code == 200 and error in PER_MESSAGE_ERRORS:
                raise Undeliverable(error) from exc
            raise
        return resp["ts"]


class ConsoleTransport:
    """The terminal as the channel: prints each message; `--json` prints the
    exact payload that would go to Slack, one object per line."""
    update_interval = 0.0  # a terminal has no rate limit

    def __init__(self, out, as_json: bool, files_dir: str = "."):
        self.out, self.as_json, self.count = out, as_json, 0
        self.files_dir = files_dir
        self.lock = threading.Lock()

    def send(self, payload: dict) -> str:
        with self.lock:
            self.count += 1
            if "content" in payload:  # files land next to the database
                os.makedirs(self.files_dir, exist_ok=True)
                path = os.path.join(self.files_dir, payload.pop("file"))
                content = payload.pop("content")
                with open(path, "wb") as f:
                    f.write(content.encode() if isinstance(content, str) else content)
                payload["file"] = path
                if not self.as_json:
                    payload = dict(payload, text=f"{payload['text']}: {path}")
            if self.as_json:
                print(json.dumps(payload), file=self.out, flush=True)
            elif payload.get("update"):
                print(f"[#{payload['channel']}] (updated {payload['ts']})\n{payload['text']}",
                      file=self.out, flush=True)
                return payload["ts"]
            else:
                indent = "    " if payload.get("thread_ts") else ""
                body = "\n".join(indent + line for line in payload["text"].splitlines())
                print(f"[#{payload['channel']}]\n{body}", file=self.out, flush=True)
            return f"console.{self.count}"


def payload(row: dict, store: Store) -> dict:
    p = {"channel": row["channel"], "text": row["text"]}
    if row.get("update_of"):
        return dict(p, update=True, ts=row["thread_ts"], blocks=row["blocks"])
    if row.get("file"):
        content = row.get("content")
        if content is None:  # a trial's chart, drawn from its stored report
            content = chart.png(store.report_with_timeline(row["job"]))
        p.update(file=row["file"], content=content)
    else:
        p["blocks"] = row["blocks"]
    if row.get("thread_ts"):
        p["thread_ts"] = row["thread_ts"]
    return p


class Outbox(threading.Thread):
    def __init__(self, store: Store, transport, max_backoff: float = 60,
                 update_interval: float | None = None):
        super().__init__(daemon=True, name="outbox")
        self.update_interval = UPDATE_INTERVAL if update_interval is None else update_interval
        self.store, self.transport = store, transport
        self.wake_event = threading.Event()
        self.stopping = threading.Event()
        self.max_backoff = max_backoff
        self.last_update = 0.0

    def wake(self) -> None:
        self.wake_event.set()

    def stop(self) -> None:
        self.stopping.set()
        self.wake_event.set()

    def run(self) -> None:
        backoff = 1.0
        while not self.stopping.is_set():
            self.wake_event.clear()
            try:
                self.flush()
                backoff = 1.0
                self.wake_event.wait(5)  # also re-check now and then: nothing is left behind
            except Exception as exc:  # noqa: BLE001 - Slack down: wait and try again
                log.warning("outbox: delivery failed (%s); retrying in %.0f s", exc, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def flush(self) -> int:
        """Send every unsent message in order; stop at the first failure so
        order holds (a report never arrives before its "started" parent)."""
        sent: dict[int, str] = {}  # id -> ts, for replies to parents sent in this batch
        gave_up: set[int] = set()
        while rows := self.store.unsent():
            for row in rows:
                ref = row["thread_of"] or row["update_of"]  # the message it needs sent first
                row["thread_ts"] = row["thread_ts"] or sent.get(ref)
                orphan = row["parent_given_up"] or ref in gave_up
                if ref and not row["thread_ts"] and not orphan:
                    raise RuntimeError(f"message {row['id']}: message {ref} is unsent")
                if row["update_of"] and orphan:  # nothing left to update
                    self.store.give_up_message(row["id"], "the message to update was given up")
                    gave_up.add(row["id"])
                    continue
                if row["update_of"]:
                    time.sleep(max(0.0, self.last_update + self.update_interval - time.monotonic()))
                    self.last_update = time.monotonic()
                try:
                    ts = self.transport.send(payload(row, self.store))
                except Exception as exc:
                    # A file is an extra: after a few failures (a chart that cannot be
                    # drawn, an install without files:write) it must not hold up reports.
                    given_up = isinstance(exc, Undeliverable) or (
                        row.get("file") and row["tries"] + 1 >= FILE_TRIES)
                    if not given_up:
                        self.store.mark_failed_try(row["id"], repr(exc))
                        raise
                    log.error("outbox: message %s given up: %r", row["id"], exc)
                    self.store.give_up_message(row["id"], repr(exc))
                    gave_up.add(row["id"])
                    continue
                if self.store.mark_sent(row["id"], ts, row["version"]):
                    sent[row["id"]] = ts
        return len(sent)
