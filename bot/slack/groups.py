"""Who is in a Slack user group, for the access policy: `usergroups.users.list`
(scope usergroups:read), asked only when the policy names user groups, and
never on a command's ack path: the members are fetched in the background (at
start, and again when the copy is older than the TTL, which is used
meanwhile). A group never fetched, or whose copy is too old, refuses (fail
closed) and starts a fetch, so the next command a few seconds later finds
it."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from bot.access import GroupLookupError
from worker.i18n import _

TTL_SECONDS = 300  # a member added or removed counts within 5 minutes
MAX_AGE = 3600  # a copy older than this (Slack failing since) refuses instead


@dataclass(frozen=True)
class Copy:
    at: float
    users: frozenset


class Members:
    def __init__(self, client, ttl: float = TTL_SECONDS, max_age: float = MAX_AGE,
                 clock=time.monotonic):
        self.client, self.ttl, self.max_age, self.clock = client, ttl, max_age, clock
        self.cache: dict[str, Copy] = {}
        self.errors: dict[str, str] = {}  # group -> why the last fetch failed
        self.fetching: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, group: str) -> frozenset:
        """The group's members as last fetched; raises GroupLookupError (the
        access check refuses, saying why) when there is no usable copy."""
        with self.lock:
            copy, error = self.cache.get(group), self.errors.get(group)
        age = None if copy is None else self.clock() - copy.at
        if age is None or age >= self.ttl:
            self.fetch(group)
        if copy is not None and age is not None and age < self.max_age:  # an age has a copy
            return copy.users
        raise GroupLookupError(error or _("not fetched from Slack yet"))

    def fetch(self, group: str) -> None:
        """Fetch the group's members in the background (one fetch per group at a time)."""
        with self.lock:
            if group in self.fetching:
                return
            self.fetching.add(group)
        threading.Thread(target=self._fetch, args=(group,), daemon=True,
                         name=f"usergroup-{group}").start()

    def _fetch(self, group: str) -> None:
        try:
            users = frozenset(self.client.usergroups_users_list(usergroup=group)["users"])
        except Exception as exc:  # noqa: BLE001 - any failure: the old copy, or a refusal
            reason = getattr(getattr(exc, "response", None), "get", lambda *_: None)("error")
            with self.lock:
                self.errors[group] = reason or type(exc).__name__
                self.fetching.discard(group)
            return
        with self.lock:
            self.cache[group] = Copy(self.clock(), users)
            self.errors.pop(group, None)
            self.fetching.discard(group)
