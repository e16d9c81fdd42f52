"""Trials tagged as a plan block's actual (`/trial ... plan=NAME block=KIND`)
that do not measure what the block's actual is: run off the plan's target
GPU (`gpu=any`), or at a config other than the lock's. They are kept as
evidence and shown apart, not pooled into the block's actual. Pure but for
`queue_notes`, which reads the plan from the store."""
from __future__ import annotations

from bot.context import Context
from bot.fits import gpus
from bot.plans import estimate, footing
from bot.states import Json
from worker.i18n import _


def why(plan: Json, job: Json, basis: Json | None = None) -> str | None:
    """Why a tagged trial is kept out of its block's actual, or None. `basis`,
    a report the block's estimate rests on: with no target set, a trial on
    another device than it is kept out too."""
    r = job.get("report")
    if not r:
        return None
    target = plan["facts"].get("gpu")
    if not target and basis is not None and footing.other_device(job, basis):
        return footing.other_device(job, basis)
    if gpus.matches_gpu(r, target) is False:
        values = dict(env=estimate.env_kind(r), target=target)
        if ((job.get("spec") or {}).get("route") or {}).get("anywhere"):
            return _("off target: ran on {env}, not {target} (queued with gpu=any)", **values)
        return _("off target: ran on {env}, not {target}", **values)
    lock = (plan.get("locked") or {}).get(job["block"])
    if lock:
        diff = estimate.lock_differences(lock, estimate.config(r), estimate.code_version(r))
        if diff:
            return _("not comparable with the locked plan: {differences}",
                     differences="; ".join(diff))
    return None


def split(plan: Json, jobs: list[Json], basis: Json | None = None
          ) -> tuple[list[Json], list[str]]:
    """(the trials that count, a line per trial kept apart)."""
    counted, kept = [], []
    for j in jobs:
        why_not = why(plan, j, basis)
        if why_not:
            kept.append(f"{j['trial']}: {why_not}")
        else:
            counted.append(j)
    return counted, kept


def spec_differences(lock: Json, spec: Json) -> list[str]:
    """How a queued spec differs from the lock's config, on the keys both name
    (a report adds the defaults a spec may leave out; its code version is
    known only when it has run)."""
    want = estimate.config({"workload": spec["workload"], "params": spec.get("params") or {},
                            "recipe": spec.get("recipe")})
    common = [k for k in lock["config"] if k in want]
    return estimate.differences({k: lock["config"][k] for k in common},
                                {k: want[k] for k in common})


def queue_notes(ctx: Context, tags: Json, specs: list[Json], route: Json) -> list[str]:
    """What the queue reply says of a tagged trial that will not count as the
    block's on-target, comparable actual."""
    plan = ctx.store.plan(tags["plan"])
    if plan is None:
        return []
    name, kind, target = plan["name"], tags["block"], plan["facts"].get("gpu")
    out = []
    if route.get("anywhere") and target:
        out.append(_("gpu=any: this trial may run on any worker, off plan {plan}'s target "
                     "{target}. Measured off the target, it is kept as evidence in the {kind} "
                     "block but left out of its actual and its cost; `/plan {plan} review` "
                     "shows it apart.", plan=name, target=target, kind=kind))
    lock = (plan["locked"] or {}).get(kind)
    diffs = sorted({d for s in specs for d in (spec_differences(lock, s) if lock else [])})
    if diffs:
        out.append(_("Not comparable with plan {plan}'s lock of {at} ({differences}): it runs, "
                     "but the {kind} block's actual leaves it out and `/plan {plan} review` "
                     "shows it apart. Run it at the locked config to count it, or `/plan {plan} "
                     "unlock` to change the plan.", plan=name, at=plan["locked"]["at"],
                     differences="; ".join(diffs), kind=kind))
    return out
