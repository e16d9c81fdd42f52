"""Who is in a Slack user group, for the access policy: `usergroups.users.list`
(scope usergroups:read), cached a few minutes so a burst of commands costs
one call per group. Asked only when the policy names user groups."""
from __future__ import annotations

import threading
import time

from bot.access import GroupLookupError

TTL_SECONDS = 300  # a member added or removed counts within 5 minutes


class Members:
    def __init__(self, client, ttl: float = TTL_SECONDS, clock=time.monotonic):
        self.client, self.ttl, self.clock = client, ttl, clock
        self.cache: dict[str, tuple[float, frozenset]] = {}
        self.lock = threading.Lock()

    def __call__(self, group: str) -> frozenset:
        now = self.clock()
        with self.lock:
            hit = self.cache.get(group)
        if hit and now - hit[0] < self.ttl:
            return hit[1]
        try:
            users = frozenset(self.client.usergroups_users_list(usergroup=group)["users"])
        except Exception as exc:  # noqa: BLE001 - any failure refuses (fail closed)
            reason = getattr(getattr(exc, "response", None), "get", lambda *_: None)("error")
            raise GroupLookupError(reason or type(exc).__name__) from None
        with self.lock:
            self.cache[group] = (now, users)
        return users
