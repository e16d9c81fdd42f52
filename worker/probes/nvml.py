"""NVML figures: device used (what nvidia-smi shows) and the child tree's own
use, sampled from outside the measured process. On a box without an NVIDIA
driver NVML is reported unavailable, which is not an error."""
from __future__ import annotations


def _init():
    """(pynvml module, None) or (None, why NVML is unavailable)."""
    try:
        import pynvml
    except ImportError:
        return None, "NVML unavailable: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML unavailable: {exc}"
    return pynvml, None


class NvmlTracker:
    def __init__(self):
        self.nvml, self.why = _init()
        self.handles = []
        if self.nvml:
            n = self.nvml.nvmlDeviceGetCount()
            self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        self.device_peak = None
        self.process_peak = None
        if self.nvml:
            self.method = {
                "device_used_peak": "NVML nvmlDeviceGetMemoryInfo.used summed over "
                                    "devices, sampled at ~100 Hz",
                "process_used_peak": "NVML nvmlDeviceGetComputeRunningProcesses for the "
                                     "child tree, sampled at ~100 Hz",
            }
        else:
            self.method = {"device_used_peak": self.why, "process_used_peak": self.why}

    def sample(self, procs) -> None:
        if not self.nvml:
            return
        pids = {p.pid for p in procs}
        used = mine = 0
        for h in self.handles:
            try:
                used += self.nvml.nvmlDeviceGetMemoryInfo(h).used
                for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if proc.pid in pids and proc.usedGpuMemory:
                        mine += proc.usedGpuMemory
            except self.nvml.NVMLError:
                continue
        self.device_peak = max(self.device_peak or 0, used)
        self.process_peak = max(self.process_peak or 0, mine)

    def result(self) -> dict:
        return {"device_used_peak": self.device_peak, "process_used_peak": self.process_peak}

    def driver(self) -> str | None:
        if not self.nvml:
            return None
        v = self.nvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v

    def close(self) -> None:
        if self.nvml:
            self.nvml.nvmlShutdown()
