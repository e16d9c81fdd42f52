"""`trialbot doctor`'s exit codes, one per class of failure, and its lines:
the one place they are defined (docs/doctor.md has the table)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum


class Exit(IntEnum):
    """One exit code per class of failure (docs/doctor.md). With several failing,
    the lowest: the order is that of the checks, and an earlier one often
    causes a later one. 1 and 2 are Python's crash and a usage error."""
    OK = 0
    SETTINGS = 3  # a setting missing or bad, or nobody may run trials
    SLACK_TOKEN = 4  # Slack refuses SLACK_BOT_TOKEN
    SLACK_UNREACHABLE = 5  # no answer from Slack, or an HTTP error
    SLACK_SCOPES = 6  # the token lacks scopes manifest.yml asks for
    SOCKET_MODE = 7  # SLACK_APP_TOKEN refused, or no Socket Mode connection offered
    DATABASE = 8  # no file, not a database, not migrated, from a newer trialbot, not WAL,
    # cannot be written (read-only, or another program holds its write lock)
    DISK = 9  # under MIN_FREE free beside the database
    BACKUP = 10  # no backup recorded, or the last older than BACKUP_DAYS
    WORKERS = 11  # no worker seen in the last hour
    OUTBOX = 12  # a message unsent past the alert limit, or Slack refuses the bot's token


MIN_FREE = 2**30  # bytes free beside the database: SQLite stops writing when it runs out
BACKUP_DAYS = 7
WORKERS_WITHIN = 3600.0  # seconds
WRITE_WAIT = 2.0  # seconds the write check waits for the database's write lock


@dataclass(frozen=True)
class Line:
    text: str
    failed: Exit = Exit.OK  # the class when the check failed
    warn: bool = False  # worth knowing, but nothing fails
    check: str = ""  # its name on the screen: slack, scopes, database …

    @property
    def mark(self) -> str:
        return "FAIL" if self.failed else "warn" if self.warn else "ok"

    def named(self, check: str) -> Line:
        return replace(self, check=check)

    def __str__(self) -> str:
        return f"{self.mark:<4}  {self.check:<8} {self.text}"
