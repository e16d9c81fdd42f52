"""Which device a block's hours are for (docs/plans-and-advice.md, "The target
GPU"). Pure.

The rule: a trial ran on the plan's target when `bot.fits.gpus.matches_gpu`
says so, the one rule that also routes trials and keeps tagged trials apart
(a table name matches the part the worker reported, H100-80GB is "NVIDIA
H100 PCIe"; `gpu=cpu` matches a CPU-only box). A block whose trials ran
elsewhere still sizes memory, but its time is not the target's: it is shown
apart and left out of the plan's total and cost, and the plan names the short
trial on the target that is still missing (advice rule 1).
"""
from __future__ import annotations

from bot import figures
from bot.fits import gpus
from bot.plans.measured import env_kind
from bot.states import Json
from worker.i18n import _


def off_target(target: str | None, reports: list[Json]) -> str | None:
    """The device the block's trials ran on (env_kind) when it is not the plan's
    target; None on the target or with no target set."""
    off = [r for r in reports if gpus.matches_gpu(r, target) is False]
    return env_kind(off[0]) if off else None


def trial_words(config: Json, target: str) -> str:
    """`/trial …` words that measure the block's config on the target: the
    config the block is for (a partial-depth or swept block's full config),
    routed to the target. A CPU target takes no gpu= (`gpu=any` may still land
    on a GPU worker, so the words say nothing and the user picks the worker)."""
    params = {k: v for k, v in config.items() if k not in ("workload", "recipe")
              and v is not None}
    head = (f"/trial recipe {config['recipe']}" if config.get("recipe")
            else f"/trial {config['workload']}")
    words = [head, *(f"{k}={_value(v)}" for k, v in params.items())]
    if target.lower() not in ("cpu", "none"):
        words.append(f"gpu={target}")
    return " ".join(words)


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def missing_trial(plan: str, est: Json, target: str) -> str:
    """What the plan still lacks for a block measured off the target: a short
    trial on it, as words to paste, and how to re-add the block."""
    return _("still missing: a short trial on {target}, `{words}`, then `/plan {plan} block "
             "{kind} runs={runs} trial=T..` with it", target=target,
             words=trial_words(est["config"], target), plan=plan, kind=est["kind"],
             runs=est["runs"])


def apart_text(est: Json, target: str | None) -> str:
    """How an off-target block's time is shown: measured, but not a target time."""
    return _("measured on {env}: not a time on {target}, left out of the total and the cost",
             env=est["off_target"], target=target)


def same_device(a: Json, b: Json) -> bool:
    """Did two trials run on the same kind of device: both on the CPU (the same
    model), or both on GPUs that the GPU table (or their reported names) call
    one kind, in the same count."""
    ea, eb = a.get("env") or {}, b.get("env") or {}
    if not ea.get("gpu_count") or not eb.get("gpu_count"):
        return not ea.get("gpu_count") and not eb.get("gpu_count") and ea.get("cpu") == eb.get(
            "cpu")
    if ea["gpu_count"] != eb["gpu_count"]:
        return False
    ga = gpus.identify(ea.get("gpu_name"), ea.get("gpu_memory"))
    gb = gpus.identify(eb.get("gpu_name"), eb.get("gpu_memory"))
    if ga is not None and gb is not None:
        return ga == gb
    return ea.get("gpu_name") == eb.get("gpu_name")


def across(est: Json, target: str | None, row: Json) -> str | None:
    """Why a block's actual is not compared with its estimate, or None: with a
    target set, recorded actuals and counted tagged trials are hours on the
    target, and an estimate measured on another device is not such an hour."""
    if not est.get("off_target") or row.get("actual") is None:
        return None
    return _("actual {actual} GPU-h on {target} from {sources}, not compared: the estimate is "
             "a time on {env} (from {trials}); an estimate and an actual are compared only on "
             "the same device, so this pair stays out of the review's verdict and the "
             "calibration until the block rests on a trial on {target}",
             actual=figures.gpu_hours(row["actual"]), target=target,
             sources=", ".join(row["sources"]), env=est["off_target"],
             trials=", ".join(est["trials"]))


def other_device(job: Json, basis: Json) -> str | None:
    """Why a tagged trial is not the block's actual when the plan has no target:
    it ran on another device than the block's estimate (`basis`, one of its trials)."""
    r = job.get("report")
    if not r or same_device(r, basis):
        return None
    return _("another device: ran on {env}, the estimate's trials on {basis}", env=env_kind(r),
             basis=env_kind(basis))
