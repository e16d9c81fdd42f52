"""trialbot's probe, injected into a recipe's Python processes through
PYTHONPATH: the paper's code is not changed.

It watches stdout for `TRIALBOT_PHASE <name>` lines (phases) and
`TRIALBOT_UNIT <name>` / `TRIALBOT_UNIT_END` lines (run units the program
marks itself, a recipe's `unit = "mark:NAME"`) and, once the program has
initialised CUDA through torch, records the allocator's peaks per phase
(resetting them at each mark), samples allocated/reserved at ~100 Hz, and
writes everything to $TRIALBOT_PROBE_OUT/probe-<pid>.json at each mark and at
exit. For a program without marks, trialbot_hooks.py finds the phases and the
run units (generate, a model's forward) of Hugging Face code. It never imports
torch or transformers itself and imports nothing from trialbot.
"""
import atexit
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("TRIALBOT_PROBE_OUT")
MARK = "TRIALBOT_PHASE "
UNIT = "TRIALBOT_UNIT"  # `TRIALBOT_UNIT NAME` begins a marked unit, `TRIALBOT_UNIT_END` ends it
MAX_SAMPLES = 20000  # then halved, keeping each pair's larger values: bounded memory
MAX_UNITS = 20000  # run units kept; later ones are only counted
LOADS = ("weights", "data")  # hook phases before the first unit


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
        self.phase, self.found_by, self.start = "launch", "start", None
        self.marked = False  # the program printed its own mark: hooks stop marking phases
        self.units, self.units_seen, self.last_unit = [], 0, None
        self.hooked = 0  # units the hooks timed (marked ones do not make hook phases)
        self.models = {}  # "LlamaForCausalLM#1" -> {"class", "params"}: whose units they are
        self.open_unit = None  # a marked unit begun and not yet ended
        self.phases = []
        self.samples = []
        self.peak_allocated = self.peak_reserved = 0
        self.exception = None  # what reached the top, as trialbot_failure.py describes it
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

    def mark(self, name, found_by="mark"):
        with self.lock:
            if found_by == "mark":  # the program's own phase mark ends its marked unit
                self._end_unit(time.perf_counter())
            self.marked = self.marked or found_by == "mark"
            self._end_phase()
            self.phase, self.found_by, self.start = name, found_by, time.time()
            self.save()

    def hook_phase(self, name, found_by):
        """A hook's phase, unless the program marks its own, or it is already
        in it, or it is a load after the first unit (a loop that tokenizes
        each batch is still the run)."""
        if self.marked or name == self.phase or (self.hooked and name in LOADS):
            return
        self.sync()
        self.mark(name, found_by)

    def unit_mark(self, name):
        """`TRIALBOT_UNIT NAME` (name) or `TRIALBOT_UNIT_END` (None): a marked
        unit runs from its line to the end line, the next unit line, the next
        phase mark or the program's exit."""
        self.sync()
        now, p0 = time.time(), time.perf_counter()
        with self.lock:
            self._end_unit(p0)
            if name:
                self.open_unit = ("mark:" + name, self.phase, now, p0)

    def _end_unit(self, p1):
        if self.open_unit is not None:
            kind, phase, t0, p0 = self.open_unit
            self.open_unit = None
            self.unit(kind, phase, t0, p1 - p0)

    def model(self, name, cls, params):
        self.models.setdefault(name, {"class": cls, "params": params})

    def unit(self, kind, phase, t0, latency, model=None):
        """One outermost generate or forward (synchronized at both ends), or a
        marked span; `model` names the model object it ran on."""
        self.units_seen += 1
        self.hooked += not kind.startswith("mark:")
        t1 = t0 + latency
        if len(self.units) < MAX_UNITS:
            self.units.append({"kind": kind, "phase": phase, "t0": t0, "t1": t1,
                               "latency": latency, "model": model})
        cuda = self._cuda()
        # The run phase ends at its last unit: the peaks as they were then.
        self.last_unit = {"t1": t1, "phase": phase, **(
            {"peak_allocated": cuda.max_memory_allocated(),
             "peak_reserved": cuda.max_memory_reserved(),
             "allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved()}
            if cuda is not None else {})}

    def _end_phase(self, at_last_unit=None):
        cuda = self._cuda()
        entry = {"name": self.phase, "found_by": self.found_by, "start": self.start,
                 "peak_allocated": None, "peak_reserved": None,
                 "allocated": None, "reserved": None}
        if cuda is not None:
            a, r = cuda.max_memory_allocated(), cuda.max_memory_reserved()
            entry.update(peak_allocated=a, peak_reserved=r,
                         allocated=cuda.memory_allocated(), reserved=cuda.memory_reserved())
            self.peak_allocated = max(self.peak_allocated, a)
            self.peak_reserved = max(self.peak_reserved, r)
            cuda.reset_peak_memory_stats()
        if at_last_unit:  # what came after the last unit is not the run's
            entry.update({k: v for k, v in at_last_unit.items() if k != "phase"})
            entry["end"] = entry.pop("t1")
        self.phases.append(entry)

    def finish(self):
        with self.lock:
            self._end_unit(time.perf_counter())  # a marked unit still open ends at exit
            last = self.last_unit
            hooked_run = (self.phase == "run" and self.found_by.startswith("hook:")
                          and last is not None and last["phase"] == "run")
            self._end_phase(last if hooked_run else None)
            self.save(final=True)

    def save(self, final=False):
        # Samples only at exit: a mark must not stall the program on a big dump.
        data = {"phases": self.phases, "samples": self.samples if final else [], "final": final,
                "units": self.units, "units_seen": self.units_seen, "models": self.models,
                "exception": self.exception, "phase_at_exit": self.phase,
                "env": {"python": sys.version.split()[0], "executable": sys.executable}}
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "get_num_threads"):  # the program's own wins
            data["torch_threads"] = torch.get_num_threads()
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
                                           "phase (a TRIALBOT_PHASE mark or a hook's)",
                "peak_reserved": method + "torch.cuda.max_memory_reserved, reset at each phase",
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
            self._probe.sync()  # (a unit line syncs in unit_mark)
        n = self._stream.write(text)
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            if line.startswith(MARK):
                self._stream.flush()  # the worker timestamps the mark when it reads it
                self._probe.mark(line[len(MARK):].strip() or "unnamed")
            elif line.startswith(UNIT):
                word = line[len(UNIT):]
                if word.startswith(" ") and word.strip():
                    self._probe.unit_mark(word.strip())
                elif word.strip() == "_END":
                    self._probe.unit_mark(None)
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
    # Hook phases go to the probe file with this process's own clock, not to
    # stdout: the program's output (which a parent may parse) stays its own,
    # and no pipe or reader thread sits between a hook and its timestamp.
    import trialbot_failure
    import trialbot_hooks
    trialbot_hooks.Hooks(_probe).install()
    trialbot_failure.install(_probe)
_chain_next_sitecustomize()
