"""Workloads, their parameters, and parsing of `/trial` words into a TrialSpec.

Pure and torch-free: the bot validates a request with this module before it
creates a job, and the worker parses `trialbot-worker trial ...` with it, so
both sides accept exactly the same words.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from worker import presets
from worker.i18n import N_, _


class SpecError(ValueError):
    """A request that cannot become a trial; `token` is the word at fault."""

    def __init__(self, token: str, message: str, usage: str):
        super().__init__(message)
        self.token = token
        self.message = message
        self.usage = usage


# A string parameter is a plain token unless its recipe gives a pattern; it never
# reaches a shell, and "..", a leading "/" or "-" are refused whatever the
# pattern, so no value walks out of the recipe's directory or becomes an option.
DEFAULT_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"
MAX_LENGTH = 256


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "int" | "float" | "choice" | "string"
    default: object
    help: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    max_length: int = MAX_LENGTH

    def allowed(self) -> str:
        if self.kind == "choice":
            return "|".join(self.choices)
        if self.kind == "string":
            return _("text matching {pattern}, at most {max_length} chars",
                     pattern=self.pattern or DEFAULT_PATTERN, max_length=self.max_length)
        return f"{self.low}..{self.high}"

    def help_text(self) -> str:
        """The help in the language in use (an admin's recipe help stays as written)."""
        if not self.help:
            return ""
        message, values = _FILLED.get(self.help, (self.help, {}))
        return _(message, **values)

    def describe(self) -> str:
        return f"{self.name}={self.default} ({self.allowed()}) {self.help_text()}".rstrip()

    def parse(self, raw: str, usage: str) -> object:
        token = f"{self.name}={raw}"
        shown = token if len(token) <= 80 else token[:77] + "..."

        def bad(message: str, **values) -> SpecError:
            # Each refusal is one whole sentence, the word at fault first.
            return SpecError(token, _(message, token=shown, name=self.name, low=self.low,
                                      high=self.high, **values), usage)

        if self.kind == "choice":  # any case (dtype=BF16), stored as the choice is written
            if raw in self.choices:
                return raw
            same = [c for c in self.choices if c.lower() == raw.lower()]
            if len(same) != 1:
                raise bad(N_("`{token}`: {name} must be one of {choices}"),
                          choices=", ".join(self.choices))
            return same[0]
        if self.kind == "string":
            if len(raw) > self.max_length:
                raise bad(N_("`{token}`: {name} is longer than {max_length} characters"),
                          max_length=self.max_length)
            # Whatever the admin's pattern: no walking up, no absolute path, no value
            # that a program would take for an option, no NUL.
            if (".." in raw or raw.startswith(("/", "-")) or "\0" in raw
                    or not re.fullmatch(self.pattern or DEFAULT_PATTERN, raw)):
                raise bad(N_("`{token}`: {name} must be {allowed} (and not contain `..` or "
                             "start with `/` or `-`)"), allowed=self.allowed())
            return raw
        if self.kind == "float":
            try:
                value = float(raw)
            except ValueError:
                raise bad(N_("`{token}`: {name} must be a number from {low} to {high}")) from None
            if not math.isfinite(value) or not self.low <= value <= self.high:
                raise bad(N_("`{token}`: {name} must be from {low} to {high}"))
            return value
        try:
            value = int(raw, 10)
        except ValueError:
            raise bad(N_("`{token}`: {name} must be a whole number from {low} to {high}")
                      ) from None
        if not self.low <= value <= self.high:
            raise bad(N_("`{token}`: {name} must be from {low} to {high}"))
        return value

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, (), "")}

    @classmethod
    def from_dict(cls, d: dict) -> Param:
        return cls(**{**d, "choices": tuple(d.get("choices", ()))})


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    params: tuple[Param, ...]
    recipe: bool = False  # an admin's recipe from a worker's file, run as `recipe NAME`
    requires: str = "any"  # "cuda" | "any"

    def usage(self) -> str:
        words = " ".join(f"{p.name}={p.default}" for p in self.params[:4])
        head = f"recipe {self.name}" if self.recipe else self.name
        return f"/trial {head} {words} ..."

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "requires": self.requires,
                "params": [p.to_dict() for p in self.params]}

    @classmethod
    def from_dict(cls, d: dict) -> Workload:
        return cls(d["name"], d.get("summary", ""), tuple(Param.from_dict(p) for p in d["params"]),
                   recipe=True, requires=d.get("requires", "any"))

    def summary_text(self) -> str:
        """The summary in the language in use (an admin's recipe summary stays as written)."""
        return _(self.summary) if self.summary else ""

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


# Help texts with a value filled in at import: the English as shown, and how
# to translate it where it is shown (Param.help_text).
_FILLED: dict[str, tuple[str, dict]] = {}


def _filled(message: str, **values) -> str:
    english = message.format(**values)
    _FILLED[english] = (message, values)
    return english


def _int(name, default, low, high, help):
    return Param(name, "int", default, help, low=low, high=high)


def _choice(name, default, choices, help):
    return Param(name, "choice", default, help, choices=tuple(choices))


# Every workload takes these: how long a try may take and what a failure retries.
COMMON = (
    _int("timeout", 1800, 1, 7 * 24 * 3600, N_("seconds before the trial is stopped")),
    _choice("on_oom", "fail", ("fail", "halve-batch"),
            N_("on out-of-memory: fail, or retry with half the batch")),
    _int("attempts", 3, 1, 20, N_("tries at most, the first included")),
)

# The decoder's shape, shared by llm-infer and llm-train. `preset=NAME` fills
# hidden, heads, kv_heads, ffn and vocab from worker/presets.py; `layers` stays
# the user's (default 2), at most the preset's depth.
MODEL_SHAPE = (
    _int("layers", 2, 1, 512, N_("transformer layers")),
    _int("hidden", 256, 8, 65536, N_("model width")),
    _int("heads", 4, 1, 512, N_("attention heads")),
    _int("kv_heads", 2, 1, 512, N_("key/value heads (grouped-query attention)")),
    _int("ffn", 0, 0, 1048576, N_("feed-forward width (SwiGLU gate/up/down); 0: 4·hidden")),
    _int("vocab", 4096, 2, 1048576, N_("vocabulary size")),
    _choice("preset", "none", ("none", *presets.PRESETS),
            N_("a public model's shape (hidden, heads, kv_heads, ffn, vocab); layers= up to its "
            "depth, and the report adds the full depth's arithmetic")),
)
DEVICE = _choice("device", "auto", ("auto", "cuda", "cpu"), N_("auto = cuda when present"))
# glibc keeps freed memory in RSS by allocation history (two identical runs
# differed by 7%), so host RSS neither repeats nor extrapolates by layer;
# pinning its mmap threshold returns each freed tensor (docs/design.md §2, "Memory, by method").
# What live costs a CPU trial's times, as measured (docs/benchmarks.md): the
# card and a plan block resting on such a trial say it.
LIVE_TIME_NOTE = N_("its times include page faults from glibc's mmap threshold pinned at 64 KiB "
                  "(on a 2-core CPU box live took 1.18–1.19× glibc's CPU time in prefill and "
                  "1.03–1.05× per decode step, up to 1.24× and 2.6× while the box was busy: "
                  "scripts/bench_malloc_time.py)")


def live_time_note() -> str:
    """LIVE_TIME_NOTE in the language in use."""
    return _(LIVE_TIME_NOTE)
MALLOC = _choice("malloc", "auto", ("auto", "live", "glibc"),
                 N_("host memory: live pins glibc's mmap threshold at 64 KiB so host RSS is the "
                 "live peak, which extrapolates (CPU times then include page faults); glibc "
                 "keeps the C library's default; auto = on a CPU two passes (host RSS from a "
                 "short live pass, time from a glibc pass), partial-depth trials and depth "
                 "sweeps included, and on CUDA one glibc pass"))

# Limits are sanity bounds that catch typos (prompt=1e12), not hardware limits:
# whether a config fits a GPU is what the trial measures. The pieces below are
# shared by the built-in decoder's workloads and the Hugging Face ones.
BATCH = _int("batch", 1, 1, 4096, N_("sequences per request"))
PROMPT = _int("prompt", 64, 1, 131072, N_("prompt tokens per sequence (prefill)"))
DTYPE = _choice("dtype", "fp32", ("fp32", "bf16", "fp16"), N_("weights and activations"))
REQUESTS = (  # how an inference trial measures its requests
    _choice("scenario", "offline", ("offline", "single-stream"),
            N_("offline: the whole batch at once, headline throughput; single-stream: "
            "one sequence per request, headline p90 latency")),
    _int("repeats", 5, 1, 10000, N_("measured requests at least")),
    _int("stability", 5, 0, 100, N_("keep measuring until IQR/median is under this "
         "percent (0: exactly `repeats`)")),
    _int("run_cap", 3, 1, 24 * 3600, N_("seconds after which measuring stops, stable or not")),
    _int("warmup", 1, 0, 1000, N_("unmeasured requests before the run phase")),
    _int("seed", 0, 0, 2**31 - 1, N_("random seed for weights and prompts")),
)
TRAIN_DATA = (_int("batch", 4, 1, 4096, N_("sequences per step, split over the ranks")),
              _int("seq", 64, 2, 131072, N_("tokens per sequence")))
STEPS = (
    _int("steps", 5, 1, 100000, N_("measured training steps")),
    _int("warmup", 1, 0, 1000, N_("training steps before the measured ones")),
    _choice("precision", "fp32", ("fp32", "bf16", "fp16"),
            N_("fp32, or mixed precision with torch.autocast (fp16 with a gradient scaler)")),
)
RANKS = (_int("zero", 0, 0, 1, N_("1: ZeRO-1, optimizer states sharded over the ranks")),
         _int("world", 1, 1, 64, N_("ranks (processes) on this worker, one per GPU on CUDA")))
TRAIN_SEED = _int("seed", 0, 0, 2**31 - 1, N_("random seed for weights and data"))

LLM_INFER = Workload(
    name="llm-infer",
    summary=N_("decoder-only transformer, random weights, KV cache: prefill then decode"),
    params=(
        BATCH, PROMPT,
        _int("gen", 16, 1, 65536, N_("tokens generated per sequence (decode)")),
        *MODEL_SHAPE,
        DTYPE,
        DEVICE,
        MALLOC,
        *REQUESTS,
    ) + COMMON,
)

LLM_TRAIN = Workload(
    name="llm-train",
    summary=N_("the llm-infer decoder trained with AdamW on a fixed synthetic batch: step time, "
            "memory, loss; precision, activation checkpointing, ZeRO-1 over ranks"),
    params=(
        *TRAIN_DATA,
        *MODEL_SHAPE,
        *STEPS,
        _choice("checkpointing", "none", ("none", "full"),
                N_("full: recompute each layer's activations in the backward pass")),
        *RANKS,
        DEVICE,
        MALLOC,
        TRAIN_SEED,
    ) + COMMON,
)

# Hugging Face models (worker/models.py, worker/workloads/hf.py): the real code of
# any decoder architecture, random weights from a config; needs `trialbot[hf]`.
MODEL = Param("model", "string", "none",
              _filled(N_("a preset ({presets}), a config in the worker's --models directory, or "
                         "a hub id org/name on a worker started with --hub"),
                      presets=", ".join(presets.PRESETS)),
              pattern=r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?", max_length=200)
HF_LAYERS = _int("layers", 0, 0, 1024, N_("the model's first N layers (num_hidden_layers); 0: all "
                 "of them, the config's depth"))
ATTN = _choice("attn", "sdpa", ("sdpa", "eager", "flash_attention_2"),
               N_("transformers' attention: sdpa (torch's fused kernels), eager (scores "
               "materialised, softmax in fp32), flash_attention_2 (needs flash-attn and CUDA)"))

HF_INFER = Workload(
    name="hf-infer",
    summary=N_("a Hugging Face causal LM's own code (transformers), random weights from its "
            "config: generate() prefill then decode"),
    params=(
        BATCH, PROMPT,
        _int("gen", 16, 1, 65536,
             N_("tokens generated per sequence (exactly: EOS does not stop it)")),
        MODEL, HF_LAYERS,
        DTYPE,
        ATTN,
        _choice("cache", "dynamic", ("dynamic", "static"),
                N_("transformers' KV cache: dynamic (grows each step) or static (preallocated)")),
        DEVICE, MALLOC,
        *REQUESTS,
    ) + COMMON,
)

HF_TRAIN = Workload(
    name="hf-train",
    summary=N_("a Hugging Face causal LM's own code trained with AdamW on a fixed synthetic batch, "
            "as llm-train: precision, gradient checkpointing, ZeRO-1 over ranks"),
    params=(
        *TRAIN_DATA,
        MODEL, HF_LAYERS,
        *STEPS,
        _choice("checkpointing", "none", ("none", "full"),
                N_("full: gradient_checkpointing_enable(), each layer recomputed in the backward")),
        *RANKS,
        ATTN, DEVICE, MALLOC,
        TRAIN_SEED,
    ) + COMMON,
)

WORKLOADS = {w.name: w for w in (LLM_INFER, LLM_TRAIN, HF_INFER, HF_TRAIN)}
HF = ("hf-infer", "hf-train")  # need transformers on the worker


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
        raise SpecError(name, _("`{name}` is not a workload; known workloads: {known} (or "
                                "`recipe NAME`)", name=name, known=", ".join(WORKLOADS)),
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
            raise SpecError(word, _("`{word}`: {workload} has no parameter `{key}`; it takes "
                                    "{names}", word=word, workload=workload.name, key=key,
                                    names=", ".join(p.name for p in workload.params)), usage)
        if key in values:
            raise SpecError(word, _("`{word}`: {key} is given twice", word=word, key=key),
                            usage)
        values[key] = param.parse(raw, usage)
        words[key] = word
    return {p.name: values.get(p.name, p.default) for p in workload.params}, words


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
