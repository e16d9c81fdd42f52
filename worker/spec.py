"""Workloads, their parameters, and parsing of `/trial` words into a TrialSpec.

Pure and torch-free: the bot validates a request with this module before it
creates a job, and the worker parses `trialbot-worker trial ...` with it, so
both sides accept exactly the same words.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class SpecError(ValueError):
    """A request that cannot become a trial; `token` is the word at fault."""

    def __init__(self, token: str, message: str, usage: str):
        super().__init__(message)
        self.token = token
        self.message = message
        self.usage = usage


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "int" | "choice"
    default: object
    help: str
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "choice":
            allowed = "|".join(self.choices)
        else:
            allowed = f"{self.low}..{self.high}"
        return f"{self.name}={self.default} ({allowed}) {self.help}"

    def parse(self, raw: str, usage: str) -> object:
        token = f"{self.name}={raw}"
        if self.kind == "choice":
            if raw not in self.choices:
                raise SpecError(token, f"`{token}`: {self.name} must be one of "
                                f"{', '.join(self.choices)}", usage)
            return raw
        try:
            value = int(raw, 10)
        except ValueError:
            raise SpecError(token, f"`{token}`: {self.name} must be a whole number "
                            f"from {self.low} to {self.high}", usage) from None
        if not self.low <= value <= self.high:
            raise SpecError(token, f"`{token}`: {self.name} must be from {self.low} "
                            f"to {self.high}", usage)
        return value


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    params: tuple[Param, ...]

    def usage(self) -> str:
        words = " ".join(f"{p.name}={p.default}" for p in self.params[:4])
        return f"/trial {self.name} {words} ..."

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


def _int(name, default, low, high, help):
    return Param(name, "int", default, help, low=low, high=high)


def _choice(name, default, choices, help):
    return Param(name, "choice", default, help, choices=tuple(choices))


# Limits are sanity bounds that catch typos (prompt=1e12), not hardware limits:
# whether a config fits a GPU is what the trial measures.
LLM_INFER = Workload(
    name="llm-infer",
    summary="decoder-only transformer, random weights, KV cache: prefill then decode",
    params=(
        _int("batch", 1, 1, 4096, "sequences per request"),
        _int("prompt", 64, 1, 131072, "prompt tokens per sequence (prefill)"),
        _int("gen", 16, 1, 65536, "tokens generated per sequence (decode)"),
        _int("layers", 2, 1, 512, "transformer layers"),
        _int("hidden", 256, 8, 65536, "model width"),
        _int("heads", 4, 1, 512, "attention heads"),
        _int("kv_heads", 2, 1, 512, "key/value heads (grouped-query attention)"),
        _int("vocab", 4096, 2, 1048576, "vocabulary size"),
        _choice("dtype", "fp32", ("fp32", "bf16", "fp16"), "weights and activations"),
        _choice("device", "auto", ("auto", "cuda", "cpu"), "auto = cuda when present"),
        _int("repeats", 5, 1, 10000, "measured requests in the run phase"),
        _int("warmup", 1, 0, 1000, "unmeasured requests before the run phase"),
        _int("seed", 0, 0, 2**31 - 1, "random seed for weights and prompts"),
        _int("timeout", 1800, 1, 7 * 24 * 3600, "seconds before the trial is stopped"),
    ),
)

WORKLOADS = {w.name: w for w in (LLM_INFER,)}


@dataclass(frozen=True)
class TrialSpec:
    workload: str
    params: dict = field(default_factory=dict)

    def words(self) -> str:
        """The canonical words that reproduce this spec."""
        return " ".join([self.workload] + [f"{k}={v}" for k, v in self.params.items()])

    def to_dict(self) -> dict:
        return {"workload": self.workload, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict) -> "TrialSpec":
        return cls(d["workload"], dict(d["params"]))


def general_usage() -> str:
    names = "|".join(WORKLOADS)
    return f"/trial <{names}> key=value ...  |  /trial help  |  /trial status T12  |  /trial list"


def parse(words: list[str]) -> TrialSpec:
    """Parse `llm-infer batch=4 ...` into a TrialSpec with every parameter resolved."""
    if not words:
        raise SpecError("", "Name a workload to run.", general_usage())
    name, rest = words[0], words[1:]
    workload = WORKLOADS.get(name)
    if workload is None:
        raise SpecError(name, f"`{name}` is not a workload; known workloads: "
                        f"{', '.join(WORKLOADS)}", general_usage())
    usage = workload.usage()
    values: dict = {}
    for word in rest:
        key, eq, raw = word.partition("=")
        if not eq or not key or not raw:
            raise SpecError(word, f"`{word}`: parameters are written key=value, "
                            "e.g. batch=4", usage)
        param = workload.param(key)
        if param is None:
            raise SpecError(word, f"`{word}`: {workload.name} has no parameter "
                            f"`{key}`; it takes {', '.join(p.name for p in workload.params)}",
                            usage)
        if key in values:
            raise SpecError(word, f"`{word}`: {key} is given twice", usage)
        values[key] = param.parse(raw, usage)
    params = {p.name: values.get(p.name, p.default) for p in workload.params}
    _check_shape(params, usage)
    return TrialSpec(workload.name, params)


def _check_shape(p: dict, usage: str) -> None:
    """Constraints between parameters that make the model impossible to build."""
    if p["hidden"] % p["heads"]:
        raise SpecError(f"heads={p['heads']}", f"`heads={p['heads']}`: hidden={p['hidden']} "
                        "must divide evenly into heads", usage)
    if p["kv_heads"] > p["heads"] or p["heads"] % p["kv_heads"]:
        raise SpecError(f"kv_heads={p['kv_heads']}", f"`kv_heads={p['kv_heads']}`: heads="
                        f"{p['heads']} must be a multiple of kv_heads", usage)
    if (p["hidden"] // p["heads"]) % 2:
        raise SpecError(f"hidden={p['hidden']}", f"`hidden={p['hidden']}`: the head size "
                        "hidden/heads must be even (rotary embeddings)", usage)
