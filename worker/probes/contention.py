"""Contention: what else used the machine while the trial ran.

Ten times a second (from the sampler's ticks) it reads the machine's CPU
counters (/proc/stat: busy and steal jiffies over all CPUs), the trial tree's
own CPU time (/proc/PID/stat utime+stime+cutime+cstime) and the worker's own
(/proc/self/stat), and the load average. Other processes' CPU over a span is
the machine's busy time minus the trial's and the worker's, over all the CPU
time there was. A trial is flagged when other processes or the hypervisor
(steal) took more than a stated share in a measured phase: its times are
then not the machine's own speed.

A trial pinned to some cores (worker/threads.py) is judged on those cores
only (/proc/stat's cpuN lines): its whole process tree runs there, so their
busy time less the trial's is other processes on its cores. A neighbour on a
core the trial leaves free is reported as such and not flagged: it takes
nothing from the trial's threads.
"""
from __future__ import annotations

import os
import time

from worker import notes

PERIOD = 0.1      # seconds between reads: /proc/stat costs ~20 µs, the tick 10 ms
CHUNK = 0.5       # seconds: the span the peak share is taken over
OTHERS_CPU = 0.25  # share of all CPUs other processes may use before a phase is flagged
STEAL = 0.10      # share of all CPU time the hypervisor may take before a phase is flagged

METHOD = {
    "others_cpu": "share of all CPUs' time (/proc/stat busy jiffies) not spent by the trial's "
                  "process tree (/proc/PID/stat utime+stime+cutime+cstime) or the worker "
                  f"itself, read every {PERIOD:g} s; the mean over the phase",
    "others_cpu_max": f"the same share over the busiest {CHUNK:g} s span of the phase",
    "steal": "share of all CPUs' time the hypervisor gave to other guests (/proc/stat steal)",
    "load_max": "highest 1-minute load average (/proc/loadavg) during the phase; it counts "
                "the trial's own threads, so it is shown, not judged",
    "flagged": f"a phase (for a recipe: after its launch) had other processes above "
               f"{OTHERS_CPU:.0%} of all CPUs over the phase or over any {CHUNK:g} s span, "
               f"or steal above {STEAL:.0%}",
}


# Pinned (worker/threads.py): the same shares over the trial's own cores.
PINNED_METHOD = {
    "others_cpu": "share of the trial's cores' time (/proc/stat cpuN lines of the cores it is "
                  "pinned to) not spent by the trial's process tree (all of it runs there) or "
                  f"the worker itself, read every {PERIOD:g} s; the mean over the phase",
    "steal": "share of the trial's cores' time the hypervisor gave to other guests",
    "others_cpu_free": "share of the cores the trial leaves free that other processes used; "
                       "shown, not judged: it takes nothing from the trial's threads",
}


def _fields(raw: bytes) -> list[bytes]:
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(b")") + 2:].split()


class ContentionTracker:
    def __init__(self, stat_path: str = "/proc/stat", cores=None):
        self.stat_path = stat_path
        self.cpus = os.cpu_count() or 1
        self.cores = tuple(sorted(cores)) if cores else None  # the trial's, when pinned
        # (t, busy, steal, total, tree, self, load1[, busy, steal, total on the trial's cores])
        self.rows: list[tuple] = []
        self.fds: dict[int, int] = {}
        self.last = 0.0

    def _machine(self) -> tuple[int, ...]:
        """busy, steal, total over all CPUs, then (pinned) over the trial's cores."""
        with open(self.stat_path, "rb") as f:
            lines = f.read().splitlines()
        out: tuple[int, ...] = _counts(lines[0].split()[1:9])
        if self.cores:
            mine = {f"cpu{c}".encode() for c in self.cores}
            parts = [_counts(ln.split()[1:9]) for ln in lines[1:] if ln.split()[:1]
                     and ln.split()[0] in mine]
            out += tuple(sum(p[i] for p in parts) for i in range(3))
        return out

    def _cpu_of(self, pid: int) -> int:
        fd = self.fds.get(pid)
        if fd is None:
            fd = self.fds[pid] = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        f = _fields(os.pread(fd, 1024, 0))
        return sum(int(x) for x in f[11:15])  # utime stime cutime cstime

    def sample(self, procs) -> dict:
        now = time.monotonic()
        if now - self.last < PERIOD:
            return {}
        self.last = now
        # Only live processes count: a reaped child's time has moved into its
        # parent's cutime, so keeping its last value would count it twice.
        tree = 0
        for proc in procs:
            try:
                tree += self._cpu_of(proc.pid)
            except (OSError, ValueError, IndexError):
                fd = self.fds.pop(proc.pid, None)
                if fd is not None:
                    os.close(fd)
        try:
            counts = self._machine()
            with open("/proc/self/stat", "rb") as f:
                own = sum(int(x) for x in _fields(f.read())[11:13])
            load = os.getloadavg()[0]
        except (OSError, ValueError):
            return {}
        self.rows.append((time.time(), *counts[:3], tree, own, load, *counts[3:]))
        return {}

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def share(self, start: float, end: float) -> dict | None:
        """Others' CPU and steal shares over [start, end] (Unix time), from the
        last read at or before it to the first at or after it (a span shorter
        than the reads' period takes the period around it); None without reads
        on both sides."""
        if not self.rows:
            return None
        a = ([r for r in self.rows if r[0] <= start] or self.rows[:1])[-1]
        b = ([r for r in self.rows if r[0] >= end] or self.rows[-1:])[0]
        return _share(a, b) if b[0] > a[0] else None

    def phase(self, start: float, end: float) -> dict | None:
        rows = [r for r in self.rows if start - PERIOD / 2 <= r[0] <= end + PERIOD / 2]
        if len(rows) < 2:
            return None
        whole = _share(rows[0], rows[-1])
        peak, i = whole["others_cpu"], 0
        while i < len(rows) - 1:  # consecutive spans of at least CHUNK seconds
            j = i + 1
            while j < len(rows) - 1 and rows[j][0] - rows[i][0] < CHUNK:
                j += 1
            if rows[j][0] - rows[i][0] >= CHUNK / 2:
                peak = max(peak, _share(rows[i], rows[j])["others_cpu"])
            i = j
        return {"seconds": end - start, **whole, "others_cpu_max": peak,
                **_free_share(rows[0], rows[-1]),
                "load_max": max(r[6] for r in rows)}

    def result(self, phases: list[dict], recipe: bool = False, gpu: dict | None = None,
               free: tuple[int, ...] = ()) -> dict:
        """The report's `contention` block from the phases the trial reported."""
        self.close()
        per = {}
        for p in phases:
            if p.get("start") is None or p.get("end") is None:
                continue
            got = self.phase(p["start"], p["end"])
            if got:
                per[p["name"]] = got
        # Every phase's time goes into a plan (prep too); a recipe's launch is not its own.
        measured = [n for n in per if not (recipe and n == "launch")]
        busy = busy_phases(per, measured)
        note = _busy_note(busy, gpu)
        summary = notes.english(note) if note else None
        method = dict(METHOD)
        if self.cores:
            method.update(PINNED_METHOD)
        if not per:
            method["others_cpu"] = ("not measured: no CPU counters were read during the "
                                    "trial's phases (it ended too fast, or /proc is missing)")
        return {"flagged": bool(summary), "summary": summary, "summary_note": note,
                "cpus": self.cpus, "cores": list(self.cores) if self.cores else None,
                "free_cores": list(free) if self.cores else [],
                "neighbour": neighbour(per, measured) if self.cores and not busy else None,
                "threshold": {"others_cpu": OTHERS_CPU, "steal": STEAL, "span_s": CHUNK},
                "phases": per, "gpu": gpu, "method": method}


def busy_phases(per: dict, measured: list[str]) -> list[tuple[str, dict]]:
    """The phases other processes or steal made busy: on the trial's cores
    when it was pinned, over all CPUs when not."""
    return [(n, per[n]) for n in measured
            if max(per[n]["others_cpu"], per[n]["others_cpu_max"]) > OTHERS_CPU
            or per[n]["steal"] > STEAL]


def neighbour(per: dict, measured: list[str]) -> dict | None:
    """A pinned trial's neighbour on the cores it leaves free (not contention):
    the phase where it took the most, when above the threshold."""
    seen = [(n, per[n]["others_cpu_free"]) for n in measured
            if (per[n].get("others_cpu_free") or 0) > OTHERS_CPU]
    if not seen:
        return None
    name, share = max(seen, key=lambda x: x[1])
    return {"phase": name, "others_cpu_free": share}


def _busy_note(busy: list, gpu: dict | None) -> dict | None:
    """The busy warning as a message (worker/notes.py), or None when quiet."""
    findings = (gpu or {}).get("flagged_notes") or []
    if not busy:
        return notes.message(notes.GPU_BUSY, gpu=findings) if findings else None
    # The run phase is named when it is busy: its times are the ones reused.
    found = dict(busy)
    name = "run" if "run" in found else max(
        found, key=lambda n: found[n]["others_cpu"] + found[n]["steal"])
    worst = found[name]
    values = {"others": format(worst["others_cpu"], ".0%"), "phase": name,
              "peak": format(worst["others_cpu_max"], ".0%"), "span": format(CHUNK, "g")}
    steal = worst["steal"] > STEAL
    if steal:
        values["steal"] = format(worst["steal"], ".0%")
    if findings:
        return notes.message(notes.CPU_STEAL_GPU_BUSY if steal else notes.CPU_GPU_BUSY,
                             gpu=findings, **values)
    return notes.message(notes.CPU_STEAL_BUSY if steal else notes.CPU_BUSY, **values)


def _counts(fields: list[bytes]) -> tuple[int, int, int]:
    v = [int(x) for x in fields]
    user, nice, system, idle, iowait, irq, softirq, steal = v + [0] * (8 - len(v))
    return user + nice + system + irq + softirq, steal, sum(v)


def _mine(r: tuple) -> tuple:
    """busy, steal, total on the trial's cores: all CPUs when it is not pinned."""
    return r[7:10] if len(r) > 7 else r[1:4]


def _free_share(a: tuple, b: tuple) -> dict:
    """Other processes' share of the cores a pinned trial leaves free."""
    if len(a) <= 7:
        return {}
    total = (b[3] - a[3]) - (b[9] - a[9])
    busy = (b[1] - a[1]) - (b[7] - a[7])
    return {"others_cpu_free": min(1.0, max(0.0, busy / total)) if total > 0 else 0.0}


def _share(a: tuple, b: tuple) -> dict:
    (busy_a, steal_a, total_a), (busy_b, steal_b, total_b) = _mine(a), _mine(b)
    total = total_b - total_a
    if total <= 0:
        return {"others_cpu": 0.0, "steal": 0.0}
    # the worker's own time is taken off wherever it ran: a few % of a core at most
    others = (busy_b - busy_a) - (b[4] - a[4]) - (b[5] - a[5])
    return {"others_cpu": min(1.0, max(0.0, others / total)),
            "steal": min(1.0, max(0.0, (steal_b - steal_a) / total))}
