"""A block's actual from Slurm accounting: what a Slurm worker's sacct records
(worker/sacct.py) become. Pure: bot/plans/service.py passes the request and the result in,
and stores what comes out.

    GPU-hours = Σ ElapsedRaw × allocated GPUs (AllocTRES gres/gpu) / 3600

over every job asked for (an array's tasks each count). Jobs that did not end
COMPLETED (FAILED, TIMEOUT, OUT_OF_MEMORY, CANCELLED, NODE_FAIL, ...) held their
GPUs too: their share is the actual's `retries` part, the rest its runs.
When no job allocated a GPU (a CPU partition, or a cluster that does not track
gres/gpu in AccountingStorageTRES) the figure is node-hours, Σ ElapsedRaw /
3600, and the note says so: the same way a CPU trial counts in the estimate
(wall time × 1).
"""
from __future__ import annotations

from typing import Annotated, TypedDict

from bot.states import Json
from worker.api import NOT_ENDED, REQUIRED, Most, Range, reports, shape, size
from worker.i18n import _

SHOWN = 12  # jobs named one by one in the note; the sums count them all
GPUS = Range(0, 10**6, "a GPU count from 0 to 1,000,000")


class Usage(TypedDict, total=False):
    """TRESUsageIn's GPU figures of one job, summed or the largest over its steps."""
    gpumem: Annotated[float, reports.BYTES]
    gpuutil: Annotated[float, reports.COUNT]  # percent, summed over steps for _tot


class Record(TypedDict, total=False):
    """One job as worker/sacct.py reads it."""
    job_id: Annotated[str, REQUIRED]
    state: Annotated[str, REQUIRED]
    elapsed_s: Annotated[int, reports.SECONDS, REQUIRED]
    gpus: Annotated[int, GPUS, REQUIRED]
    max_rss: Annotated[int | None, reports.BYTES]
    steps: Annotated[int, reports.COUNT]
    gpu_tres_max: Usage
    gpu_tres_tot: Usage


def check(result: object) -> str | None:
    """A worker's result the bot can use: {"records": [...]} or {"error": "..."}."""
    if not isinstance(result, dict):
        return "`result` must be a JSON object"
    if "error" in result:
        return None if isinstance(result["error"], str) else "`result.error` must be a string"
    if not isinstance(result.get("records"), list):
        return "`result.records` must be a list of sacct records (or give `result.error`)"
    problems = shape.problems(result["records"], Annotated[list[Record], Most(10000)],
                              "result.records")
    if problems:
        return (f"{problems[0]} (a sacct record is {{job_id, state, elapsed_s, gpus, max_rss, "
                "gpu_tres_max, gpu_tres_tot}})")
    return None


def mine(records: list[Json], job_id: str) -> list[Json]:
    """The records of one asked-for id: the job, or every task of an array job."""
    return [r for r in records if r["job_id"] == job_id
            or ("_" not in job_id and r["job_id"].startswith(job_id + "_"))]


def outcome(req: Json, result: Json) -> tuple[Json | None, str]:
    """(the actual to record or None, the channel's message) for a request
    {plan, block, jobs, runs, note, user} and a worker's result."""
    values = dict(plan=req["plan"], block=req["block"], jobs=", ".join(req["jobs"]),
                  user=f"<@{req['user']}>")
    nothing = _("Nothing was recorded (asked by {user}).", **values)
    if "error" in result:
        return None, ":x: " + _("Slurm accounting for *{plan}* {block} (jobs {jobs}): the Slurm "
                                "worker could not read it: {error}.", error=result["error"],
                                **values) + f" {nothing}"
    records = result["records"]
    unknown = [j for j in req["jobs"] if not mine(records, j)]
    if unknown:
        return None, ":x: " + _("Slurm accounting for *{plan}* {block} (jobs {jobs}): sacct does "
                                "not know job {unknown} (a typo, another cluster, or purged from "
                                "the accounting database).", unknown=", ".join(unknown),
                                **values) + f" {nothing}"
    jobs = [r for j in req["jobs"] for r in mine(records, j)]
    jobs = list({r["job_id"]: r for r in jobs}.values())  # an id given as job and as task
    running = [f"{r['job_id']} ({r['state']})" for r in jobs if r["state"] in NOT_ENDED]
    if running:
        return None, (":hourglass: " + _("Slurm accounting for *{plan}* {block} (jobs {jobs}): "
                                         "job {running} has not ended, so its Elapsed is still "
                                         "growing.", running=", ".join(running), **values)
                      + f" {nothing} " + _("Ask again when it has ended."))
    gpu = any(r["gpus"] for r in jobs)
    weight = (lambda r: r["gpus"]) if gpu else (lambda r: 1)
    total = sum(r["elapsed_s"] * weight(r) for r in jobs)
    failed = sum(r["elapsed_s"] * weight(r) for r in jobs if r["state"] != "COMPLETED")
    if total <= 0:
        return None, ":x: " + _("Slurm accounting for *{plan}* {block} (jobs {jobs}): the jobs ran "
                                "0 GPU-seconds by Slurm's accounting ({states}): nothing to "
                                "compare.", states=_states(jobs), **values) + f" {nothing}"
    unit = "GPU-h" if gpu else "node-h"
    summary = summary_text(jobs, gpu)
    note = summary + (f"; {req['note']}" if req.get("note") else "")
    actual = {"plan": req["plan"], "block": req["block"], "hours": total / 3600,
              "parts": {"retries": failed / 3600} if failed else {}, "runs": req.get("runs"),
              "note": note, "user": req["user"]}
    values.update(hours=f"{total / 3600:.4g}", unit=unit, summary=summary,
                  failed=f"{failed / 3600:.4g}")
    text = ":white_check_mark: " + (
        _("Recorded for *{plan}* {block}: {hours} {unit} actual ({failed} of it in jobs that did "
          "not complete, counted as retries), from {summary}. `/plan {plan} review` compares it "
          "with the estimate (asked by {user}).", **values) if failed else
        _("Recorded for *{plan}* {block}: {hours} {unit} actual, from {summary}. `/plan {plan} "
          "review` compares it with the estimate (asked by {user}).", **values))
    return actual, text


def summary_text(jobs: list[Json], gpu: bool) -> str:
    """What the actual rests on, kept as its note: "Slurm accounting: jobs …,
    Elapsed …, MaxRSS max …, GPU TRES …"."""
    each = ", ".join(f"{r['job_id']} {r['state']} {_elapsed(r['elapsed_s'])} × "
                     f"{r['gpus']} GPU" for r in jobs[:SHOWN])
    if len(jobs) > SHOWN:  # a Slack section holds 3,000 characters
        each += f" and {len(jobs) - SHOWN} more"
    rss = [r for r in jobs if r.get("max_rss") is not None]
    top = max(rss, key=lambda r: r["max_rss"]) if rss else None
    out = f"Slurm accounting: jobs {each}"
    out += (f"; Elapsed {_elapsed(sum(r['elapsed_s'] for r in jobs))} in all")
    out += (f"; MaxRSS max {size(top['max_rss'])} ({top.get('max_rss_step') or top['job_id']})"
            if top else "; MaxRSS not recorded (no job step was gathered)")
    mem = [r["gpu_tres_max"]["gpumem"] for r in jobs if "gpumem" in r.get("gpu_tres_max", {})]
    util = [r["gpu_tres_max"]["gpuutil"] for r in jobs if "gpuutil" in r.get("gpu_tres_max", {})]
    if mem or util:
        out += "; GPU TRES usage: " + ", ".join(
            ([f"gres/gpumem max {size(max(mem))}"] if mem else [])
            + ([f"gres/gpuutil max {max(util):g}%"] if util else []))
    else:
        out += "; GPU TRES usage not gathered (no gres/gpumem, gres/gpuutil)"
    if not gpu:
        out += ("; no job allocated a GPU (no gres/gpu in AllocTRES: a CPU partition, or "
                "gres/gpu not in AccountingStorageTRES), so counted as node-hours, Elapsed × 1")
    return out


def _states(jobs: list[Json]) -> str:
    return ", ".join(f"{r['job_id']} {r['state']}" for r in jobs)


def _elapsed(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"
