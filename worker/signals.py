"""SIGINT and SIGTERM read as data, for `trialbot-worker` and `trialbot serve`.

A Python signal handler runs in the main thread between two bytecodes,
wherever that thread is, perhaps holding a lock the handler would take. So
the handler here does nothing; the interpreter's own C handler writes the
signal's number to a pipe (signal.set_wakeup_fd), and whoever stops the
program reads it with next(), on any thread, with no lock held."""
from __future__ import annotations

import os
import select
import signal
from typing import overload

STOPS = (signal.SIGINT, signal.SIGTERM)
# After SIGTERM the running trial may still end and report for GRACE seconds;
# then it is killed and handed back, and the bot told within TELL seconds.
# `docker stop` kills at 10 s: 6 + 3 leaves a second for the child to die.
GRACE = 6.0
TELL = 3.0


class Signals:
    def __init__(self, signals: tuple[signal.Signals, ...] = STOPS):
        """Install from the main thread (the only one Python lets install them)."""
        self.signals = set(signals)
        self.read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for sig in signals:
            signal.signal(sig, _noted)

    @overload
    def next(self, timeout: None = None) -> str: ...  # without a timeout it waits for one
    @overload
    def next(self, timeout: float) -> str | None: ...

    def next(self, timeout: float | None = None) -> str | None:
        """The next stop signal's name (SIGTERM, SIGINT); None after `timeout`
        seconds without one."""
        while True:
            ready, _, _ = select.select([self.read], [], [], timeout)
            if not ready:
                return None
            number = os.read(self.read, 1)[0]
            if number in self.signals:
                return signal.Signals(number).name


def _noted(signum, frame) -> None:
    """The wakeup pipe has the signal already."""
