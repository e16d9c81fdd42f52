"""What this worker has: GPUs by NVML, and whether CUDA is usable at all.
Looked up once per process; no torch import in the worker itself."""
from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys


@functools.lru_cache(maxsize=1)
def gpus() -> list[dict]:
    from worker.probes.nvml import _init
    nvml, _ = _init()
    if not nvml:
        return []
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        name = nvml.nvmlDeviceGetName(h)
        out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                    "memory": nvml.nvmlDeviceGetMemoryInfo(h).total})
    nvml.nvmlShutdown()
    return out


@functools.lru_cache(maxsize=1)
def has_cuda() -> bool:
    """NVML sees a GPU, or (NVML missing or refused) torch sees a CUDA device,
    asked in a child so the worker never initialises CUDA itself."""
    if gpus():
        return True
    try:
        done = subprocess.run([sys.executable, "-c",
                               "import torch; print(torch.cuda.is_available())"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.stdout.strip() == "True"


@functools.lru_cache(maxsize=1)
def device() -> str:
    """cuda, mps (Apple silicon) or cpu: what trials here run on. A Mac is
    asked in a child too; elsewhere mps cannot be, so torch is not imported."""
    if has_cuda():
        return "cuda"
    if platform.system() != "Darwin":
        return "cpu"
    try:
        done = subprocess.run([sys.executable, "-c",
                               "import torch; print(torch.backends.mps.is_available())"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    return "mps" if done.stdout.strip() == "True" else "cpu"


def info() -> dict:
    """What the bot shows about a worker: host, GPUs (NVML, no torch import), CPU
    cores. trialbot-worker and the bot's local worker both register with it."""
    return {"host": socket.gethostname(), "gpus": [g["name"] for g in gpus()],
            "gpu_memory": [g["memory"] for g in gpus()], "cpus": os.cpu_count(),
            "device": device()}
