"""The sampler: one thread that ticks every tracker (host RSS, NVML) at
~100 Hz over the trial's process tree, from outside the measured process,
and keeps the timeline. Its own CPU time is the cost of measuring."""
from __future__ import annotations

import os
import threading
import time

import psutil

from worker import timeline

SAMPLE_HZ = 100

TREE_REFRESH = 0.5  # seconds between re-listing the child's process tree

MAX_ROWS = 40000    # sampled rows kept in memory before halving


class Sampler(threading.Thread):
    """One thread ticks every tracker at `hz` over the child's process tree and
    keeps the timeline. hz=0 samples nothing (to measure the probes' overhead)."""

    def __init__(self, pid: int, trackers, hz: float = SAMPLE_HZ):
        super().__init__(daemon=True, name="trial-sampler")
        try:
            self.root = psutil.Process(pid)
        except psutil.NoSuchProcess:  # the child already exited: nothing to sample
            self.root = None
        self.trackers, self.hz = trackers, hz
        self.done = threading.Event()
        self.rows: list[dict] = []
        self.pids: set[int] = set()
        self.cpu_seconds = 0.0  # this thread's own CPU time: the sampling's cost

    def run(self) -> None:
        if not self.hz:
            return
        period = 1.0 / self.hz
        procs: list = []
        refreshed = 0.0
        try:
            self._loop(period, procs, refreshed)
        finally:
            self.cpu_seconds = time.thread_time()

    def _loop(self, period: float, procs: list, refreshed: float) -> None:
        while self.root and not self.done.is_set():
            now = time.monotonic()
            if now - refreshed >= TREE_REFRESH:
                # Re-list the tree a few times a second, not at every tick: the
                # sampler's own CPU time is the probes' overhead.
                try:
                    procs = [self.root] + _children(self.root)
                except psutil.NoSuchProcess:
                    return
                self.pids.update(p.pid for p in procs)
                refreshed = now
            row = {"t": time.time()}
            for tracker in self.trackers:
                row.update(tracker.sample(procs))
            self.rows.append(row)
            if len(self.rows) > MAX_ROWS:  # hours-long trials: bounded memory, peaks kept
                self.rows = [dict(zip(("t", *timeline.SAMPLED), r)) for r in
                             timeline.downsample(self.rows, timeline.SAMPLED, MAX_ROWS // 2)]
            # time.sleep costs about half of Event.wait's CPU per tick here; stop()
            # waits at most one period for the flag to be seen.
            time.sleep(max(0.0, period - (time.monotonic() - now)))

    def stop(self) -> None:
        self.done.set()
        if self.is_alive():
            self.join()


def _children(root: psutil.Process) -> list[psutil.Process]:
    """The process tree under `root` from /proc/PID/task/TID/children (about
    20 µs), or psutil's scan of all of /proc (about 1.3 ms) where the kernel
    lacks that file."""
    try:
        found, todo = [], [root.pid]
        while todo:
            pid = todo.pop()
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                found += kids
                todo += kids
        return [psutil.Process(k) for k in found]
    except FileNotFoundError:
        if not root.is_running():
            raise psutil.NoSuchProcess(root.pid) from None
        return root.children(recursive=True)
    except (OSError, psutil.NoSuchProcess):
        return root.children(recursive=True)
