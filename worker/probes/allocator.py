"""PyTorch caching-allocator figures, per phase and for the whole trial (CUDA only)."""
from __future__ import annotations

import threading
import time

from worker import timeline
from worker.reportparts import Peaks, Totals
from worker.timeline import ALLOCATOR

MAX_SAMPLES = 20000

METHOD = {
    "allocated": "torch.cuda.memory_allocated at the end of the trial",
    "reserved": "torch.cuda.memory_reserved at the end of the trial",
    "peak_allocated": "torch.cuda.max_memory_allocated, peak reset at each phase start",
    "peak_reserved": "torch.cuda.max_memory_reserved, peak reset at each phase start",
    "num_alloc_retries": "torch.cuda.memory_stats()['num_alloc_retries']: cudaMalloc "
                         "failures that forced the cache to be flushed and retried",
    "num_ooms": "torch.cuda.memory_stats()['num_ooms']: out-of-memory errors raised",
}


class AllocatorProbe:
    def __init__(self, torch, device: str, hz: float = 100):
        self.torch = torch
        self.on = device == "cuda"
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.samples: list[dict] = []  # the allocator's part of the memory timeline
        if self.on and hz:
            threading.Thread(target=self._sample, args=(1 / hz,), daemon=True,
                             name="allocator-sampler").start()

    def _sample(self, period: float) -> None:
        cuda = self.torch.cuda
        while True:
            self.samples.append({"t": time.time(), "allocated": cuda.memory_allocated(),
                                 "reserved": cuda.memory_reserved()})
            if len(self.samples) > MAX_SAMPLES:  # bounded: halve, keeping the larger values
                rows = timeline.downsample(self.samples, ALLOCATOR, len(self.samples) // 2)
                self.samples = [dict(zip(("t", *ALLOCATOR), r)) for r in rows]
            time.sleep(period)

    def phase_start(self) -> None:
        if self.on:
            self.torch.cuda.reset_peak_memory_stats()

    def phase_end(self) -> Peaks:
        """Peaks of the phase just ended (null on a device without an allocator)."""
        if not self.on:
            return {"peak_allocated": None, "peak_reserved": None}
        cuda = self.torch.cuda
        a, r = cuda.max_memory_allocated(), cuda.max_memory_reserved()
        self.peak_allocated = max(self.peak_allocated, a)
        self.peak_reserved = max(self.peak_reserved, r)
        return {"peak_allocated": a, "peak_reserved": r,
                "allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved()}

    def totals(self) -> tuple[Totals, dict[str, str]]:
        if not self.on:
            reason = "not measurable: no CUDA caching allocator on this device"
            unmeasured: Totals = {"allocated": None, "reserved": None, "peak_allocated": None,
                                  "peak_reserved": None, "num_alloc_retries": None,
                                  "num_ooms": None}  # METHOD's keys
            return unmeasured, {k: reason for k in METHOD}
        cuda = self.torch.cuda
        stats = cuda.memory_stats()
        values: Totals = {"allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved(),
                          "peak_allocated": self.peak_allocated,
                          "peak_reserved": self.peak_reserved,
                          "num_alloc_retries": stats.get("num_alloc_retries", 0),
                          "num_ooms": stats.get("num_ooms", 0)}
        return values, dict(METHOD)
