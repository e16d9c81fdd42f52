"""The trial's child process: started through the shim in its own process
group, with the worker's secrets kept out of its environment; its output
read in bounded pieces (phase marks taken from it), its timeout and cancel
enforced by killing the group, its exit and the kernel's peak RSS for it
read with wait4."""
from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import threading
import time

from worker import models, redact
from worker.launcher.sampler import SAMPLE_HZ, Sampler
from worker.spec import TrialSpec

PHASE_MARK = "TRIALBOT_PHASE "

LINE_LIMIT = 64 * 1024  # bytes of output read at a time

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE_DIR = os.path.join(PACKAGE_ROOT, "worker", "probe")

SHIM = os.path.join(PACKAGE_ROOT, "worker", "shim.py")  # run by path: adds nothing to PYTHONPATH

# malloc=live: glibc returns every freed block over this size to the OS.
LIVE_MMAP_THRESHOLD = 64 * 1024


class Run:
    """One child process: its exit, why it was stopped, its kernel peak, its output."""

    def __init__(self, argv, cwd, env, deadline: float, cancel: threading.Event,
                 trackers=(), hz: float = SAMPLE_HZ, progress: dict | None = None,
                 user=None, cpus: tuple[int, ...] = ()):
        self.progress = {} if progress is None else progress  # the phase, for heartbeats
        self.log: list[str] = []
        self.marks: list[tuple[str, float]] = []  # (phase name, wall time) from stdout
        self.started = time.time()
        clock = time.monotonic()  # its duration: a wall clock may step meanwhile
        # Linux folds the spawning process's high-water RSS into the child's
        # ru_maxrss at exec, so the kernel's figure is only the child's above this.
        self.parent_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        # -I -S: the shim imports no site, so no sitecustomize (the probe, the
        # program's own) runs before the program does
        shim = [sys.executable, "-I", "-S", SHIM]  # dies with the worker; OOM-killed first
        if cpus:  # pinned before the exec: every thread the trial starts stays there
            shim += ["--cpus", ",".join(map(str, cpus))]
        if user is not None:  # a TrialUser: the shim becomes it before the exec
            shim += user.shim_args()
        self.proc: subprocess.Popen[bytes] | None  # None: it could not start
        try:
            self.proc = subprocess.Popen(
                shim + list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True)  # own process group: killable as a whole
        except OSError as exc:
            self.proc, self.code, self.stopped, self.max_rss = None, None, None, None
            self.ended, self.seconds = time.time(), time.monotonic() - clock
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
        self.ended, self.seconds = time.time(), time.monotonic() - clock
        self.max_rss = usage.ru_maxrss * 1024  # Linux reports KiB
        self.sampler.stop()
        reader.join(timeout=5)

    def _read(self) -> None:
        # Bounded reads: a child printing gigabytes on one line must not grow the
        # worker. A longer line arrives in pieces, joined again (a secret split
        # between pieces must stay whole to be masked) and cut to its last part.
        partial = ""
        # Read only once the child started, with stdout=PIPE
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        while raw := stdout.readline(LINE_LIMIT):
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


def builtin_env(spec: TrialSpec) -> dict:
    """A built-in workload's child environment: this package importable, and
    with malloc=live glibc's mmap threshold pinned (read by glibc at startup)."""
    env = child_env(PYTHONPATH=pythonpath(PACKAGE_ROOT, os.environ.get("PYTHONPATH")))
    # hf-* models: the directories and hub switch the operator allowed (worker/models.py)
    env.update({k: os.environ[k] for k in (models.ENV_DIRS, models.ENV_HUB) if k in os.environ})
    if not models.hub_allowed():  # nothing a trial builds reaches the hub unless allowed
        env["HF_HUB_OFFLINE"] = "1"
    if spec.params.get("malloc") == "live":
        env["MALLOC_MMAP_THRESHOLD_"] = str(LIVE_MMAP_THRESHOLD)
    return env


def child_env(**extra: str) -> dict:
    """The trial's environment: the worker's, less its own secrets (the worker
    token, Slack tokens), which third-party code must never see."""
    env = redact.without_secrets()
    return {**env, **extra, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"}


def pythonpath(first: str, rest: str | None) -> str:
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


MAX_JSON = 64 * 2**20  # a report and its timeline are a few MB (the bot takes 8 MiB)


def read_json(path: str, limit: int = MAX_JSON):
    """A JSON file the trial wrote, or None. The trial may own the directory
    (`--trial-user`) and this process may be root: the file is opened without
    following a link or blocking on a FIFO, must be a regular file, and is read
    to `limit` bytes at most, so a trial cannot make the worker read /dev/zero
    or another user's file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return None
