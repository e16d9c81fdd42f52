"""A block's estimate against what it really took, and why they differ:
more or fewer runs, slower or faster runs, longer prep or waiting, more
retries (docs/design.md §3, "Review"). Pure: the handler passes in the
tagged trials, their attempts and the recorded actuals."""
from __future__ import annotations

from bot.plans.estimate import (
    code_version,
    config,
    data_seconds,
    differences,
    lock_differences,
    prep_seconds,
    run_seconds,
    unit_kind,
)
from bot.states import Json
from worker.i18n import N_, _


def actual_of_job(job: Json, attempts: list[Json], gpus: int) -> Json:
    """A tagged trial's measured GPU-seconds, split like an estimate. A failed
    or cancelled trial ran no successful run: all its time is retries."""
    r = job["report"] or {}
    failed = sum(a["seconds"] or 0 for a in attempts if a["status"] != "ok")
    if r.get("status") != "ok":
        return {"prep": 0.0, "data": 0.0, "runs": 0.0, "retries": failed * gpus, "count": 0}
    count = (1 if unit_kind(r) == "program" else (r.get("latency") or {}).get("count") or 1)
    return {"prep": prep_seconds(r) * gpus, "data": data_seconds(r) * gpus,
            "runs": run_seconds(r) * gpus, "retries": failed * gpus, "count": count}


def _label(delta: float, more: str, fewer: str, same: str) -> str:
    """The cause's name (each marked N_ where it is written), translated."""
    return _(more if delta > 0 else fewer if delta < 0 else same)


def review_block(estimate: Json, jobs: list[Json], attempts: dict[int, list[Json]],
                 manual: list[Json], locked: Json | None) -> Json:
    """Estimate against actual for one block, and why they differ (GPU-seconds
    inside; hours out)."""
    acc: Json = {"parts": {k: 0.0 for k in ("prep", "data", "runs", "retries")}, "idle": None,
           "run_count": 0, "counted": True, "sources": [], "config_changes": [],
           "not_comparable": []}
    _add_jobs(acc, estimate, jobs, attempts, (locked or {}).get(estimate["kind"]))
    _add_manual(acc, manual)
    if not acc["sources"]:
        return {"kind": estimate["kind"], "actual": None}
    parts, idle = acc["parts"], acc["idle"]
    est = {c["name"]: c["seconds"] for c in estimate["components"]}
    why = _why(estimate, est, acc)
    actual = sum(parts.values()) + (idle or 0.0)
    # The estimate as `show` prints it (its exact total), idle left out on both
    # sides when the actuals do not give it.
    estimated = (float(estimate["hours"]) if idle is not None or not est["idle"]
                 else (sum(est.values()) - est["idle"]) / 3600)
    # Per component, both sides alike (idle only where the actual gives it): the
    # calibration's ratios and its worst miss's cause.
    est_parts = {k: v for k, v in est.items() if k != "idle" or idle is not None}
    act_parts = dict(parts, **({"idle": idle} if idle is not None else {}))
    return {"kind": estimate["kind"], "estimate": estimated, "actual": actual / 3600,
            "why": [(name, v / 3600, note) for name, v, note in why],
            "sources": acc["sources"], "runs_done": acc["run_count"],
            "config_changes": acc["config_changes"],
            "not_comparable": acc["not_comparable"], "idle_compared": idle is not None,
            "estimate_parts": est_parts,
            "actual_parts": act_parts}


def _add_jobs(acc: Json, estimate: Json, jobs: list[Json], attempts: dict[int, list[Json]],
              lock: Json | None) -> None:
    """The tagged trials' time, runs and config changes into `acc`."""
    for job in jobs:
        a = actual_of_job(job, attempts.get(job["id"], []), estimate["gpus"])
        for k in acc["parts"]:
            acc["parts"][k] += a[k]
        acc["run_count"] += a["count"]
        acc["sources"].append(job["trial"])
        if job.get("report"):
            diff = differences(estimate["config"], config(job["report"]))
            if diff:
                acc["config_changes"].append(f"{job['trial']}: {'; '.join(diff)}")
            if lock and lock_differences(lock, config(job["report"]),
                                         code_version(job["report"])):
                acc["not_comparable"].append(job["trial"])


def _add_manual(acc: Json, manual: list[Json]) -> None:
    """The recorded actuals (manual or Slurm's accounting) into `acc`."""
    parts = acc["parts"]
    for m in manual:
        extra = m["parts"]
        for k in ("prep", "data", "retries"):
            parts[k] += extra.get(k, 0.0) * 3600
        if "idle" in extra:
            acc["idle"] = (acc["idle"] or 0.0) + extra["idle"] * 3600
        parts["runs"] += (m["hours"] - sum(extra.values())) * 3600
        if m.get("runs"):
            acc["run_count"] += m["runs"]
        else:
            acc["counted"] = False
        if m.get("slurm"):  # read from Slurm's accounting by a Slurm worker
            acc["sources"].append(m["note"])  # "Slurm accounting: jobs …, Elapsed …, MaxRSS …"
        else:
            acc["sources"].append(_("manual #{id} ({note})", id=m["id"], note=m["note"])
                                  if m.get("note") else _("manual #{id}", id=m["id"]))


def _why(estimate: Json, est: Json, acc: Json) -> list[tuple[str, float, str]]:
    """The causes of the difference, in GPU-seconds: (name, seconds, note)."""
    parts, idle, run_count = acc["parts"], acc["idle"], acc["run_count"]
    why = []
    d_runs = parts["runs"] - est["runs"]
    planned = estimate["runs"] * estimate["configs"]
    if acc["counted"] and run_count:
        count_part = (run_count - planned) * estimate["per_run"] * estimate["gpus"]
        why.append((_label(count_part, N_("more runs"), N_("fewer runs"), N_("runs as planned")),
                    count_part, _("{done} runs done, {planned} planned", done=run_count,
                                  planned=planned)))
        why.append((_label(d_runs - count_part, N_("slower runs"), N_("faster runs"),
                           N_("runs as fast")), d_runs - count_part,
                    _("{measured} s per run measured, {estimated} s estimated",
                      measured=f"{parts['runs'] / run_count / estimate['gpus']:.4g}",
                      estimated=f"{estimate['per_run']:.4g}")))
    else:
        why.append((_("runs"), d_runs, _("run count not recorded: slower runs and more runs "
                                         "cannot be told apart (give runs=N with the actual)")))
    waiting = parts["prep"] + parts["data"] - est["prep"] - est["data"]
    if idle is not None:
        waiting += idle - est["idle"]
        what = "prep + data + idle"
    else:
        what = _("prep + data; idle not measured in the actuals (give idle=H with `/plan NAME "
                 "actual`)")
    why.append((_label(waiting, N_("longer prep or waiting"), N_("shorter prep or waiting"),
                       N_("prep and waiting as estimated")), waiting, what))
    d_retry = parts["retries"] - est["retries"]
    why.append((_label(d_retry, N_("more retries"), N_("fewer retries"),
                       N_("retries as estimated")),
                d_retry, _("failed attempts' and cancelled trials' time")))
    return why


MEMORY_METHODS = (("peak_allocated", N_("torch allocator peak allocated")),
                  ("process_used_peak", N_("NVML per-process used peak")),
                  ("host_rss_peak", N_("host RSS peak of the child tree")))


def memory_compare(estimate_reports: list[Json], actual_reports: list[Json]) -> list[str]:
    """Peak memory, estimate trial against actual, only where both sides were
    measured by the same method."""
    out = []
    for field, label in MEMORY_METHODS:
        est = [r["memory"].get(field) for r in estimate_reports if r["memory"].get(field)]
        act = [r["memory"].get(field) for r in actual_reports if r["memory"].get(field)]
        if est and act:
            e, a = max(est), max(act)
            out.append(_("{method}: {estimate} GiB in the estimate's trial, {actual} GiB in the "
                         "actual ({change})", method=_(label), estimate=f"{e / 2**30:.3f}",
                         actual=f"{a / 2**30:.3f}", change=f"{(a - e) / e:+.1%}"))
    return out


def latest_per_source(manual: list[Json]) -> list[Json]:
    """The block's recorded actuals, a Slurm actual of the same jobs asked again
    counted once (the latest): the jobs ran once."""
    seen, out = set(), []
    for m in reversed(manual):  # newest first
        key = tuple(m["slurm"]) if m.get("slurm") else ("id", m.get("id"))
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out[::-1]
