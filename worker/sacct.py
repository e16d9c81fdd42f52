"""Slurm accounting: what `sacct` recorded for ended jobs, folded per job.

The worker runs this on the login node for `/plan NAME actual KIND
slurm=JOBID` (the bot is not on the cluster). `parse` is pure; `query` runs
sacct. Each job comes back as one record:

    {job_id, name, state, elapsed_s, gpus, max_rss, max_rss_step, steps,
     gpu_tres_max: {gpumem: bytes, gpuutil: %}, gpu_tres_tot: {...}}

- Elapsed and the allocation are the job's own line (`123`, `123_4` for an
  array task); MaxRSS and TRES usage live on its steps (`123.batch`,
  `123.0`, `123.extern`): MaxRSS is the largest over the steps.
- GPUs are AllocTRES's `gres/gpu=N`. It is there only where the cluster tracks
  gres/gpu (AccountingStorageTRES); `gres/gpu:a100=N` repeats the same GPUs
  by type and is not added again.
- GPU usage is `gres/gpumem` and `gres/gpuutil` in TRESUsageInMax and
  TRESUsageInTot, present only where the cluster gathers them (NVML/RSMI
  acct_gather); absent means not gathered, not zero.
"""
from __future__ import annotations

import math
import operator
import re
import subprocess

FIELDS = ("JobID", "JobName", "State", "ElapsedRaw", "AllocTRES", "MaxRSS", "TRESUsageInTot",
          "TRESUsageInMax")
# --noconvert: sizes in bytes, not rounded to "118888K" (the parser reads both).
ARGS = ["sacct", "--parsable2", "--noheader", "--noconvert", "--format=" + ",".join(FIELDS)]
JOB_ID = re.compile(r"\d{1,12}(_\d{1,9})?")  # a job, or one task of an array
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGTP]?)")
# A job in these states has not ended: its Elapsed still grows.
NOT_ENDED = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING",
             "CONFIGURING", "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED",
             "SPECIAL_EXIT", "STOPPED"}
GPU_USAGE = ("gpumem", "gpuutil")
MAX_IDS = 100


class SacctError(Exception):
    """sacct could not answer; the message is its own."""


def size(raw: str) -> int | None:
    """`118888K`, `121741312`, `38888M`, `1654.24K` as bytes; '' as None. A bare
    number is bytes (Slurm's TRES memory unit)."""
    m = SIZE.fullmatch(raw.strip())
    return round(float(m.group(1)) * UNITS[m.group(2)]) if m else None


def tres(raw: str) -> dict[str, str]:
    """`cpu=1,mem=500M,gres/gpu=2` as {name: value}."""
    out = {}
    for item in raw.split(","):
        name, eq, value = item.partition("=")
        if eq and name:
            out[name.strip()] = value.strip()
    return out


def gpus(alloc: dict[str, str]) -> int:
    count = alloc.get("gres/gpu")
    if count is not None and count.isdigit():
        return int(count)
    # Only typed entries (gres/gpu:a100=2): add the types up.
    return sum(int(v) for k, v in alloc.items() if k.startswith("gres/gpu:") and v.isdigit())


def gpu_usage(usage: dict[str, str]) -> dict[str, float]:
    out = {}
    for name in GPU_USAGE:
        raw = usage.get(f"gres/{name}")
        if raw is None:
            continue
        value = size(raw) if name == "gpumem" else _number(raw)
        if value is not None:
            out[name] = value
    return out


def parse(text: str) -> list[dict]:
    """sacct's `--parsable2 --noheader` lines in FIELDS order, steps folded into
    their job; jobs in the order sacct gave them."""
    jobs: dict[str, dict] = {}
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) < len(FIELDS):
            raise SacctError(f"sacct line with {len(cols)} fields, {len(FIELDS)} expected: "
                             f"{line[:200]!r}")
        job_id, name, state, elapsed, alloc = cols[:5]
        if "." in job_id:
            steps.append((job_id.split(".", 1)[0], cols))
            continue
        jobs[job_id] = {"job_id": job_id, "name": name, "state": state.split()[0] if state
                        else "UNKNOWN", "elapsed_s": int(elapsed) if elapsed.isdigit() else 0,
                        "gpus": gpus(tres(alloc)), "max_rss": None, "max_rss_step": None,
                        "steps": 0, "gpu_tres_max": {}, "gpu_tres_tot": {}}
    for job_id, cols in steps:
        job = jobs.get(job_id)
        if job is None:  # a step of a job not asked for (sacct lists what it was given)
            continue
        job["steps"] += 1
        rss = size(cols[5])
        if rss is not None and (job["max_rss"] is None or rss > job["max_rss"]):
            job["max_rss"], job["max_rss_step"] = rss, cols[0]
        for key, column, fold in (("gpu_tres_tot", 6, operator.add), ("gpu_tres_max", 7, max)):
            for name, value in gpu_usage(tres(cols[column])).items():
                have = job[key].get(name)
                job[key][name] = value if have is None else fold(have, value)
    return list(jobs.values())


def command(job_ids: list[str]) -> list[str]:
    bad = [j for j in job_ids if not JOB_ID.fullmatch(j)]
    if bad or not job_ids or len(job_ids) > MAX_IDS:
        raise ValueError(f"not Slurm job ids (at most {MAX_IDS}): {bad or job_ids}")
    return [*ARGS, "-j", ",".join(job_ids)]


def query(job_ids: list[str], run=subprocess.run) -> dict:
    """{"records": [...]} from sacct, or {"error": why} when it cannot answer
    (no accounting storage, slurmdbd down, sacct missing)."""
    try:
        proc = run(command(job_ids), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {"error": f"sacct could not run: {exc}"}
    if proc.returncode != 0:
        said = " ".join((proc.stderr or proc.stdout).split())[-500:]
        return {"error": f"sacct exited with {proc.returncode}: {said or 'no message'}"}
    try:
        return {"records": parse(proc.stdout)}
    except SacctError as exc:
        return {"error": str(exc)}


def _number(raw: str) -> float | None:
    """A usage figure; float() also reads "nan" and "inf", which are no figure."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None

