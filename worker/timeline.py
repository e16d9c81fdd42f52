"""The memory timeline stored with a report: samples over time, downsampled
to a few thousand points keeping each bucket's maximum, so peaks survive."""
from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

MAX_POINTS = 2000
SAMPLED = ("host_rss", "device_used", "process_used")
ALLOCATOR = ("allocated", "reserved")


def downsample(rows: list[dict], columns: tuple[str, ...], limit: int = MAX_POINTS) -> list[list]:
    """Rows as [t, *columns]; with more than `limit` rows, each bucket of rows
    becomes one row: the bucket's first time and each column's maximum."""
    table = [[r["t"], *(r.get(c) for c in columns)] for r in rows]
    if len(table) <= limit:
        return table
    size = -(-len(table) // limit)  # ceil
    out = []
    for i in range(0, len(table), size):
        bucket = table[i:i + size]
        out.append([bucket[0][0], *(max((row[j] for row in bucket if row[j] is not None),
                                        default=None) for j in range(1, len(columns) + 1))])
    return out


def build(sampled: list[dict], allocator: list[dict]) -> dict:
    return {
        "sampled": {"columns": ["t", *SAMPLED], "rows": downsample(sampled, SAMPLED),
                    "method": "worker-side sampling at ~100 Hz (host RSS of the child tree; "
                              "NVML device and per-process used)"},
        "allocator": {"columns": ["t", *ALLOCATOR], "rows": downsample(allocator, ALLOCATOR),
                      "method": "torch.cuda.memory_allocated/reserved sampled at ~100 Hz "
                                "inside the trial process (CUDA only)"},
    }


def phase_host_peaks(phases: list[dict], rows: list[dict]) -> list[tuple[int | None, int]]:
    """Each phase's (host RSS peak, samples): the largest sampled `host_rss`
    from its start to its end, and how many samples fell there (rows in time
    order, as the sampler keeps them)."""
    times = [r["t"] for r in rows]
    out = []
    for p in phases:
        inside = rows[bisect.bisect_left(times, p["start"]):bisect.bisect_right(times, p["end"])]
        values = [r["host_rss"] for r in inside if r.get("host_rss") is not None]
        out.append((max(values, default=None), len(values)))
    return out


def import_phase(phases: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The phase before the program's own work: a recipe's `launch` (the
    interpreter and the imports before its first phase), a built-in's `setup`
    (importing torch and the workload)."""
    return next((p for p in phases if (p["name"], p.get("found_by")) in
                 (("launch", "start"), ("setup", None))), None)


def host_by_phase(report: Mapping[str, Any], rows: list[dict], hz: float) -> None:
    """Give each timed phase its host RSS peak from the sampled rows, and the
    report the import phase's share of the trial's host peak, each saying how."""
    phases = [p for p in report["phases"] if "start" in p and "end" in p]
    for phase, (peak, count) in zip(phases, phase_host_peaks(phases, rows)):
        phase["host_rss_peak"], phase["host_rss_samples"] = peak, count
    memory, method = report["memory"], report["memory"]["method"]
    if not hz:
        method["phase_host_rss_peak"] = "not measured: sampling was off (hz=0)"
    else:
        method["phase_host_rss_peak"] = (
            f"RSS of the trial's process tree sampled at {hz:g} Hz by the worker: each "
            f"phase's largest sample between its start and end (host_rss_samples of them); "
            f"a phase shorter than the {1000 / hz:g} ms interval may have no sample (null), "
            "and a peak held for less than that may be missed; phases outside the program's "
            "run (a recipe's setup commands and environment build) are not sampled")
    # The sampled peak, not host_rss_peak (the kernel's for a child that ran alone):
    # a share of the same samples, so a launch that held the peak reads 100%.
    first, peak = import_phase(report["phases"]), _max_host(rows)
    if first is None or not first.get("host_rss_peak") or not peak:
        memory["host_rss_launch_share"] = None
        method["host_rss_launch_share"] = (
            "not measured: " + ("no launch or setup phase" if first is None else
                                "no host RSS sample in the " + first["name"] + " phase"))
        return
    memory["host_rss_launch_share"] = min(1.0, first["host_rss_peak"] / peak)
    what = ("the interpreter start and imports before the program's first phase"
            if first["name"] == "launch" else "importing torch and the workload")
    method["host_rss_launch_share"] = (
        f"the `{first['name']}` phase's host RSS peak ({what}) over the trial's host RSS "
        "peak, both from the same samples")


def _max_host(rows: list[dict]) -> int | None:
    return max((r["host_rss"] for r in rows if r.get("host_rss")), default=None)


def sampled_host_peak(report: Mapping[str, Any]) -> int | None:
    """The sampler's own host peak from a report's timeline (downsampling keeps
    each bucket's maximum); `memory.host_rss_peak` is the kernel's for a child
    that ran alone."""
    sampled = (report.get("timeline") or {}).get("sampled") or {}
    if "host_rss" not in sampled.get("columns", ()):
        return None
    column = sampled["columns"].index("host_rss")
    return max((row[column] for row in sampled["rows"] if row[column]), default=None)
