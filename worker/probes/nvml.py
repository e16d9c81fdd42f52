"""NVML figures: device used (what nvidia-smi shows), the child tree's own use,
and GPU utilisation, per device, sampled from outside the measured process.
On a box without an NVIDIA driver NVML is reported unavailable, which is not
an error. NVML numbers devices by PCI bus; the launcher sets
CUDA_DEVICE_ORDER=PCI_BUS_ID so torch's device i is NVML's device i (when
CUDA_VISIBLE_DEVICES does not hide some)."""
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


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


class NvmlTracker:
    def __init__(self):
        self.nvml, self.why = _init()
        self.devices = []
        if self.nvml:
            for i in range(self.nvml.nvmlDeviceGetCount()):
                h = self.nvml.nvmlDeviceGetHandleByIndex(i)
                self.devices.append({"index": i, "handle": h,
                                     "name": _text(self.nvml.nvmlDeviceGetName(h)),
                                     "used_peak": 0, "process_used_peak": 0, "util": [],
                                     "ours": False})
            self.method = {
                "device_used_peak": "NVML nvmlDeviceGetMemoryInfo.used summed over the devices "
                                    "the trial used, sampled at ~100 Hz (includes other "
                                    "processes on those devices and the CUDA context)",
                "process_used_peak": "NVML nvmlDeviceGetComputeRunningProcesses for the "
                                     "child tree, summed over devices, sampled at ~100 Hz",
                "devices": "per device (NVML index = PCI bus order = torch index): the same "
                           "peaks, and nvmlDeviceGetUtilizationRates.gpu in percent",
            }
        else:
            self.method = {"device_used_peak": self.why, "process_used_peak": self.why}

    def sample(self, procs) -> dict:
        if not self.nvml:
            return {}
        pids = {p.pid for p in procs}
        used = mine = 0
        for d in self.devices:
            h = d["handle"]
            try:
                dev_used = self.nvml.nvmlDeviceGetMemoryInfo(h).used
                dev_mine = sum(p.usedGpuMemory or 0
                               for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
                               if p.pid in pids)
                d["util"].append(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu)
            except self.nvml.NVMLError:
                continue
            d["used_peak"] = max(d["used_peak"], dev_used)
            d["process_used_peak"] = max(d["process_used_peak"], dev_mine)
            d["ours"] = d["ours"] or dev_mine > 0
            used, mine = used + dev_used, mine + dev_mine
        return {"device_used": used, "process_used": mine}

    def result(self) -> dict:
        if not self.nvml:
            return {"device_used_peak": None, "process_used_peak": None}
        devices = [{"index": d["index"], "name": d["name"], "used_peak": d["used_peak"],
                    "process_used_peak": d["process_used_peak"],
                    "utilization_mean": (sum(d["util"]) / len(d["util"])) if d["util"] else None,
                    "utilization_max": max(d["util"]) if d["util"] else None}
                   for d in self.devices]
        used = [d for d, raw in zip(devices, self.devices) if raw["ours"]]
        if not used:  # never saw our processes (CPU trial, or a container's PID namespace)
            self.method["process_used_peak"] = ("not measured: NVML listed none of the trial's "
                                                "processes on any GPU")
            self.method["device_used_peak"] = ("not attributed: the trial's processes were not "
                                               "seen on any GPU; per-device figures are in "
                                               "`devices`")
            return {"device_used_peak": None, "process_used_peak": None, "devices": devices}
        return {"device_used_peak": sum(d["used_peak"] for d in used),
                "process_used_peak": sum(d["process_used_peak"] for d in used),
                "devices": devices}

    def pids_on_gpu(self) -> set[int]:
        """Processes NVML still sees on any device (to wait for memory to be freed)."""
        if not self.nvml:
            return set()
        out = set()
        for d in self.devices:
            try:
                out |= {p.pid for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(d["handle"])}
            except self.nvml.NVMLError:
                pass
        return out

    def driver(self) -> str | None:
        return _text(self.nvml.nvmlSystemGetDriverVersion()) if self.nvml else None

    def close(self) -> None:
        if self.nvml:
            self.nvml.nvmlShutdown()
