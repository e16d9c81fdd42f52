"""The registered workers: which can run a trial, which are online, which
declared which recipes. Read from the store's `workers` rows; pure besides."""
from __future__ import annotations

import functools
import json
import time

from bot.ports import WorkerRoster
from bot.states import Json
from bot.trials import routing
from worker.api import Workload, models, presets, specs
from worker.i18n import _

ONLINE_SECONDS = 90  # a worker seen within this is "online"


def can_run(info: Json, spec: Json) -> bool:
    """A recipe goes only to a worker whose file has it, and a CUDA recipe only
    to a worker with an NVIDIA GPU (a cloud Mac is not a CUDA box); a training
    run of `world` ranks only to a worker with a GPU per rank (or, on CPU,
    a core per rank where the worker said how many it has); and any trial only
    where its route (`gpu=`, `min_mem=`, `label=`) matches."""
    if not routing.matches(info, spec.get("route")):
        return False
    if spec.get("workload") in specs.HF and hf_lacks(info, spec.get("params", {})):
        return False
    if spec.get("recipe") is None:
        return fits_ranks(info, spec.get("params", {}))
    recipe = next((r for r in info.get("recipes", []) if r["name"] == spec["recipe"]), None)
    cuda = info.get("device") == "cuda" or (info.get("device") is None and bool(info.get("gpus")))
    return recipe is not None and (recipe.get("requires") != "cuda" or cuda)


RANK_PARAMS = ("world", "device")        # what fits_ranks reads
HF_PARAMS = ("attn", "model", "layers")   # what hf_lacks reads


def needs(spec: Json) -> Json:
    """What of `spec` decides where it may run: exactly what can_run reads, so
    `can_run(info, needs(spec)) == can_run(info, spec)` for every worker, and
    trials that differ only in batch, length or steps share one class (the
    store leases by class, bot/store/leasing.py)."""
    params = spec.get("params") or {}
    out: Json = {"route": spec["route"]} if spec.get("route") else {}
    kept = {}
    if spec.get("workload") in specs.HF:
        out["workload"] = spec["workload"]
        kept = {k: params[k] for k in HF_PARAMS if k in params}
    if spec.get("recipe") is not None:
        out["recipe"] = spec["recipe"]
    elif params.get("world", 1) > 1:  # one rank fits anywhere
        kept.update({k: params[k] for k in RANK_PARAMS if k in params})
    return dict(out, params=kept) if kept else out


def needs_key(spec: Json) -> str:
    """needs(spec) as canonical JSON: equal needs, equal keys."""
    return json.dumps(needs(spec), sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def runs(info_key: str, needs_key: str) -> bool:
    """can_run on a worker's info and a class's needs, both as canonical JSON:
    asked once per worker and class, however many trials the class holds."""
    return can_run(json.loads(info_key), json.loads(needs_key))


def info_key(info: Json) -> str:
    """A worker's info as canonical JSON, for runs()."""
    return json.dumps(info, sort_keys=True, separators=(",", ":"))


def hf_lacks(info: Json, params: Json) -> str | None:
    """Why a worker with `info` cannot run an hf-* trial (None: it can): what
    it registered of transformers, flash-attn, its configs and the hub."""
    hf = info.get("hf") or {}
    if not hf.get("transformers"):
        return _("has no transformers (`pip install 'trialbot[hf]'` on the worker)")
    if params.get("attn") == "flash_attention_2":
        if not hf.get("flash_attn"):
            return _("has no flash-attn (attn=flash_attention_2)")
        if info.get("device") != "cuda":
            return _("has no CUDA GPU (attn=flash_attention_2 runs on CUDA only)")
    model = params.get("model", "none")
    if presets.get(model):
        return None
    known = (hf.get("models") or {}).get(model)
    if known and known.get("error"):
        return _("cannot build `model={model}`: {error}", model=model, error=known["error"])
    if known:
        why = _attn_lacks(info, model, params.get("attn"), known.get("attn"))
        if why:
            return why
        depth = known.get("layers")
        if depth and params.get("layers", 0) > depth:
            return _("has `model={model}` with {depth} layers (layers={layers} asked)",
                     model=model, depth=depth, layers=params["layers"])
        return None
    if models.is_hub_id(model):
        return None if hf.get("hub") else _("may not fetch `model={model}` from the hub (--hub)",
                                            model=model)
    return _("has no config named `model={model}` (--models DIR)", model=model)


def _attn_lacks(info: Json, model: str, attn: str | None, works: list[str] | None) -> str | None:
    """Why `attn` cannot build `model` (its class, as transformers says, does
    not support it), naming what can on this worker; None when it can or the
    worker did not say (an older worker)."""
    if not works or attn is None or attn in works:
        return None
    hf = info.get("hf") or {}
    here = [a for a in works if a != "flash_attention_2"
            or (hf.get("flash_attn") and info.get("device") == "cuda")] or works
    return _("cannot run `model={model}` with attn={attn}: its transformers class does not "
             "support it; use attn={works}", model=model, attn=attn,
             works=", attn=".join(here))  # a list, not English "or": read in every language


def hf_refusal(params: Json, workload: str, registered: list[Json]) -> str | None:
    """Why no registered worker can run this hf-* trial, in words that say how
    to fix it; None when one can."""
    reasons = [(w["name"], hf_lacks(w["info"], params)) for w in registered]
    if any(why is None for _name, why in reasons):
        return None
    names = sorted({n for w in registered for n, m in ((w["info"].get("hf") or {})
                                                        .get("models") or {}).items()
                     if not m.get("error")})
    # "{worker} {why}": each why is what the worker has or lacks
    listed = "; ".join(_("{worker} {why}", worker=name, why=why) for name, why in reasons)
    values = {"workload": workload, "listed": listed, "presets": presets.known()}
    if names:
        return _("No worker can run this {workload} trial: {listed}. Models any worker can "
                 "build: the presets ({presets}) and {names}. Name one of those, or give a "
                 "worker the config (`trialbot-worker --models DIR`), the hub (`--hub`) or the "
                 "package it lacks.", names=", ".join(names), **values)
    return _("No worker can run this {workload} trial: {listed}. Models any worker can build: "
             "the presets ({presets}). Name one of those, or give a worker the config "
             "(`trialbot-worker --models DIR`), the hub (`--hub`) or the package it lacks.",
             **values)


def fits_ranks(info: Json, params: Json) -> bool:
    world: int = params.get("world", 1)
    if world <= 1:
        return True
    gpus, cpus = len(info.get("gpus") or []), info.get("cpus")
    device = params.get("device", "auto")
    if device == "cuda" or (device == "auto" and gpus):
        return gpus >= world
    return cpus is None or cpus >= world


def recipes_of(workers: list[Json]) -> dict[str, Workload]:
    """The recipes these workers declared from their recipe files, by name."""
    out: dict[str, Workload] = {}
    for w in workers:
        for d in w["info"].get("recipes", []):
            out.setdefault(d["name"], Workload.from_dict(d))
    return out


def online(store: WorkerRoster) -> list[str]:
    return [w["name"] for w in store.workers(seen_within=ONLINE_SECONDS)]


def online_for(registered: list[Json], spec: Json, now: float | None = None) -> list[str]:
    """Of the registered workers (store.workers(), read once by the command),
    those online that could run `spec`."""
    since = (time.time() if now is None else now) - ONLINE_SECONDS
    return [w["name"] for w in registered
            if (w["last_seen"] or 0) >= since and can_run(w["info"], spec)]


def offline_for(registered: list[Json], spec: Json, now: float | None = None) -> list[Json]:
    """Of the registered workers (store.workers()), those that could run a
    routed `spec`, when all of them are offline: the trial waits for them. []
    when one is online, or when `spec` is not routed (any worker that comes
    will do)."""
    if not routing.routed(spec.get("route")):
        return []
    since = (time.time() if now is None else now) - ONLINE_SECONDS
    able = [w for w in registered if can_run(w["info"], spec)]
    return [] if any((w["last_seen"] or 0) >= since for w in able) else able


def known(store: WorkerRoster, worker: str) -> bool:
    return any(w["name"] == worker for w in store.workers())


def slurm(store: WorkerRoster) -> list[Json]:
    """Registered workers that submit to Slurm: they can run sacct for the bot."""
    return [w for w in store.workers() if w["info"].get("executor") == "slurm"]
