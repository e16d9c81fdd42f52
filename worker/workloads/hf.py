"""Hugging Face models for hf-infer and hf-train: a config (worker/models.py)
built by transformers with random weights, at the trial's depth, and sized on
the meta device at its full depth.

Sizing counts the parameters of transformers' own class, so MoE experts,
biases and tied embeddings are exact by construction; the KV cache per token
follows the config as transformers' cache keeps it (worker/kvcache.py: kv
heads and head size, MLA's latent, sliding windows, recurrent states).
"""
from __future__ import annotations

import importlib.util

import psutil
import torch

from worker import kvcache, models, notes, presets
from worker.arithmetic import sized_full_depth
from worker.workloads import Unsupported

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INSTALL = "pip install 'trialbot[hf]' on the worker"


def transformers():
    try:
        import transformers as tf
    except ImportError:
        raise Unsupported(f"hf-infer and hf-train need transformers, which this worker lacks: "
                          f"{INSTALL}") from None
    return tf


def _first_sentence(exc: Exception) -> str:
    text = str(exc).split("\n")[0].split(". Should contain one of")[0]
    return text if len(text) < 300 else text[:297] + "..."


def config(model: str, layers: int = 0):
    """The transformers config for `model=`, cut to `layers` (0: its own depth)."""
    tf = transformers()
    try:
        source = models.resolve(model)
    except models.ModelError as exc:
        raise Unsupported(str(exc)) from None
    try:
        if source["kind"] == "hub":
            cfg = tf.AutoConfig.from_pretrained(source["hub_id"])
        else:
            data = {k: v for k, v in source["config"].items() if k != "model_type"}
            cfg = tf.AutoConfig.for_model(source["config"]["model_type"], **data)
    except OSError as exc:  # the hub unreachable, or no such repository
        raise Unsupported(f"`model={model}`: the hub's config could not be read "
                          f"({_first_sentence(exc)}); save the config.json in the worker's "
                          "--models directory instead") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise Unsupported(f"`model={model}`: transformers {tf.__version__} cannot read this "
                          f"config ({_first_sentence(exc)}); check its model_type, or upgrade "
                          "transformers") from None
    text = cfg.get_text_config()
    full = text.num_hidden_layers
    if layers > full:
        raise Unsupported(f"`layers={layers}`: {model} has {full} layers; use "
                          f"layers=1..{full} (0: all of them)")
    if layers:
        cut(text, layers)
    return cfg, source, full


def cut(text_config, layers: int) -> None:
    """The first `layers` layers: per-layer lists (layer_types, ...) cut to match."""
    full = text_config.num_hidden_layers
    text_config.num_hidden_layers = layers
    for key, value in list(vars(text_config).items()):
        if isinstance(value, list) and len(value) == full and key.endswith(("_types", "_layers"))\
                and key != "mlp_only_layers":
            setattr(text_config, key, value[:layers])


# What transformers' PreTrainedModel reads before it builds with each attention
# (_sdpa_can_dispatch, _flash_attn_can_dispatch): eager every model has.
ATTN_FLAGS = {"sdpa": "_supports_sdpa", "flash_attention_2": "_supports_flash_attn"}
ATTN = ("sdpa", "eager", "flash_attention_2")  # worker/catalog.py's choices


def model_class(cfg):
    """The causal LM class transformers builds for cfg (imports its modeling code)."""
    return transformers().AutoModelForCausalLM._model_mapping[type(cfg)]


def attn_supported(cls) -> list[str]:
    """The attn= choices this model class supports, as transformers decides it."""
    return [a for a in ATTN if a == "eager" or getattr(cls, ATTN_FLAGS[a], False)]


def unsupported_attn(name: str, cls, attn: str) -> str | None:
    """Why `attn` cannot build this class, naming the ones that can; None if it can."""
    works = attn_supported(cls)
    if attn in works:
        return None
    here = [a for a in works if a != "flash_attention_2"
            or importlib.util.find_spec("flash_attn") is not None] or works
    return (f"`model={name}` ({cls.__name__}) does not support attn={attn} in transformers "
            f"{transformers().__version__}; use attn={' or attn='.join(here)}")


def check_attn(attn: str) -> None:
    if attn == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise Unsupported("`attn=flash_attention_2`: flash-attn is not installed on this "
                          "worker; use attn=sdpa or attn=eager, or `pip install flash-attn` "
                          "on a CUDA worker")


def build(cfg, dtype: str, device: str, attn: str, seed: int, name: str = "model"):
    """The causal LM for `cfg` with random weights, built in the target dtype on
    the device (no fp32 copy first)."""
    tf = transformers()
    check_attn(attn)
    try:
        why = unsupported_attn(name, model_class(cfg), attn)
    except (KeyError, ValueError, ImportError):
        why = None  # not a causal LM: from_config below says so
    if why:
        raise Unsupported(why)
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            return tf.AutoModelForCausalLM.from_config(cfg, dtype=DTYPES[dtype],
                                                       attn_implementation=attn)
    except (ValueError, ImportError) as exc:
        raise Unsupported(f"transformers {tf.__version__} cannot build this model as a causal "
                          f"LM with attn={attn} ({_first_sentence(exc)}); hf-infer and hf-train "
                          "take decoder-only models (AutoModelForCausalLM)") from None


def decoder_layers(model) -> torch.nn.ModuleList | None:
    """The model's stack of transformer layers: the ModuleList of
    num_hidden_layers modules."""
    n = model.config.get_text_config().num_hidden_layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()), default=None)


def sizing(cfg, full: int, source: dict, tf_version: str, cache: str = "dynamic") -> dict:
    """The model at its full depth, counted on the meta device (no memory): the
    parameters of the layers (each), the embedding, the lm head (0 when tied),
    the rest, and the cache per layer as transformers keeps it (worker/kvcache.py;
    `cache`: the trial's dynamic or static). What worker/arithmetic.py's sized_*
    functions and the bot's depth predictions read."""
    tf = transformers()
    text = cfg.get_text_config()
    if text.num_hidden_layers != full:  # re-read at full depth
        cfg, _, _ = config(source["name"])
        text = cfg.get_text_config()
    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(cfg)
    total = sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
    stack = decoder_layers(model)
    if stack is None:
        raise Unsupported(f"{source['name']}: no stack of {full} layers found in "
                          f"{type(model).__name__}, so it cannot be sized by depth")
    layer = [sum(p.numel() for p in block.parameters()) for block in stack]
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    embedding = emb.weight.numel() if emb is not None else 0
    tied = head is not None and emb is not None and head.weight is emb.weight
    lm_head = 0 if tied or head is None else head.weight.numel()
    moe = _experts(text)
    kv = kvcache.shape(text.to_dict(), cache, tf_version)
    return {
        "what": f"counted on the meta device from transformers {tf_version}'s "
                f"{type(model).__name__} at the full {full} layers (no weights); KV cache "
                "per token from the config as transformers' cache keeps it",
        "architecture": type(model).__name__, "model_type": cfg.model_type,
        "source": source["source"], "layers": full, "hidden": text.hidden_size,
        "vocab": text.vocab_size, "total": total, "embedding": embedding,
        "lm_head": lm_head, "tied_embeddings": tied,
        "other": total - embedding - lm_head - sum(layer),
        "layer_params": layer, "kv": [x.as_dict() for x in kv.layers], "kv_how": kv.how,
        "experts": moe,
    }


def _experts(text) -> dict | None:
    """A mixture of experts' routing, where the config says it (the decode
    estimate's weights-read floor does not hold for it)."""
    for total_key in ("num_local_experts", "num_experts", "n_routed_experts"):
        n = getattr(text, total_key, None)
        if isinstance(n, int) and n > 1:
            k = next((getattr(text, key) for key in ("num_experts_per_tok", "moe_topk", "top_k")
                      if isinstance(getattr(text, key, None), int)), None)
            return {"experts": n, "per_token": k}
    return None


def imported(model: str, layers: int) -> tuple:
    """Import transformers and the model's own modeling code (transformers
    imports lazily: a bare `import transformers` loads little), read its config:
    (config, source, full depth, transformers' version, the host RSS all that
    added)."""
    before = psutil.Process().memory_info().rss
    tf = transformers()
    cfg, source, full = config(model, layers)
    try:
        tf.AutoModelForCausalLM._model_mapping[type(cfg)]  # noqa: B018 - imports the class
    except (KeyError, ValueError, ImportError):
        pass  # build() says why it cannot be built
    # max: a collection during the import can leave RSS below where it started
    added = max(0, psutil.Process().memory_info().rss - before)
    return cfg, source, full, tf.__version__, added


def described(p: dict, cfg, source: dict, full: int, version: str, import_rss: int) -> dict:
    """The report's `model` (what was built, from where) and `full_depth` blocks,
    after the timed phases
    (sizing builds the full model on the meta device: no memory, a few seconds)."""
    preset = presets.get(p["model"])
    sizing_ = sizing(cfg, full, source, version, p.get("cache", "dynamic"))
    info = {"name": source["name"], "source": source["source"],
            "source_note": source.get("source_note"), "kind": source["kind"],
            "architecture": sizing_["architecture"],  # the class transformers built
            "model_type": cfg.model_type, "layers": cfg.get_text_config().num_hidden_layers,
            "full_layers": full, "attn": p.get("attn"), "transformers": version,
            "weights": notes.RANDOM_WEIGHTS,
            "import_rss_bytes": import_rss,
            "import_what": "host RSS that importing transformers added to the trial's "
                           "process (psutil, before and after): host memory a GPU does not "
                           "hold"}
    return {"model": info,
            "full_depth": sized_full_depth({**p, "dtype": p.get("dtype", "fp32")}, sizing_,
                                           p["model"],
                                           preset.published_params if preset else None)}


def check(names: list[str]) -> dict[str, dict]:
    """Each named config built on the meta device: {"attn": the attn= choices
    its class supports}, or {"error": why it cannot be built}."""
    out: dict[str, dict] = {}
    for name in names:
        try:
            cfg, _, _ = config(name)
            with torch.device("meta"):
                model = transformers().AutoModelForCausalLM.from_config(cfg)
            out[name] = {"attn": attn_supported(type(model))}
        except Unsupported as exc:
            out[name] = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - any reason a config cannot build
            out[name] = {"error": f"transformers cannot build `model={name}` as a causal LM "
                                  f"({_first_sentence(exc)})"}
    return out


if __name__ == "__main__":  # `python -m worker.workloads.hf NAME...`: the worker's check
    import json
    import sys
    print(json.dumps(check(sys.argv[1:])))
