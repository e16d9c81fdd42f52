"""The workloads and their parameters: names, kinds, defaults, ranges and help,
as `/trial help` shows them (worker/spec.py parses words against them).

Pure and torch-free: the bot and the worker read the same table.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

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
        return self._number(raw, bad)

    def _number(self, raw: str, bad) -> object:
        """An int or float parameter's value. A refusal names the rule broken (the sign,
        the range with its limits, whole numbers) with the default as an example."""
        try:
            value = float(raw)
        except ValueError:
            raise bad(N_("`{token}`: {name} must be a whole number from {low} to {high}, e.g. "
                         "{name}={example}") if self.kind == "int" else
                      N_("`{token}`: {name} must be a number from {low} to {high}, e.g. "
                         "{name}={example}"), example=self.default) from None
        assert self.low is not None and self.high is not None  # a number's range is declared
        if not math.isfinite(value):
            raise bad(N_("`{token}`: {name} must be a finite number from {low} to {high}, e.g. "
                         "{name}={example}"), example=self.default)
        if value < 0 <= self.low:
            raise bad(N_("`{token}`: {name} cannot be negative; it is from {low} to {high}, "
                         "e.g. {name}={example}"), example=self.default)
        if not self.low <= value <= self.high:
            raise bad(N_("`{token}`: {name} must be from {low} to {high}, e.g. "
                         "{name}={example}"), example=self.default)
        if self.kind == "float":
            return value
        try:
            return int(raw, 10)
        except ValueError:  # 2.5, or 1e3 (a whole number, but not as a program writes one)
            raise bad(N_("`{token}`: {name} must be a whole number written in digits, from "
                         "{low} to {high}, e.g. {name}={example}"),
                      example=self.default) from None

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


# Every workload takes these: how long a try may take, what a failure retries,
# its threads, and how many fresh processes its time comes from (worker/launcher/processes.py;
# the default from the spread measured between processes: docs/benchmarks.md,
# "Processes per trial").
PROCESSES = 4
MAX_PROCESSES = 20  # each window row of each process is kept: 20 × 5 windows
COMMON = (
    _int("timeout", 1800, 1, 7 * 24 * 3600, N_("seconds before the trial is stopped")),
    _choice("on_oom", "fail", ("fail", "halve-batch"),
            N_("on out-of-memory: fail, or retry with half the batch")),
    _int("attempts", 3, 1, 20, N_("tries at most, the first included")),
    # checked against the worker's usable cores there (worker/threads.py)
    _int("threads", 0, 0, 4096, N_("intra-op CPU threads, 1 to the worker's usable cores; "
                                  "0: the worker chooses (usable cores − 1, pinned)")),
    _int("processes", PROCESSES, 1, MAX_PROCESSES,
         N_("fresh processes the time figures come from, one after another (a built-in's "
            "measured requests split between them); 1: one process, and the plan's interval "
            "then leaves out drift between processes")),
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
