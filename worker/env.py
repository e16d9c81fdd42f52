"""Environment fingerprint: what the trial ran on, so two trials are only
compared when they ran on the same kind of environment."""
from __future__ import annotations

import platform
import socket
import sys
from types import ModuleType

from worker.reportparts import Env


def cpu_name() -> str:
    """From /proc/cpuinfo: platform.processor() would fork `uname -p`, and a
    fork of the measured process briefly doubles the tree's sampled RSS."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def fingerprint(torch: ModuleType, device: str) -> Env:
    env: Env = {
        "device": device,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu": cpu_name(),
        "os": f"{platform.system()} {platform.release()}",
        "gpu_name": None, "gpu_count": 0, "gpu_memory": None, "driver": None,
    }
    if torch.cuda.is_available():
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        env["gpu_name"], env["gpu_count"] = props[0].name, len(props)
        env["gpu_memory"] = props[0].total_memory
    env["executable"] = sys.executable
    return env
