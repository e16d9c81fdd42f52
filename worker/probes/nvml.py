"""NVML figures: device used (what nvidia-smi shows), the child tree's own use,
and GPU utilisation, per device, sampled from outside the measured process.
On a box without an NVIDIA driver NVML is reported unavailable, which is not
an error. NVML numbers devices by PCI bus; the launcher sets
CUDA_DEVICE_ORDER=PCI_BUS_ID so torch's device i is NVML's device i (when
CUDA_VISIBLE_DEVICES does not hide some)."""
from __future__ import annotations

from worker import notes


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


# Clock event reasons that mean the GPU ran slower than it could, by name.
THROTTLE = {"HwSlowdown": "hardware slowdown", "HwThermalSlowdown": "thermal (hardware)",
            "SwThermalSlowdown": "thermal (software)", "SwPowerCap": "power cap",
            "HwPowerBrakeSlowdown": "power brake", "SyncBoost": "sync boost"}
JUDGED = ("HwSlowdown", "HwThermalSlowdown", "SwThermalSlowdown", "HwPowerBrakeSlowdown")
THROTTLE_EVERY = 10  # ticks between clock-reason reads (~10 Hz)


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
                                     "ours": False, "others": {}, "reasons": 0})
            self.ticks = 0
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
        self.ticks += 1
        for d in self.devices:
            h = d["handle"]
            try:
                dev_used = self.nvml.nvmlDeviceGetMemoryInfo(h).used
                running = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
                dev_mine = sum(p.usedGpuMemory or 0 for p in running if p.pid in pids)
                for p in running:  # someone else's job on the same GPU: contention
                    if p.pid not in pids:
                        d["others"][p.pid] = max(d["others"].get(p.pid, 0), p.usedGpuMemory or 0)
                d["util"].append(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                if self.ticks % THROTTLE_EVERY == 1:
                    d["reasons"] |= self._reasons(h)
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

    def _reasons(self, h) -> int:
        get = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
        try:
            return int(get(h))
        except self.nvml.NVMLError:  # not supported on this GPU
            return 0

    def _reason_names(self, bits: int) -> list[str]:
        out = []
        for key in THROTTLE:
            flag = getattr(self.nvml, f"nvmlClocksEventReason{key}", None) or getattr(
                self.nvml, f"nvmlClocksThrottleReason{key}", 0)
            if flag and bits & flag:
                out.append(key)
        return out

    def contention(self) -> dict | None:
        """Others on the trial's GPUs (or on every GPU, when the trial's own
        processes were never seen on one) and the clock slowdowns seen."""
        if not self.nvml or not self.devices:
            return None
        attributed = any(d["ours"] for d in self.devices)
        mine = [d for d in self.devices if d["ours"]] or self.devices
        devices, why = [], []  # why: each finding as a message (worker/notes.py)
        for d in mine:
            reasons = self._reason_names(d["reasons"])
            others = [{"pid": pid, "used_peak": used} for pid, used in sorted(d["others"].items())]
            devices.append({
                "index": d["index"], "others": others,
                "others_used_peak": sum(o["used_peak"] for o in others),
                "utilization_mean": sum(d["util"]) / len(d["util"]) if d["util"] else None,
                "throttle": [THROTTLE[r] for r in reasons]})
            if others and attributed:  # unattributed: ours may be among them (PID namespace)
                why.append(notes.message(
                    notes.GPU_OTHERS, n=len(others), index=d["index"],
                    gib=format(sum(o["used_peak"] for o in others) / 2**30, ".2f")))
            slow = [THROTTLE[r] for r in reasons if r in JUDGED]
            if slow:
                why.append(notes.message(notes.GPU_SLOWED, index=d["index"],
                                         reasons=", ".join(slow)))
        return {"devices": devices,
                "flagged_why": "; ".join(notes.english(w) for w in why) or None,
                "flagged_notes": why,
                "method": "NVML nvmlDeviceGetComputeRunningProcesses (processes outside the "
                          "trial's tree, their peak memory), nvmlDeviceGetUtilizationRates "
                          "(includes the trial's own work) and the current clock event "
                          f"reasons every ~{THROTTLE_EVERY / 100:g} s; a power cap is shown, "
                          "not judged (a fully loaded GPU meets it)" + (
                              "" if attributed else "; the trial's own processes were not seen "
                              "on any GPU (a container's PID namespace?), so the processes "
                              "listed may include its own and are not judged")}

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
