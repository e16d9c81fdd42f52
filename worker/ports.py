"""The worker's seam to the bot: what the agent (worker/agent.py) needs of the
bot's worker API. worker/client.py's Client is the real one over HTTP; a test
may hand the agent any object with these methods."""
from __future__ import annotations

from typing import Protocol


class BotApi(Protocol):
    """The worker API's calls, as the agent makes them: each raises
    worker.client.ApiError for an HTTP error and OSError when the bot cannot be
    reached; None is the bot's empty answer (204)."""
    server: str  # the bot's URL, for the log
    token: str  # masked in every report (worker/redact.py)

    def register(self, name: str, info: dict) -> dict | None: ...

    def lease(self, name: str, wait: float, idle: dict | None = None,
              key: str | None = None) -> dict | None: ...

    def heartbeat(self, name: str, job: dict, progress: dict | None = None) -> dict | None: ...

    def accounting(self, name: str, job: dict, result: dict,
                   key: str | None = None) -> dict | None: ...

    def report(self, name: str, job: dict, report: dict, key: str | None = None,
               timeout: float = 30) -> dict | None: ...

    def release(self, name: str, job: dict, reason: str, key: str | None = None,
                timeout: float = 30) -> dict | None: ...

    def stopping(self, name: str, reason: str, poll: str,
                 timeout: float = 30) -> dict | None: ...
