"""Can the bot post in this channel? Asked of Slack (conversations.info; scopes
channels:read, groups:read, im:read, mpim:read) when a command would queue
work whose messages go there, so a channel the bot is not in refuses at once
instead of after the trial. A yes is cached a few minutes; the outbox forgets
it when Slack refuses a message there."""
from __future__ import annotations

import logging
import threading
import time

from slack_sdk import WebClient

from bot.delivery import refusals

log = logging.getLogger("trialbot.slack")
TTL_SECONDS = 300
TIMEOUT = 1.5  # seconds: inside Slack's 3 s for the command's answer, retries off


class ChannelCheck:
    def __init__(self, client: WebClient, ttl: float = TTL_SECONDS, clock=time.monotonic):
        self.client = WebClient(token=client.token, base_url=client.base_url, timeout=TIMEOUT,
                                retry_handlers=[])
        self.ttl, self.clock = ttl, clock
        self.ok: dict[str, float] = {}  # channel -> when Slack said we can post
        self.lock = threading.Lock()

    def refusal(self, channel: str) -> str | None:
        now = self.clock()
        with self.lock:
            if now - self.ok.get(channel, -self.ttl) < self.ttl:
                return None
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
        # command would spend its 1.5 s each time for the same answer.
        if refused is None:
            with self.lock:
                self.ok[channel] = now
        return refused

    def forget(self, channel: str) -> None:
        with self.lock:
            self.ok.pop(channel, None)
