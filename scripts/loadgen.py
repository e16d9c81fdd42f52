"""A noisy neighbour for the benchmarks: one CPU-bound process per core,
switched on and off at random moments drawn from a fixed seed.

    with LoadGenerator(seed=7) as load:
        ...  # run trials
        load.overlap(start, end)  # seconds the load was on inside [start, end]

The spinners are started once and paused with SIGSTOP / resumed with SIGCONT,
so switching costs no process start. With `pin=True` spinner i is held to the
i-th core this process may use, so while the load is on every core has a
neighbour, the cores a pinned trial runs on included: "the load overlapped a
trial" then means its own cores too. Each spinner starts a session of its own,
as another user's program would: under autogroup scheduling a spinner in the
bench's own session would share one group's slice with it and take less.
Every on-window is logged in Unix time, the clock the trial reports use, so a
bench can tell which trials it touched.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

# CPU-bound until its parent (the bench) is gone, so a killed bench leaves no spinner.
SPIN = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
        "    for _ in range(100000): pass")


class LoadGenerator:
    def __init__(self, seed: int, on: tuple[float, float] = (1.0, 6.0),
                 off: tuple[float, float] = (4.0, 20.0), cores: int | None = None,
                 pin: bool = False):
        self.rng = random.Random(seed)
        self.on, self.off = on, off
        self.cores = cores or os.cpu_count() or 1
        self.pin = pin
        self.windows: list[list[float]] = []  # [start, end]; end is None while on
        self.procs: list[subprocess.Popen] = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._switch, daemon=True, name="loadgen")

    def __enter__(self) -> LoadGenerator:
        allowed = sorted(os.sched_getaffinity(0))
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=self.pin)
                      for _ in range(self.cores)]
        for i, p in enumerate(self.procs):
            os.kill(p.pid, signal.SIGSTOP)
            if self.pin:
                os.sched_setaffinity(p.pid, {allowed[i % len(allowed)]})
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_flag.set()
        self.thread.join()
        for p in self.procs:
            p.kill()
            p.wait()

    def _set(self, running: bool) -> None:
        for p in self.procs:
            os.kill(p.pid, signal.SIGCONT if running else signal.SIGSTOP)

    def _switch(self) -> None:
        while not self.stop_flag.wait(self.rng.uniform(*self.off)):
            self._set(True)
            self.windows.append([time.time(), None])
            self.stop_flag.wait(self.rng.uniform(*self.on))
            self._set(False)
            self.windows[-1][1] = time.time()
        if self.windows and self.windows[-1][1] is None:
            self.windows[-1][1] = time.time()

    def overlap(self, start: float, end: float) -> float:
        """Seconds the load was on inside [start, end]."""
        now = time.time()
        return sum(max(0.0, min(end, e or now) - max(start, s)) for s, e in self.windows)

    def duty(self) -> float:
        """Share of the time since the first switch the load was on."""
        if not self.windows:
            return 0.0
        now = time.time()
        on = sum((e or now) - s for s, e in self.windows)
        return on / max(1e-9, now - self.windows[0][0])
