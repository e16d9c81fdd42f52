"""Delivery of stored messages to a transport (Slack or the console), in
order within each channel. A message is marked sent only once the transport
accepted it, so a Slack outage or a restart delays messages and loses none;
one that Slack refuses for good goes to its requester instead
(bot/delivery/refusals.py says which refusals those are and what the requester reads)."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bot.delivery import refusals
from bot.delivery.refusals import Undeliverable
from bot.ports import DeliveryStore, Transport
from bot.trials import chart, workerlist
from worker import i18n

log = logging.getLogger("trialbot.outbox")


FILE_TRIES = 3  # a file (chart) is given up after this many failed tries
# chat.update is Tier 3 (about 50 a minute); progress edits wait their turn
# rather than spend the app's budget (and coalesce meanwhile: see Store._add_message).
UPDATE_INTERVAL = 1.2


def payload(row: dict, store: DeliveryStore) -> dict:
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


def _progress(row: dict) -> bool:
    """A card's edit while the trial runs: worth nothing once it is stale."""
    return bool(row["update_of"]) and row["kind"] != "summary"


ALERT_MINUTES = 5  # TRIALBOT_OUTBOX_ALERT_MINUTES: a message unsent longer is an error
ALERT_CHECK = 30.0  # seconds between looks for stuck messages, at most: the next one due
# to pass the limit is looked at when it does


def error_class(exc: Exception) -> str:
    """A failed send's class for /metrics: Slack's error code, ratelimited,
    http_NNN (Slack answered with an HTTP error), network, or the exception's type."""
    if isinstance(exc, Undeliverable):
        return exc.error or "unknown"
    response: Any = getattr(exc, "response", None)  # a SlackResponse, or anything
    status = getattr(response, "status_code", None)
    if status == 200 and callable(getattr(response, "get", None)) and response.get("error"):
        return response.get("error")  # a SlackApiError: Slack's own code (ok: false)
    if status == 429:
        return "ratelimited"
    if isinstance(status, int):
        return f"http_{status}"
    if isinstance(exc, OSError):  # refused, reset, DNS, timeouts (URLError is one)
        return "network"
    return type(exc).__name__


SENT, GONE, AGAIN, WAIT = "sent", "gone", "again", "wait"  # what became of one message
TOKEN_NOTICE = "token-notice"  # the outbox kind of a requester's note: our token is refused
LANES = 8  # channels delivered at once: a slow one holds only its own thread
# A channel that refused a trial's message is tried again for the trial's later
# messages after this long (someone may have invited the bot); meanwhile they go
# to the requester at once.
REDIRECT_RETRY = 60.0


class Courier(threading.Thread):
    """Carries the store's outbox (bot/store/outbox.py) to the transport, per
    channel: each channel's messages go out in order, and a channel that Slack
    refuses, throttles or answers slowly holds up only its own messages. A
    dispatcher hands each channel with unsent messages to one of LANES threads;
    a channel whose message must be retried backs off alone (1 s doubling to
    `max_backoff`)."""

    def __init__(self, store: DeliveryStore, transport: Transport, max_backoff: float = 60,
                 update_interval: float | None = None, on_refused=lambda channel: None,
                 alert_minutes: float = ALERT_MINUTES):
        super().__init__(daemon=True, name="outbox")
        self.update_interval = UPDATE_INTERVAL if update_interval is None else update_interval
        self.store, self.transport = store, transport
        self.wake_event = threading.Event()
        self.stopping = threading.Event()
        self.max_backoff = max_backoff
        self.on_refused = on_refused  # a channel refused us: its cached "can post" is stale
        self.lock = threading.Lock()  # guards busy and blocked
        self.busy: set[str] = set()  # channels a thread is delivering now
        self.blocked: dict[str, tuple[float, float]] = {}  # channel -> (retry at, backoff)
        self.update_lock = threading.Lock()
        self.next_update = 0.0
        self.pool: ThreadPoolExecutor | None = None  # made by run()
        self.errors: dict[str, int] = {}  # failed sends by error_class, since start
        self.alert_seconds = alert_minutes * 60
        self.alerted: set[int] = set()  # stuck messages already logged
        self.next_alert_check = 0.0  # time.time() of the next look for stuck messages
        self.token_refused: str | None = None  # Slack's code while it refuses our token
        self.refused_at: dict[str, float] = {}  # channel -> when it last refused a trial

    def wake(self) -> None:
        self.wake_event.set()

    def stop(self) -> None:
        """Start no more sends; each lane's send in flight completes and is
        marked sent (run() waits for the lanes), so none goes twice after a restart."""
        self.stopping.set()
        self.wake_event.set()

    def run(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=LANES, thread_name_prefix="outbox-lane")
        try:
            while not self.stopping.is_set():
                self.wake_event.clear()
                try:
                    self.dispatch()
                except Exception as exc:  # noqa: BLE001 - e.g. the database is busy: next time
                    log.warning("outbox: dispatch failed (%s)", exc)
                if time.time() >= self.next_alert_check:
                    # at most a quarter of the limit: a message stored after this look is
                    # seen at the next, which then waits for it exactly
                    self.next_alert_check = time.time() + min(ALERT_CHECK,
                                                              self.alert_seconds / 4)
                    try:
                        self.check_stuck()
                    except Exception as exc:  # noqa: BLE001 - the database is busy: next time
                        log.warning("outbox: the stuck-message check failed (%s)", exc)
                # Also re-check now and then: nothing is left behind.
                self.wake_event.wait(self._next_check())
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _next_check(self) -> float:
        """Until the next backoff ends (one already over waits for its lane's
        thread, which wakes the dispatcher when it is done), at most 5 s."""
        now = time.monotonic()
        with self.lock:
            due = [at - now for at, _ in self.blocked.values() if at > now]
        return max(0.05, min([5.0, self.next_alert_check - time.time(), *due]))

    def dispatch(self) -> None:
        now = time.monotonic()
        for channel in self.store.unsent_channels():
            if self._take(channel, now):
                assert self.pool is not None  # dispatch runs inside run()
                self.pool.submit(self._lane, channel)

    def _take(self, channel: str, now: float | None) -> bool:
        """Claim the channel for one thread; with `now`, only once its backoff passed."""
        with self.lock:
            if channel in self.busy or (now is not None
                                        and self.blocked.get(channel, (0.0,))[0] > now):
                return False
            self.busy.add(channel)
            return True

    def _lane(self, channel: str) -> None:
        try:
            self.deliver(channel)
        except Exception as exc:  # noqa: BLE001 - the database, a bug: this channel waits
            log.warning("outbox: delivery to %s failed (%s)", channel, exc)
            self._back_off(channel)
        finally:
            with self.lock:
                self.busy.discard(channel)
            self.wake()  # its newer messages, or another channel waiting for a thread

    def flush(self) -> int:
        """Deliver every channel now, one after the other in this thread, backoffs
        ignored (tests, benchmarks); the number of messages sent."""
        count = 0
        for channel in self.store.unsent_channels():
            if self._take(channel, None):
                try:
                    count += self.deliver(channel)
                finally:
                    with self.lock:
                        self.busy.discard(channel)
        return count

    def deliver(self, channel: str) -> int:
        """Send the channel's unsent messages in order; stop at the first that
        must wait, so order holds (a report never arrives before its card)."""
        sent: dict[int, str] = {}  # id -> ts, for replies to parents sent in this batch
        gave_up: set[int] = set()
        count = 0
        while not self.stopping.is_set() and (rows := self.store.unsent(channel=channel)):
            for row in rows:
                if self.stopping.is_set():  # the call in flight completed; start no more
                    return count
                outcome = self._one(row, sent, gave_up)
                if outcome == WAIT:
                    return count
                count += outcome == SENT
                if outcome == AGAIN:  # re-read: it goes another way now
                    break
        with self.lock:
            self.blocked.pop(channel, None)
        return count

    def _one(self, row: dict, sent: dict, gave_up: set) -> str:
        ref = row["thread_of"] or row["update_of"]  # the message it needs sent first
        row["thread_ts"] = row["thread_ts"] or sent.get(ref)
        orphan = row["parent_given_up"] or ref in gave_up
        elsewhere = row["parent_via"] == "redirect"  # its parent went to the requester
        if row["via"] in ("redirect", "requester") \
                or (not row["via"] and (row["redirect"] or elsewhere)
                    and not self._try_channel_again(row)):
            return self._redirected(row, gave_up)
        if elsewhere:  # the channel is tried again: a new message, not in a thread there
            row["thread_ts"], ref = None, None
        if ref and not row["thread_ts"] and not orphan:
            log.warning("outbox: message %s waits for message %s", row["id"], ref)
            self._back_off(row["channel"])
            return WAIT
        if row["update_of"] and orphan:  # nothing left to update
            return self._give_up(row, "the message to update was given up", gave_up,
                                 quiet=True)
        if row["update_of"] and not self._throttle_update():
            return WAIT  # stopping: it goes after the restart
        try:
            out = payload(row, self.store)
            if row["via"]:  # an ephemeral note to the requester
                out.update(via=row["via"], user=row["requester"])
            ts = self.transport.send(out)
        except Undeliverable as exc:
            self._count(exc)
            return self._refused(row, exc.error, gave_up)
        except Exception as exc:  # noqa: BLE001 - Slack down, a network error, a bad chart
            self._count(exc)
            return self._wait(row, repr(exc), gave_up)
        if self.token_refused:
            log.info("outbox: Slack accepts the bot's token again; the waiting messages go out")
            self.token_refused = None
        # the bot was let back into the channel: the trial's later messages go there
        back = row["job"] if row["redirect"] and not row["via"] else None
        if self.store.mark_sent(row["id"], ts, row["version"], via=row["via"], unredirect=back):
            sent[row["id"]] = ts
            with self.lock:
                self.blocked.pop(row["channel"], None)
            return SENT
        return AGAIN  # its text changed while it was sent: the newest goes out too

    def _wait(self, row: dict, error: str, gave_up: set) -> str:
        """The message waits and its channel backs off. A file is an extra: after
        a few failures (a chart that cannot be drawn, an install without
        files:write) it is set aside rather than hold up the channel for ever."""
        if row.get("file") and row["tries"] + 1 >= FILE_TRIES:
            return self._give_up(row, error, gave_up)
        log.warning("outbox: message %s to %s failed (%s); it waits", row["id"],
                    row["channel"], error)
        self.store.mark_failed_try(row["id"], error)
        self._back_off(row["channel"])
        return WAIT

    def _refused(self, row: dict, error: str, gave_up: set) -> str:
        scope = refusals.classify(error, row["tries"])
        if error in workerlist.AUTH_ERRORS:
            self._token_refused(row, error)
        if scope == "retry":
            return self._wait(row, error, gave_up)
        if scope == "channel" and row["requester"]:
            if not row["via"]:
                self.on_refused(row["channel"])
                with self.lock:
                    self.refused_at[row["channel"]] = time.monotonic()
            log.warning("outbox: %s refused message %s (%s): to its requester instead",
                        row["channel"], row["id"], error)
            self.store.redirect(row["id"], row["job"] if not row["via"] else None, error)
            return AGAIN
        notice = None
        if row["requester"] and not row["via"] and not _progress(row):
            trial = f"T{row['job']}" if row["job"] else None
            with self._language(row["channel"]):
                text = refusals.notice(error, row["channel"], trial, row["kind"])
            notice = {"channel": row["channel"], "kind": "notice", "via": "ephemeral",
                      "user": row["requester"], "response_url": row["url"], "text": text}
        return self._give_up(row, error, gave_up, notice)

    def _token_refused(self, row: dict, error: str) -> None:
        """Slack refuses the bot's token: no wait fixes that, so the log says it at
        once (the stuck-outbox alarm would come minutes later), and the trial's
        requester hears it through the command's response_url, which needs no token."""
        if self.token_refused != error:
            self.token_refused = error
            log.error("outbox: Slack refuses the bot's token (%s): nothing can be posted until "
                      "SLACK_BOT_TOKEN is replaced and the bot restarted; the messages wait in "
                      "the outbox, none is lost. %s.", error, workerlist.stuck_hint(error))
        if not (row["job"] and row["requester"] and row["url"]) or row["via"] \
                or self.store.told(row["url"], TOKEN_NOTICE) \
                or not self.store.response_url_usable(row["url"]):
            return
        with self._language(row["channel"]):
            text = refusals.token_notice(error, row["channel"], f"T{row['job']}")
        note = {"channel": row["channel"], "kind": TOKEN_NOTICE, "via": "response_url",
                "url": row["url"], "user": row["requester"], "text": text}
        try:
            ts = self.transport.send(note)
        except Exception as exc:  # noqa: BLE001 - told at the next refused message instead
            self._count(exc)
            log.warning("outbox: could not tell %s that the token is refused (%s)",
                        row["requester"], exc)
            return
        self.store.add_sent_notice(dict(note, response_url=row["url"]), row["job"], ts)

    def _try_channel_again(self, row: dict) -> bool:
        """A later message of a trial whose channel refused it goes to the channel
        again once the refusal is REDIRECT_RETRY old (the bot may have been invited
        since); an edit of a message sent to the requester stays with the requester."""
        if row["update_of"] and row["parent_via"] == "redirect":
            return False
        with self.lock:
            at = self.refused_at.get(row["channel"])
        return at is None or time.monotonic() - at >= REDIRECT_RETRY

    def _redirected(self, row: dict, gave_up: set) -> str:
        """To the requester, since the channel refused (or, via "requester", a note
        meant for them alone): the command's response_url while it lasts, else a
        direct message. A card's progress is not sent on."""
        if _progress(row):
            return self._give_up(row, "not sent on: the channel refused this trial's card",
                                 gave_up, quiet=True)
        if not row["requester"]:
            return self._give_up(row, "the channel refused it and nobody asked for it",
                                 gave_up)
        error = row["redirect"] or row["last_error"] or "refused"
        if row["via"] == "requester":  # written for the requester: sent as it is
            text, blocks = row["text"], row["blocks"]
        else:
            with self._language(row["channel"]):
                text, blocks = refusals.redirected(row["text"], row["blocks"], error,
                                                   row["channel"],
                                                   f"T{row['job']}" if row["job"] else None)
        url = row["url"]
        path = ("response_url" if url and not row["file"] and self.store.response_url_usable(url)
                else "dm")
        try:
            out = dict(payload(dict(row, update_of=None, thread_ts=None), self.store),
                       via=path, user=row["requester"], text=text)
            if path == "response_url":
                out["url"] = url
            if "content" not in out:
                out["blocks"] = blocks
            ts = self.transport.send(out)
        except Undeliverable as exc:
            self._count(exc)
            if path == "response_url":  # spent or expired: a direct message next
                self.store.spend_response_url(url)
                return AGAIN
            if refusals.classify(exc.error, row["tries"]) == "retry":  # Slack's own trouble
                return self._wait(row, exc.error, gave_up)
            log.error("outbox: message %s reached neither %s nor its requester (%s)",
                      row["id"], row["channel"], exc.error)
            return self._give_up(row, f"{error}; the requester could not be reached either "
                                      f"({exc.error})", gave_up)
        except Exception as exc:  # noqa: BLE001 - Slack down, a chart that cannot be drawn
            self._count(exc)
            return self._wait(row, repr(exc), gave_up)
        self.store.mark_sent(row["id"], ts, row["version"], via=path,
                             url=url if path == "response_url" else None)
        return SENT

    def _language(self, channel: str):
        """A note about a message speaks the language of the channel it was for."""
        return i18n.using(self.store.channel_lang(channel))

    def _give_up(self, row: dict, error: str, gave_up: set, notice: dict | None = None,
                 quiet: bool = False) -> str:
        """Set the message aside; `quiet` for what is meant to go (a stale edit)."""
        (log.info if quiet else log.error)("outbox: message %s set aside: %s", row["id"], error)
        self.store.give_up_message(row["id"], error, notice, row["job"])
        gave_up.add(row["id"])
        return GONE

    def _back_off(self, channel: str) -> None:
        with self.lock:
            _, backoff = self.blocked.get(channel, (0.0, 0.5))
            backoff = min(backoff * 2, self.max_backoff)
            self.blocked[channel] = (time.monotonic() + backoff, backoff)

    def _throttle_update(self) -> bool:
        """chat.update calls spaced app-wide, whichever channel they edit; False
        when the outbox stops meanwhile."""
        with self.update_lock:
            now = time.monotonic()
            at = max(now, self.next_update)
            self.next_update = at + self.update_interval
        return not self.stopping.wait(at - now)

    def _count(self, exc: Exception) -> None:
        with self.lock:
            name = error_class(exc)
            self.errors[name] = self.errors.get(name, 0) + 1

    def slack_errors(self) -> dict[str, int]:
        with self.lock:
            return dict(self.errors)

    def check_stuck(self, now: float | None = None) -> list[dict]:
        """Log, once per message, messages unsent for longer than alert_seconds
        (an expired token, a Slack outage): one error line for those newly
        stuck, naming the oldest's channel and last error. Returns them all."""
        now = time.time() if now is None else now
        stuck = self.store.stuck_messages(now - self.alert_seconds)
        upcoming = self.store.oldest_unsent(since=now - self.alert_seconds)
        if upcoming is not None:  # look again when it passes the limit, not up to 30 s later
            self.next_alert_check = min(self.next_alert_check, upcoming + self.alert_seconds)
        new = [m for m in stuck if m["id"] not in self.alerted]
        self.alerted = {m["id"] for m in stuck}  # sent or set aside: forgotten
        if new:
            first = stuck[0]
            log.error("outbox: %d message(s) unsent for over %d min (%d new); the oldest, to "
                      "%s, waits %d min after %d tries, last error: %s. %s.", len(stuck),
                      self.alert_seconds // 60, len(new), first["channel"],
                      (now - first["created"]) // 60, first["tries"],
                      first["last_error"] or "none yet", workerlist.stuck_hint(first["last_error"]))
        return stuck
