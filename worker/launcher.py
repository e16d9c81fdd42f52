"""Process isolation: run one trial try in fresh child processes and sample
them from outside.

A built-in workload runs as `python -m worker.child`, which measures phases and
the allocator from inside. A recipe runs the admin's argv with an injected
probe (`worker/probe/sitecustomize.py` on PYTHONPATH) and marks phases from
`TRIALBOT_PHASE <name>` lines on its stdout. Either way this side samples host
RSS and NVML at ~100 Hz, enforces the timeout, cancels by killing the child's
process group, and turns a child that died without finishing into a failed
report with the error class. Whatever happens, a report comes back.
"""
from __future__ import annotations

import json
import os
import platform
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from worker import machine, timeline
from worker import report as reports
from worker.env import cpu_name
from worker.probes.host import HostRssTracker
from worker.probes.nvml import NvmlTracker
from worker.spec import SpecError, TrialSpec, check_params

SAMPLE_HZ = 100
SECRET_PREFIXES = ("TRIALBOT_", "SLACK_")
PHASE_MEMORY = ("peak_allocated", "peak_reserved", "allocated", "reserved")
ALLOCATOR_FIELDS = PHASE_MEMORY + ("num_alloc_retries", "num_ooms")
TREE_REFRESH = 0.5  # seconds between re-listing the child's process tree
MAX_ROWS = 40000    # sampled rows kept in memory before halving
KERNEL_METHOD = "kernel max RSS of the child process (wait4 rusage ru_maxrss)"
PHASE_MARK = "TRIALBOT_PHASE "
# malloc=live: glibc returns every freed block over this size to the OS.
LIVE_MMAP_THRESHOLD = 64 * 1024
LIVE_NOTE = ("; glibc's mmap threshold pinned at 64 KiB (malloc=live), so freed tensors "
             "leave RSS: the live peak")
LINE_LIMIT = 64 * 1024  # bytes of output read at a time
# How a program that died of OOM says so: torch (CUDA and CPU allocators), Python.
OOM_IN_LOG = re.compile(r"OutOfMemoryError|CUDA out of memory|can't allocate memory|"
                        r"^MemoryError", re.MULTILINE)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE_DIR = os.path.join(PACKAGE_ROOT, "worker", "probe")
SHIM = os.path.join(PACKAGE_ROOT, "worker", "shim.py")  # run by path: adds nothing to PYTHONPATH


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
        procs, refreshed = [], 0.0
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


class Run:
    """One child process: its exit, why it was stopped, its kernel peak, its output."""

    def __init__(self, argv, cwd, env, deadline: float, cancel: threading.Event,
                 trackers=(), hz: float = SAMPLE_HZ, progress: dict | None = None,
                 user=None):
        self.progress = {} if progress is None else progress  # the phase, for heartbeats
        self.log: list[str] = []
        self.marks: list[tuple[str, float]] = []  # (phase name, wall time) from stdout
        self.started = time.time()
        # Linux folds the spawning process's high-water RSS into the child's
        # ru_maxrss at exec, so the kernel's figure is only the child's above this.
        self.parent_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        shim = [sys.executable, SHIM]  # dies with the worker; OOM-killed first
        if user is not None:  # a TrialUser: the shim becomes it before the exec
            shim += user.shim_args()
        try:
            self.proc = subprocess.Popen(
                shim + list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True)  # own process group: killable as a whole
        except OSError as exc:
            self.proc, self.code, self.stopped, self.max_rss = None, None, None, None
            self.ended = time.time()
            self.log.append(f"could not start {argv[0]!r}: {exc.strerror or exc}")
            self.sampler = Sampler(-1, ())
            return
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        self.sampler = Sampler(self.proc.pid, trackers, hz)
        self.sampler.start()
        try:
            self.stopped = _watch(self.proc, deadline, cancel)
        except BaseException:  # KeyboardInterrupt, SystemExit: never leave the trial behind
            _kill_group(self.proc.pid)
            raise
        # wait4 reaps the child and gives the kernel's own peak RSS for it.
        _, status, usage = os.wait4(self.proc.pid, 0)
        _kill_group(self.proc.pid)  # anything it left running in the background goes too
        self.proc.returncode = self.code = os.waitstatus_to_exitcode(status)
        self.ended = time.time()
        self.max_rss = usage.ru_maxrss * 1024  # Linux reports KiB
        self.sampler.stop()
        reader.join(timeout=5)

    def _read(self) -> None:
        # Bounded reads: a child printing gigabytes on one line must not grow the
        # worker. A longer line arrives in pieces, joined again (a secret split
        # between pieces must stay whole to be masked) and cut to its last part.
        partial = ""
        while raw := self.proc.stdout.readline(LINE_LIMIT):
            piece = raw.decode(errors="replace")
            if not piece.endswith("\n"):
                partial = (partial + piece)[-LINE_LIMIT:]
                continue
            line, partial = (partial + piece).rstrip("\n")[-LINE_LIMIT:], ""
            if line.startswith(PHASE_MARK):
                self.marks.append((line[len(PHASE_MARK):].strip() or "unnamed", time.time()))
                self.progress["phase"] = self.marks[-1][0]
            self.log.append(line)
            del self.log[:-200]  # keep the tail: it names the cause of a failure
        if partial:  # the last line had no newline
            self.log.append(partial)

    def tail(self) -> str:
        return "\n".join(self.log)[-4000:]


def run_trial(spec: TrialSpec, cancel: threading.Event | None = None, recipes=None,
              hz: float = SAMPLE_HZ, progress: dict | None = None, user=None) -> dict:
    """Run one try of `spec` in child processes and return its report (never
    raises for a failing trial: the failure is in the report). `user`, a
    worker.trialuser.TrialUser, runs the children as that user."""
    cancel = cancel or threading.Event()
    timeout = spec.params.get("timeout", 1800)
    deadline = time.monotonic() + timeout
    host, nvml = HostRssTracker(), NvmlTracker()
    oom_kills = _oom_kills()
    started = time.time()
    if spec.recipe:
        report, run = _run_recipe(spec, recipes or {}, deadline, cancel, [host, nvml], hz,
                                  progress, user)
    else:
        report, run = _run_builtin(spec, deadline, cancel, [host, nvml], hz, progress, user)
    if run is not None:
        killed_by_kernel = (run.code == -signal.SIGKILL and not run.stopped
                            and _oom_kills() not in (None, oom_kills))
        _judge(report, run, timeout, killed_by_kernel)
        memory = report["memory"]
        for tracker in (host, nvml):
            memory.update(tracker.result())
            memory["method"].update(tracker.method)
        if spec.params.get("malloc") == "live":
            memory["method"]["host_rss_peak"] += LIVE_NOTE
        informative = run.max_rss is not None and run.max_rss > run.parent_rss
        memory["host_rss_peak_kernel"] = run.max_rss if informative else None
        memory["method"]["host_rss_peak_kernel"] = KERNEL_METHOD if informative else (
            f"not measured: the kernel's max RSS ({(run.max_rss or 0) / 2**20:.0f} MiB) is no "
            f"more than the worker's own peak RSS at spawn ({run.parent_rss / 2**20:.0f} MiB), "
            "which Linux counts into the child's at exec")
        report["timeline"] = timeline.build(run.sampler.rows, report.pop("allocator_samples", []))
        report["probe"] = {"hz": hz, "samples": len(run.sampler.rows),
                           "sampler_cpu_seconds": run.sampler.cpu_seconds,
                           "what": "worker-side sampling thread: its own CPU time, the cost "
                                   "of measuring (scripts/bench_probes.py compares on/off)"}
        _wait_gpu_released(nvml, run)
    report["env"]["driver"] = nvml.driver()
    nvml.close()
    report["started"] = report.get("started") or started
    report["finished"] = time.time()
    report["seconds"] = report["finished"] - started
    return report


def _run_builtin(spec, deadline, cancel, trackers, hz, progress=None, user=None):
    with tempfile.TemporaryDirectory(prefix="trialbot-") as tmp:
        spec_path, report_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "report.json")
        with open(spec_path, "w") as f:
            json.dump(spec.to_dict(), f)
        if user is not None:
            user.own(tmp)  # the child writes its report here
        env = builtin_env(spec)
        run = Run([sys.executable, "-m", "worker.child", spec_path, report_path], None, env,
                  deadline, cancel, trackers, hz, progress, user)
        report = _read(report_path, spec)
    return report, run


def _run_recipe(spec, recipes, deadline, cancel, trackers, hz, progress=None, user=None):
    from worker import codeversion
    report = reports.new_report("recipe", spec.params)
    report["recipe"] = spec.recipe
    recipe = recipes.get(spec.recipe)
    if recipe is None:
        reports.fail(report, "unsupported", f"recipe `{spec.recipe}` is not in this worker's "
                     "recipe file; only recipes in the file can run", "setup")
        return report, None
    try:
        check_params(recipe.workload(), spec.params)
    except SpecError as exc:
        reports.fail(report, "unsupported", f"refused by this worker's recipe file: "
                     f"{exc.message}", "setup")
        return report, None
    gpus = machine.gpus()
    report["env"] = {"device": "cpu or unknown (the probe saw no CUDA allocator)",
                     "host": socket.gethostname(), "os": f"{platform.system()} {platform.release()}",
                     "cpu": cpu_name(), "python": None, "gpu_count": len(gpus),
                     "gpu_name": gpus[0]["name"] if gpus else None,
                     "gpu_memory": gpus[0]["memory"] if gpus else None,
                     "recipe_cwd": recipe.cwd, **codeversion.of(recipe.cwd)}
    if recipe.requires == "cuda" and not machine.has_cuda():
        reports.fail(report, "unsupported", f"recipe `{recipe.name}` requires CUDA and this "
                     "worker has none (NVML sees no NVIDIA GPU and torch no CUDA device)",
                     "setup")
        return report, None
    env = child_env(**recipe.env)
    start = time.time()
    for argv in recipe.setup:  # the admin's own commands: deps, weights
        run = Run(list(argv), recipe.cwd, env, deadline, cancel, user=user)
        if run.code != 0 or run.stopped:
            report["phases"].append(_phase("setup", start, time.time()))
            return report, run
    if recipe.setup:
        report["phases"].append(_phase("setup", start, time.time()))
    with tempfile.TemporaryDirectory(prefix="trialbot-") as tmp:
        if user is not None:
            user.own(tmp)  # the probe writes here
        env.update(PYTHONPATH=_pythonpath(PROBE_DIR, env.get("PYTHONPATH")),
                   TRIALBOT_PROBE_OUT=tmp)
        run = Run(recipe.command(spec.params), recipe.cwd, env, deadline, cancel, trackers, hz,
                  progress, user)
        probe = _probe_result(tmp, run)
    report["phases"] += _marked_phases(run, probe.get("phases", []))
    report["output_tail"] = run.tail()  # what the paper's script printed: its own results
    report["memory"].update(probe.get("totals", {}))
    report["memory"]["method"].update(probe.get("method") or {
        k: "not measured: the probe saw no CUDA allocator in the recipe's process (a CPU "
           "program, or not Python)" for k in ALLOCATOR_FIELDS})
    report["allocator_samples"] = probe.get("samples", [])
    report["env"].update(probe.get("env", {}))
    if run.code == 0 and not run.stopped:
        report["status"] = "ok"
    return report, run


def _probe_result(directory: str, run: Run) -> dict:
    """The probe file of the recipe's main process, else the Python process
    that held the most GPU memory (a launcher script may start the real one)."""
    found = [read_json(os.path.join(directory, n)) for n in sorted(os.listdir(directory))
             if n.endswith(".json")]
    found = [f for f in found if f]
    if run.proc is not None:
        main = read_json(os.path.join(directory, f"probe-{run.proc.pid}.json"))
        if main and main.get("totals"):
            return main
    with_gpu = [f for f in found if f.get("totals")]
    if with_gpu:
        return max(with_gpu, key=lambda f: f["totals"]["peak_allocated"])
    return found[0] if found else {}


def _marked_phases(run: Run, probed: list[dict]) -> list[dict]:
    """Phases from TRIALBOT_PHASE lines: each mark ends the phase before it.
    Time before the first mark is `launch` (interpreter, imports); a program
    with no marks is one `run` phase. Allocator peaks come from the probe,
    paired by position from the last phase back (the probe always has a
    `launch` entry first; names may repeat)."""
    marks = run.marks or [("run", run.started)]
    if marks[0][1] - run.started > 0.001:
        marks = [("launch", run.started)] + marks
    end = max(run.ended, marks[-1][1])
    phases = [_phase(name, t, marks[i + 1][1] if i + 1 < len(marks) else end)
              for i, (name, t) in enumerate(marks)]
    for phase, seen in zip(reversed(phases), reversed(probed)):
        phase.update({k: seen.get(k) for k in PHASE_MEMORY})
    return phases


def _phase(name: str, start: float, end: float) -> dict:
    return {"name": name, "start": start, "end": end, "seconds": end - start}


def builtin_env(spec: TrialSpec) -> dict:
    """A built-in workload's child environment: this package importable, and
    with malloc=live glibc's mmap threshold pinned (read by glibc at startup)."""
    env = child_env(PYTHONPATH=_pythonpath(PACKAGE_ROOT, os.environ.get("PYTHONPATH")))
    if spec.params.get("malloc") == "live":
        env["MALLOC_MMAP_THRESHOLD_"] = str(LIVE_MMAP_THRESHOLD)
    return env


def child_env(**extra: str) -> dict:
    """The trial's environment: the worker's, less its own secrets (the worker
    token, Slack tokens), which third-party code must never see."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIXES)}
    return {**env, **extra, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"}


def _pythonpath(first: str, rest: str | None) -> str:
    first = os.path.normpath(first)
    return first + (os.pathsep + rest if rest else "")


def _watch(proc: subprocess.Popen, deadline: float, cancel: threading.Event) -> str | None:
    """Wait for the child to exit; kill its group on timeout or cancel.
    Returns "timeout", "cancelled" or None. Does not reap the child."""
    while True:
        try:
            # WNOWAIT: see the exit without reaping, so wait4 can still read rusage.
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return None
        except ChildProcessError:
            return None
        reason = "cancelled" if cancel.is_set() else (
            "timeout" if time.monotonic() > deadline else None)
        if reason:
            _kill_group(proc.pid)
            return reason
        time.sleep(0.05)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read(path: str, spec: TrialSpec) -> dict:
    return read_json(path) or reports.new_report(spec.workload, spec.params)


def _judge(report: dict, run: Run, timeout: float, killed_by_kernel: bool) -> None:
    """Give a report whose child did not finish its own verdict an error class."""
    phase = _running_phase(report)
    if run.proc is None:
        reports.fail(report, "crash", run.tail(), phase)
    elif run.stopped == "timeout":
        reports.fail(report, "timeout", f"stopped after the trial's timeout of {timeout:g} s; "
                     "the child's process group was killed", phase)
    elif run.stopped == "cancelled":
        reports.fail(report, "cancelled", "cancelled from Slack: the child's process group "
                     "was killed", phase)
    elif killed_by_kernel:
        reports.fail(report, "oom", "the kernel's OOM killer ended the child (host memory "
                     f"ran out; the cgroup's oom_kill count rose)\n{run.tail()}", phase)
    elif report["status"] == "running" or (report["status"] == "ok" and run.code != 0):
        if run.code < 0:
            name = signal.Signals(-run.code).name
            reports.fail(report, "killed", f"child killed by {name}\n{run.tail()}", phase)
        elif OOM_IN_LOG.search(run.tail()):
            reports.fail(report, "oom", f"child exited with code {run.code} after an "
                         f"out-of-memory error\n{run.tail()}", phase)
        else:
            reports.fail(report, "crash", f"child exited with code {run.code}\n{run.tail()}",
                         phase)


def _running_phase(report: dict) -> str:
    """The phase a killed child was in: the one after the last it finished."""
    order = ["setup", "weights", "data", "warmup", "run"]
    done = [p["name"] for p in report["phases"]]
    if report.get("recipe"):
        return done[-1] if done else "setup"
    for name in order:
        if name not in done:
            return name
    return "teardown"


def _oom_kills() -> int | None:
    """The kernel's count of OOM kills: this cgroup's (cgroup v2 memory.events),
    else the whole machine's (/proc/vmstat, cgroup v1 or the root cgroup), or
    None where neither can be read."""
    try:
        with open("/proc/self/cgroup") as f:
            path = f.read().strip().split("::", 1)[-1]
        return _count(f"/sys/fs/cgroup{path}/memory.events", "oom_kill")
    except (OSError, ValueError):
        pass
    try:
        return _count("/proc/vmstat", "oom_kill")
    except (OSError, ValueError):
        return None


def _count(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            name, value = line.split()
            if name == key:
                return int(value)
    raise ValueError(f"{key} not in {path}")


def _wait_gpu_released(nvml: NvmlTracker, run: Run, limit: float = 10) -> None:
    """The next trial must start on a clean GPU: wait until NVML no longer
    lists the dead child's processes (the driver frees their memory)."""
    if run.proc is None or not nvml.devices:
        return
    pids = {run.proc.pid} | run.sampler.pids
    deadline = time.monotonic() + limit
    while nvml.pids_on_gpu() & pids and time.monotonic() < deadline:
        time.sleep(0.1)
