"""Can the bot post in this channel? Asked of Slack (conversations.info; scopes
channels:read, groups:read, im:read, mpim:read), never on a command's ack
path: a command reads only what is cached (`cached`), and a trial in a
channel not known yet is stored held; Slack is asked after the ack, once per
channel however many commands wait on it (a flight), and the channel's held
trials then join the queue or end with the refusal sent to their requesters
(`settle`, bot/trials/command.py). A yes is cached a few minutes; an older
one is still used and asked again after the ack; the outbox forgets it when
Slack refuses a message there."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient

from bot.context import Postable
from bot.delivery import refusals
from bot.store import Unwritable

log = logging.getLogger("trialbot.slack")
TTL_SECONDS = 300
TIMEOUT = 1.5  # seconds for Slack's answer, retries off: a held trial waits on it
WAIT_SECONDS = 10.0  # `refusal` waits at most this for a flight (after an ack)
SETTLE_RETRY_MAX = 30.0  # a settle the database refused is tried again, backing off to this


class Flight:
    """One question to Slack about a channel, and everyone waiting on its answer."""

    def __init__(self):
        self.done = threading.Event()
        self.refusal: str | None = None

    def wait(self, timeout: float) -> str | None:
        """The refusal, or None (allowed, or no answer in time: unknown is no refusal)."""
        return self.refusal if self.done.wait(timeout) else None


class ChannelCheck:
    def __init__(self, client: WebClient, settle: Callable[[str, str | None], int],
                 ttl: float = TTL_SECONDS, clock=time.monotonic):
        self.client = client  # with timeout=TIMEOUT and no retries: a held trial waits on it
        self.settle = settle  # (channel, refusal) -> trials settled: bot/trials/command.py
        self.ttl, self.clock = ttl, clock
        self.ok: dict[str, float] = {}  # channel -> when Slack said we can post
        self.flights: dict[str, Flight] = {}
        self.lock = threading.Lock()

    def cached(self, channel: str) -> Postable:
        """What is known without asking Slack."""
        with self.lock:
            at = self.ok.get(channel)
        if at is None:
            return Postable.UNKNOWN
        return Postable.YES if self.clock() - at < self.ttl else Postable.STALE

    def confirm(self, channel: str) -> Flight:
        """Ask Slack about `channel` in the background (no call while a fresh yes
        is cached), then settle its held trials; joins the flight under way."""
        with self.lock:
            flight = self.flights.get(channel)
            if flight is not None:
                return flight
            flight = self.flights[channel] = Flight()
        threading.Thread(target=self._fly, args=(channel, flight), daemon=True,
                         name=f"channel-check-{channel}").start()
        return flight

    def refusal(self, channel: str, timeout: float = WAIT_SECONDS) -> str | None:
        """For work done after an ack (a Re-run click): None when the bot may post
        in `channel` (a yes cached, even an old one, which is asked again), else
        why not; an unknown channel waits for Slack's answer."""
        known = self.cached(channel)
        if known is Postable.YES:
            return None
        flight = self.confirm(channel)
        return None if known is Postable.STALE else flight.wait(timeout)

    def resume(self, channels: list[str]) -> None:
        """At start: trials left held (the bot stopped before Slack answered)."""
        for channel in channels:
            self.confirm(channel)

    def forget(self, channel: str) -> None:
        with self.lock:
            self.ok.pop(channel, None)

    def _fly(self, channel: str, flight: Flight) -> None:
        try:
            flight.refusal = None if self.cached(channel) is Postable.YES else self._ask(channel)
        finally:
            # Out of `flights` before settling: a trial held after this settle
            # started finds no flight and starts its own, so none is left held.
            with self.lock:
                self.flights.pop(channel, None)
            flight.done.set()
        self._settle(channel, flight.refusal)

    def _ask(self, channel: str) -> str | None:
        try:
            info, error = self.client.conversations_info(channel=channel)["channel"], None
        except Exception as exc:  # noqa: BLE001 - unknown is no refusal (see can_post)
            info = None
            error = getattr(getattr(exc, "response", None), "get", lambda *_: None)("error") \
                or type(exc).__name__
            if error != "channel_not_found":
                log.warning("conversations.info for %s failed (%s); not checked", channel, error)
        refused = refusals.can_post(channel, info, error)
        # An answer that says nothing (a missing scope) is kept too: asking again on every
        # command would hold each one's trials for the same answer.
        with self.lock:
            if refused is None:
                self.ok[channel] = self.clock()
            else:
                self.ok.pop(channel, None)
        return refused

    def _settle(self, channel: str, refused: str | None) -> None:
        """Held trials go on; a database that refuses the write is tried again."""
        delay = 1.0
        while True:
            try:
                self.settle(channel, refused)
                return
            except Unwritable as exc:
                log.warning("held trials in %s not settled (%s); again in %.0f s", channel,
                            exc, delay)
            except Exception:  # noqa: BLE001 - a bug: logged; the next start settles them
                log.exception("held trials in %s not settled", channel)
                return
            time.sleep(delay)
            delay = min(delay * 2, SETTLE_RETRY_MAX)
