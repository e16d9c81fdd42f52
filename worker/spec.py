"""Parsing of `/trial` words into a TrialSpec, against the workloads and their
parameters of worker/catalog.py (re-exported here).

Pure and torch-free: the bot validates a request with this module before it
creates a job, and the worker parses `trialbot-worker trial ...` with it, so
both sides accept exactly the same words.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from worker import presets
from worker.catalog import (  # the workloads' table: read through this module too
    COMMON,
    HF,
    LIVE_TIME_NOTE,
    LLM_INFER,
    LLM_TRAIN,
    MAX_PROCESSES,
    WORKLOADS,
    Param,
    SpecError,
    Workload,
    live_time_note,
)

__all__ = [
    "COMMON", "HF", "LIVE_TIME_NOTE", "LLM_INFER", "LLM_TRAIN", "MAX_PROCESSES", "Param",
    "SpecError", "TrialSpec", "WORKLOADS", "Workload", "check_params", "general_usage",
    "live_time_note", "no_parameter", "parse", "resolve"]
from worker.i18n import _, did_you_mean, sentences


@dataclass(frozen=True)
class TrialSpec:
    workload: str  # a built-in workload's name, or "recipe"
    params: dict = field(default_factory=dict)
    recipe: str | None = None

    def words(self) -> str:
        """The canonical words that reproduce this spec."""
        head = ["recipe", self.recipe] if self.recipe else [self.workload]
        return " ".join(head + [f"{k}={v}" for k, v in self.params.items()])

    def to_dict(self) -> dict:
        d = {"workload": self.workload, "params": dict(self.params)}
        if self.recipe:
            d["recipe"] = self.recipe
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrialSpec:
        return cls(d["workload"], dict(d["params"]), d.get("recipe"))


def general_usage() -> str:
    names = "|".join([*WORKLOADS, "recipe NAME"])
    return (f"/trial <{names}> key=value ...  |  /trial help  |  /trial status T12  |  "
            "/trial cancel T12  |  /trial list [mine|running|failed]  |  /trial workers")


def parse(words: list[str], recipes: dict[str, Workload] | None = None) -> TrialSpec:
    """Parse `llm-infer batch=4 ...` or `recipe NAME key=value ...` into a
    TrialSpec with every parameter resolved. `recipes` are the ones a worker's
    recipe file allows; anything else is refused."""
    if not words:
        raise SpecError("", _("Name a workload to run."), general_usage())
    if words[0] == "recipe":
        return _parse_recipe(words[1:], recipes or {})
    name, rest = words[0], words[1:]
    workload = WORKLOADS.get(name)
    if workload is None:
        raise SpecError(name, sentences(
            _("`{name}` is not a workload.", name=name), did_you_mean(name, WORKLOADS),
            _("Known workloads: {known} (or `recipe NAME`)", known=", ".join(WORKLOADS))),
            general_usage())
    params, given = _parse_given(workload, rest)
    if workload.name in HF:
        _check_hf(params, given, workload)
        return TrialSpec(workload.name, params)
    _apply_preset(params, given, workload.usage())
    # malloc=auto stays auto, partial depth included: the worker splits it into
    # a live memory pass (host RSS that extrapolates by layer) and a glibc time
    # pass (worker/launcher/passes.py), so no time pays live's page faults.
    _check_shape(params, workload.usage())
    if workload is LLM_TRAIN:
        _check_ranks(params, workload.usage())
    _check_retry(workload, params)
    return TrialSpec(workload.name, params)


def _check_hf(p: dict, given: dict, workload: Workload) -> None:
    """What can be checked without the worker: a model is named, a preset's depth,
    the batch against the scenario and the ranks. The worker checks the rest."""
    usage = workload.usage()
    if p["model"] == "none":
        raise SpecError("model", _("{workload} needs model=: a preset ({presets}), a config in "
                                   "the worker's --models directory, or a hub id org/name",
                                   workload=workload.name, presets=presets.known()), usage)
    preset = presets.get(p["model"])
    if preset and p["layers"] > preset.layers:
        raise SpecError(given.get("layers", "layers"),
                        _("`layers={layers}`: {preset} has {depth} layers; use layers=1..{depth} "
                          "(0: all of them)", layers=p["layers"], preset=preset.name,
                          depth=preset.layers), usage)
    _check_scenario(p, usage)
    if workload.name == "hf-train":
        _check_ranks(p, usage)
    _check_retry(workload, p)


def _check_ranks(p: dict, usage: str) -> None:
    if p["zero"] and p["world"] == 1:
        raise SpecError("zero=1", _("`zero=1`: ZeRO-1 shards optimizer states over ranks and "
                                    "world=1 has one; add world=2 (or more)"), usage)
    if p["batch"] % p["world"]:
        raise SpecError(f"batch={p['batch']}", _("`batch={batch}`: the batch is split over "
                                                 "world={world} ranks and must divide evenly",
                                                 batch=p["batch"], world=p["world"]), usage)


def check_params(workload: Workload, params: dict) -> None:
    """Re-check resolved values (e.g. a leased job's) against the workload's own
    parameters: the worker trusts its recipe file, not the request."""
    usage = workload.usage()
    for key, value in params.items():
        param = workload.param(key)
        if param is None:
            raise SpecError(key, _("`{key}`: {workload} has no parameter `{key}`", key=key,
                                   workload=workload.name), usage)
        param.parse(str(value), usage)


def _check_retry(workload: Workload, params: dict) -> None:
    batch = workload.param("batch")
    if params.get("on_oom") == "halve-batch" and (batch is None or batch.kind != "int"):
        raise SpecError("on_oom=halve-batch", _("`on_oom=halve-batch`: {workload} has no "
                                                "integer `batch` parameter to halve; use "
                                                "on_oom=fail", workload=workload.name),
                        workload.usage())


def _parse_recipe(words: list[str], recipes: dict[str, Workload]) -> TrialSpec:
    known = ", ".join(sorted(recipes)) or _("none: no worker has a recipe file")
    if not words:
        raise SpecError("recipe", _("Name a recipe: `/trial recipe NAME key=value ...`; "
                                    "recipes: {known}", known=known), general_usage())
    workload = recipes.get(words[0])
    if workload is None:
        raise SpecError(words[0], _("`{name}` is not a recipe on any worker; only recipes in a "
                                    "worker's recipe file can run. Recipes: {known}",
                                    name=words[0], known=known), general_usage())
    params = _parse_params(workload, words[1:])
    _check_retry(workload, params)
    return TrialSpec("recipe", params, recipe=workload.name)


def _parse_params(workload: Workload, rest: list[str]) -> dict:
    return _parse_given(workload, rest)[0]


def _parse_given(workload: Workload, rest: list[str]) -> tuple[dict, dict]:
    """Every parameter resolved, and those the words gave, as raw words."""
    usage = workload.usage()
    words: dict = {}
    values: dict = {}
    for word in rest:
        key, eq, raw = word.partition("=")
        if not eq or not key or not raw:
            raise SpecError(word, _("`{word}`: parameters are written key=value, e.g. "
                                    "batch=4", word=word), usage)
        param = workload.param(key)
        if param is None:
            raise no_parameter(word, workload, usage)
        if key in values:
            raise SpecError(word, _("`{word}`: {key} is given twice", word=word, key=key),
                            usage)
        values[key] = param.parse(raw, usage)
        words[key] = word
    return {p.name: values.get(p.name, p.default) for p in workload.params}, words


def no_parameter(word: str, workload: Workload, usage: str) -> SpecError:
    """`bacth=2`: the workload has no such parameter; the one it is a slip of, and all."""
    key, _eq, raw = word.partition("=")
    names = [p.name for p in workload.params]
    return SpecError(word, sentences(
        _("`{word}`: {workload} has no parameter `{key}`.", word=word, workload=workload.name,
          key=key),
        did_you_mean(key, names, after=f"={raw}"),
        _("It takes {names}", names=", ".join(names))), usage)


def _apply_preset(p: dict, given: dict, usage: str) -> None:
    """Fill the shape from `preset=`. A shape word with the preset's own value
    is accepted (a spec's canonical words give it), any other value refused."""
    preset = presets.get(p.get("preset", "none"))
    if preset is None:
        return
    for key, value in preset.shape().items():
        if key in given and p[key] != value:
            raise SpecError(given[key], _("`{word}`: preset={preset} sets {key}={value}; drop "
                                          "{key}= to use the preset, or drop preset= and give "
                                          "the whole shape", word=given[key],
                                          preset=preset.name, key=key, value=value), usage)
        p[key] = value
    if p["layers"] > preset.layers:
        raise SpecError(given.get("layers", f"layers={p['layers']}"),
                        _("`layers={layers}`: {preset} has {depth} layers; use "
                          "layers=1..{depth} (the report gives the full depth's arithmetic)",
                          layers=p["layers"], preset=preset.name, depth=preset.layers), usage)


def _check_shape(p: dict, usage: str) -> None:
    """Constraints between parameters that make the model impossible to build."""
    if p["hidden"] % p["heads"]:
        raise SpecError(f"heads={p['heads']}", _("`heads={heads}`: hidden={hidden} must divide "
                                                 "evenly into heads (hidden/heads is the head "
                                                 "size; {hidden}/{heads} is not whole)",
                                                 heads=p["heads"], hidden=p["hidden"]), usage)
    if p["kv_heads"] > p["heads"] or p["heads"] % p["kv_heads"]:
        raise SpecError(f"kv_heads={p['kv_heads']}",
                        _("`kv_heads={kv_heads}`: heads={heads} must be a multiple of kv_heads",
                          kv_heads=p["kv_heads"], heads=p["heads"]), usage)
    _check_scenario(p, usage)
    if (p["hidden"] // p["heads"]) % 2:
        raise SpecError(f"hidden={p['hidden']}", _("`hidden={hidden}`: the head size "
                                                   "hidden/heads must be even (rotary "
                                                   "embeddings)", hidden=p["hidden"]), usage)


def _check_scenario(p: dict, usage: str) -> None:
    if p.get("scenario") == "single-stream" and p["batch"] != 1:
        raise SpecError(f"batch={p['batch']}", _("`batch={batch}`: scenario=single-stream "
                                                 "sends one sequence per request; use batch=1, "
                                                 "or scenario=offline for a batch at once",
                                                 batch=p["batch"]), usage)


def resolve(spec: TrialSpec, recipes: dict | None = None) -> TrialSpec:
    """Fill parameters a stored spec lacks with today's defaults, so a job
    queued before an upgrade added parameters still runs."""
    if spec.recipe:
        recipe = (recipes or {}).get(spec.recipe)
        workload = recipe.workload() if recipe else None
    else:
        workload = WORKLOADS.get(spec.workload)
    if workload is None:
        return spec
    return TrialSpec(spec.workload, {**{p.name: p.default for p in workload.params},
                                     **spec.params}, spec.recipe)
