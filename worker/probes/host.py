"""Host memory: RSS of the trial's child process tree, sampled from outside."""
from __future__ import annotations

import psutil


class HostRssTracker:
    method = {"host_rss_peak": "psutil RSS summed over the child process tree, "
                               "sampled at ~100 Hz by the worker"}

    def __init__(self):
        self.peak = None

    def sample(self, procs: list[psutil.Process]) -> dict:
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        if total and (self.peak is None or total > self.peak):
            self.peak = total
        return {"host_rss": total or None}

    def result(self) -> dict:
        return {"host_rss_peak": self.peak}
