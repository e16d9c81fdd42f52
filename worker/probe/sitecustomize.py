"""trialbot's probe, injected into a recipe's Python processes through
PYTHONPATH: the paper's code is not changed.

It watches stdout for `TRIALBOT_PHASE <name>` lines and, once the program has
initialised CUDA through torch, records the allocator's peaks per phase
(resetting them at each mark), samples allocated/reserved at ~100 Hz, and
writes everything to $TRIALBOT_PROBE_OUT/probe-<pid>.json at each mark and at
exit. It never imports torch itself and imports nothing from trialbot.
"""
import atexit
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("TRIALBOT_PROBE_OUT")
MARK = "TRIALBOT_PHASE "
MAX_SAMPLES = 20000  # then halved, keeping each pair's larger values: bounded memory


def _halve(samples):
    out = []
    for a, b in zip(samples[::2], samples[1::2] + [None]):
        if b is None:
            out.append(a)
        else:
            out.append({"t": a["t"], "allocated": max(a["allocated"], b["allocated"]),
                        "reserved": max(a["reserved"], b["reserved"])})
    return out


class _Probe:
    def __init__(self, out_dir):
        self.path = os.path.join(out_dir, f"probe-{os.getpid()}.json")
        self.phase = "launch"
        self.phases = []
        self.samples = []
        self.peak_allocated = self.peak_reserved = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._sample, daemon=True, name="trialbot-probe").start()

    def _cuda(self):
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return torch.cuda
        except Exception:  # noqa: BLE001 - a half-imported torch
            return None
        return None

    def _sample(self):
        while True:
            cuda = self._cuda()
            if cuda is not None:
                try:
                    self.samples.append({"t": time.time(), "allocated": cuda.memory_allocated(),
                                         "reserved": cuda.memory_reserved()})
                except Exception:  # noqa: BLE001 - CUDA torn down at exit
                    return
                if len(self.samples) > MAX_SAMPLES:
                    self.samples = _halve(self.samples)
            time.sleep(0.01)

    def sync(self):
        """Finish queued GPU work before a mark is timed (the worker timestamps
        the line when it reads it), as the built-in workloads do."""
        cuda = self._cuda()
        if cuda is not None:
            cuda.synchronize()

    def mark(self, name):
        with self.lock:
            self._end_phase()
            self.phase = name
            self.save()

    def _end_phase(self):
        cuda = self._cuda()
        entry = {"name": self.phase, "peak_allocated": None, "peak_reserved": None,
                 "allocated": None, "reserved": None}
        if cuda is not None:
            a, r = cuda.max_memory_allocated(), cuda.max_memory_reserved()
            entry.update(peak_allocated=a, peak_reserved=r,
                         allocated=cuda.memory_allocated(), reserved=cuda.memory_reserved())
            self.peak_allocated = max(self.peak_allocated, a)
            self.peak_reserved = max(self.peak_reserved, r)
            cuda.reset_peak_memory_stats()
        self.phases.append(entry)

    def finish(self):
        with self.lock:
            self._end_phase()
            self.save(final=True)

    def save(self, final=False):
        # Samples only at exit: a mark must not stall the program on a big dump.
        data = {"phases": self.phases, "samples": self.samples if final else [], "final": final,
                "env": {"python": sys.version.split()[0], "executable": sys.executable}}
        cuda = self._cuda()
        if cuda is not None:
            stats = cuda.memory_stats()
            torch = sys.modules["torch"]
            data["totals"] = {
                "allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved(),
                "peak_allocated": self.peak_allocated, "peak_reserved": self.peak_reserved,
                "num_alloc_retries": stats.get("num_alloc_retries", 0),
                "num_ooms": stats.get("num_ooms", 0)}
            method = "in the recipe's process by trialbot's injected probe: "
            data["method"] = {
                "peak_allocated": method + "torch.cuda.max_memory_allocated, reset at each "
                                           "TRIALBOT_PHASE mark",
                "peak_reserved": method + "torch.cuda.max_memory_reserved, reset at each mark",
                "allocated": method + "torch.cuda.memory_allocated at exit",
                "reserved": method + "torch.cuda.memory_reserved at exit",
                "num_alloc_retries": method + "torch.cuda.memory_stats()",
                "num_ooms": method + "torch.cuda.memory_stats()"}
            props = torch.cuda.get_device_properties(0)
            data["env"].update(device="cuda", torch=torch.__version__, cuda=torch.version.cuda,
                               gpu_name=props.name, gpu_count=torch.cuda.device_count(),
                               gpu_memory=props.total_memory)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


class _Watch:
    """stdout as it was, plus a look at each complete line for phase marks."""

    def __init__(self, stream, probe):
        self._stream, self._probe, self._partial = stream, probe, ""

    def write(self, text):
        if MARK in text:
            self._probe.sync()
        n = self._stream.write(text)
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            if line.startswith(MARK):
                self._stream.flush()  # the worker timestamps the mark when it reads it
                self._probe.mark(line[len(MARK):].strip() or "unnamed")
        return n

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _chain_next_sitecustomize():
    """Python imports only the first sitecustomize on sys.path: run the one we
    shadow (a venv's or a distribution's), if any, so nothing changes for it."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        sys.modules["sitecustomize"] = ours


if _DIR and os.path.isdir(_DIR):
    _probe = _Probe(_DIR)
    sys.stdout = _Watch(sys.stdout, _probe)
    atexit.register(_probe.finish)
_chain_next_sitecustomize()
