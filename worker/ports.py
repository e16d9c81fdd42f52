"""The worker's seam to the bot: what the agent (worker/agent.py) needs of the
bot's worker API. worker/client.py's Client is the real one over HTTP; a test
may hand the agent any object with these methods."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

Object = dict[str, Any]  # a JSON object: a job, a report, the bot's answer


class BotApi(Protocol):
    """The worker API's calls, as the agent makes them: each raises
    worker.client.ApiError for an HTTP error and OSError when the bot cannot be
    reached; None is the bot's empty answer (204)."""
    server: str  # the bot's URL, for the log
    token: str  # masked in every report (worker/redact.py)

    def register(self, name: str, info: Object) -> Object | None: ...

    def lease(self, name: str, wait: float, idle: Object | None = None,
              key: str | None = None) -> Object | None: ...

    def heartbeat(self, name: str, job: Object,
                  progress: Object | None = None) -> Object | None: ...

    def accounting(self, name: str, job: Object, result: Object,
                   key: str | None = None) -> Object | None: ...

    def check_result(self, name: str, job: Object, result: Object,
                     key: str | None = None) -> Object | None: ...

    def report(self, name: str, job: Object, report: Mapping[str, Any], key: str | None = None,
               timeout: float = 30) -> Object | None: ...

    def release(self, name: str, job: Object, reason: str, key: str | None = None,
                timeout: float = 30) -> Object | None: ...

    def stopping(self, name: str, reason: str, poll: str,
                 timeout: float = 30) -> Object | None: ...
