"""Worker tokens: the shared `TRIALBOT_WORKER_TOKEN` (the single-box default:
it may act as any worker) or a per-worker token made by
`trialbot worker-token create NAME`, which may act only as NAME.

Only a token's SHA-256 is stored. A slow salted hash (scrypt, bcrypt) is for
passwords people choose; these are 256 random bits from `secrets`, so no
guess list exists to speed up, and one SHA-256 per request keeps lookups fast.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a worker name fit for a shell
SHARED = object()  # the caller holds the shared token: any worker name


def new_token() -> str:
    """A token that never starts with `-` (1 in 64 of token_urlsafe's do): one that
    did would be read as an option in `trialbot-worker --token TOKEN`."""
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(header: str | None) -> str:
    scheme, _, given = (header or "").partition(" ")
    return given.strip() if scheme == "Bearer" else ""


def caller(header: str | None, shared: str, active: list[tuple[str, str]]):
    """SHARED, the worker name a per-worker token belongs to, or None (401).
    Every comparison runs, each in constant time (hmac.compare_digest), so
    the time taken says nothing about which token nearly matched."""
    given = bearer(header)
    if not given:
        return None
    found = None
    if shared and hmac.compare_digest(given.encode(), shared.encode()):
        found = SHARED
    hashed = digest(given).encode()
    for name, stored in active:
        if hmac.compare_digest(hashed, stored.encode()) and found is None:
            found = name
    return found
