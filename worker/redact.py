"""Secrets out of what leaves a process: trial reports (a recipe's output
tail, error messages) and log records. Used by the worker and the bot."""
from __future__ import annotations

import logging
import os
import re

MASK = "[redacted]"
# Slack tokens have known shapes, and a worker token follows "Bearer " (per-worker
# tokens are not known to the bot in clear): masked even when not configured here.
TOKEN_SHAPES = re.compile(r"\b(?:xox[abposre]|xapp)-[A-Za-z0-9-]+"
                          r"|(?<=Bearer )[A-Za-z0-9._~+/=-]+")
ENV_SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET",
               "TRIALBOT_WORKER_TOKEN", "TRIALBOT_METRICS_TOKEN")
# Variables a trial's process never inherits: the worker's token, Slack's.
SECRET_PREFIXES = ("TRIALBOT_", "SLACK_")
MIN_LENGTH = 6  # masking a shorter value would blank ordinary words and numbers


def without_secrets(environ=None) -> dict:
    """The environment less the worker's and Slack's secrets."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if not k.startswith(SECRET_PREFIXES)}


def secret_values(*values, environ=None) -> tuple[str, ...]:
    """The values worth masking: the given ones and the well-known secret
    variables of `environ`, longest first (so a secret holding another is
    masked whole)."""
    environ = os.environ if environ is None else environ
    found = {v for v in (*values, *(environ.get(n) for n in ENV_SECRETS))
             if isinstance(v, str) and len(v) >= MIN_LENGTH}
    return tuple(sorted(found, key=len, reverse=True))


def text(s: str, values) -> str:
    for value in values:
        s = _cut_ends(s.replace(value, MASK), value)
    return TOKEN_SHAPES.sub(MASK, s)


def _cut_ends(s: str, value: str) -> str:
    """A tail or head kept by truncation may begin with the end of a secret or
    stop inside its start: those pieces are masked too."""
    for k in range(len(value) - 1, MIN_LENGTH - 1, -1):
        if s.startswith(value[-k:]):
            s = MASK + s[k:]
            break
    for k in range(len(value) - 1, MIN_LENGTH - 1, -1):
        if s.endswith(value[:k]):
            s = s[:-k] + MASK
            break
    return s


def walk(obj, values):
    """Every string in a report (dicts and lists), masked."""
    if isinstance(obj, str):
        return text(obj, values)
    if isinstance(obj, dict):
        return {k: walk(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [walk(v, values) for v in obj]
    return obj


class LogFilter(logging.Filter):
    """Masks secrets in the final message and traceback of every record."""

    def __init__(self, values):
        super().__init__()
        self.values = tuple(values)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = text(record.getMessage(), self.values), None
        if record.exc_info:
            record.exc_text = text(logging.Formatter().formatException(record.exc_info),
                                   self.values)
            record.exc_info = None  # the formatter prints exc_text instead
        if record.stack_info:
            record.stack_info = text(record.stack_info, self.values)
        return True


def install(values) -> LogFilter:
    """On the root logger's handlers: a filter on a logger would miss records
    that child loggers propagate up."""
    f = LogFilter(values)
    for handler in logging.getLogger().handlers:
        handler.addFilter(f)
    return f
