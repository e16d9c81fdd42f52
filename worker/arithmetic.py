"""The decoder's exact arithmetic: parameter count, weight bytes, KV-cache bytes.

Pure and torch-free, so the worker puts it in a report and the bot's scaling
fit (bot/fits/scaling.py) uses the same numbers. `p` is a dict of llm-infer /
llm-train parameters; `ffn` 0 (or absent, in reports from before it existed)
means 4·hidden.
"""
from __future__ import annotations

from worker import kvcache, presets

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def ffn_width(p: dict) -> int:
    return p.get("ffn") or 4 * p["hidden"]


def weight_params(p: dict) -> dict:
    """Parameter count of worker/workloads/decoder.py's Decoder, by part.
    The embedding and the lm head are separate matrices (not tied)."""
    h, layers, heads, kv, vocab = p["hidden"], p["layers"], p["heads"], p["kv_heads"], p["vocab"]
    hd, ffn = h // heads, ffn_width(p)
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h  # q, k, v, o (no bias)
    mlp = 3 * h * ffn                                          # gate, up, down (SwiGLU)
    per_layer = attn + mlp + 2 * h                             # + two RMSNorm weights
    return {"embedding": vocab * h, "layers": layers * per_layer, "final_norm": h,
            "lm_head": h * vocab, "per_layer": per_layer,
            "total": vocab * h + layers * per_layer + h + h * vocab}


def weight_bytes(p: dict) -> int:
    return weight_params(p)["total"] * DTYPE_BYTES[p["dtype"]]


def kv_bytes_per_token(p: dict) -> int:
    """KV-cache bytes per sequence position: 2·layers·kv_heads·head_dim·bytes."""
    return 2 * p["layers"] * p["kv_heads"] * (p["hidden"] // p["heads"]) * DTYPE_BYTES[p["dtype"]]


def kv_cache_bytes(p: dict) -> int:
    """The preallocated cache: 2·layers·kv_heads·head_dim·(prompt+gen)·batch·bytes."""
    return kv_bytes_per_token(p) * (p["prompt"] + p["gen"]) * p["batch"]


def layer_bytes(p: dict) -> dict:
    """One layer's weights and its share of the KV cache at p's batch and lengths:
    what each layer adds to an inference peak (bot/fits/depth.py, scripts/gpu-check)."""
    one = {**p, "layers": 1}
    weights = weight_params(one)["per_layer"] * DTYPE_BYTES[p["dtype"]]
    kv = kv_cache_bytes(one)
    return {"weights": weights, "kv": kv, "total": weights + kv}


def full_depth(p: dict) -> dict | None:
    """For an llm-infer trial with `preset=`: the preset's full depth by the
    arithmetic above, at the trial's dtype, batch, prompt and gen. None
    without a preset. Arithmetic, not measured."""
    preset = presets.get(p.get("preset") or "none")
    if preset is None:
        return None
    full = {**p, **presets.full_shape(preset.name)}
    count = weight_params(full)["total"]
    hd, nbytes = preset.hidden // preset.heads, DTYPE_BYTES[p["dtype"]]
    return {
        "what": "arithmetic, not measured: the preset's full depth at this trial's dtype, "
                "batch, prompt and gen",
        "preset": preset.name, "source": preset.source,
        "layers": preset.layers, "trial_layers": p["layers"], "batch": p["batch"],
        "params": count, "dtype": p["dtype"], "weight_bytes": count * nbytes,
        "kv_cache_bytes": kv_cache_bytes(full),
        "kv_formula": f"2·{preset.layers}·{preset.kv_heads}·{hd}·({p['prompt']}+{p['gen']})"
                      f"·{p['batch']}·{nbytes}",
        "published_params": preset.published_params,
        "published_text": preset.published_text,
        "relative_error": (count - preset.published_params) / preset.published_params,
    }


# --- any model, by its sizing -----------------------------------------------
# A *sizing* describes a model at its full depth layer by layer, so the same
# arithmetic serves the built-in decoder (uniform layers, from its parameters)
# and a Hugging Face model (counted by transformers on the meta device, in the
# report's full_depth.sizing; worker/workloads/hf.py): {"layers", "hidden",
# "embedding", "lm_head", "other", "layer_params": [per layer], "kv": [per
# layer, worker/kvcache.py's LayerCache: {"kind", "elements" per token,
# "keeps": None or positions kept, "state": fixed elements per sequence}],
# "kv_how": the formula}.

def decoder_sizing(p: dict) -> dict:
    """The built-in decoder's sizing at p's depth."""
    one = weight_params({**p, "layers": 1})
    kv, hd = 2 * p["kv_heads"] * (p["hidden"] // p["heads"]), p["hidden"] // p["heads"]
    return {"layers": p["layers"], "hidden": p["hidden"], "embedding": one["embedding"],
            "lm_head": one["lm_head"], "other": one["final_norm"],
            "layer_params": [one["per_layer"]] * p["layers"],
            "kv": [{"kind": "full_attention", "elements": kv, "keeps": None, "state": 0}]
            * p["layers"],
            "kv_how": f"2·kv_heads·head_dim = 2·{p['kv_heads']}·{hd} = {kv} elements per "
                      f"token per layer × {p['layers']} layers",
            "experts": None}


def sized_params(s: dict, layers: int | None = None) -> dict:
    """Parameters of the model's first `layers` layers (all by default) and
    everything outside the layers."""
    n = s["layers"] if layers is None else layers
    in_layers = sum(s["layer_params"][:n])
    return {"embedding": s["embedding"], "layers": in_layers, "lm_head": s["lm_head"],
            "other": s["other"],
            "total": s["embedding"] + in_layers + s["lm_head"] + s["other"]}


def sized_kv(s: dict, positions: float, nbytes: int, layers: int | None = None) -> float:
    """Cache bytes per sequence at `positions` and `nbytes` a cached element,
    over the first `layers` layers: a sliding-window layer keeps at most its
    window (transformers' dynamic cache: window − 1), a recurrent layer its
    fixed state (worker/kvcache.py)."""
    n = s["layers"] if layers is None else layers
    return sum(kvcache.LayerCache.of(k).bytes(positions, nbytes) for k in s["kv"][:n])


def sized_kv_per_token(s: dict, nbytes: int, layers: int | None = None) -> int:
    """Cache bytes each token adds over the first `layers` layers (no window full)."""
    n = s["layers"] if layers is None else layers
    return sum(k["elements"] for k in s["kv"][:n]) * nbytes


def sized_full_depth(p: dict, s: dict, name: str, published: int | None) -> dict:
    """An hf-infer / hf-train trial's full depth from its sizing, at the trial's
    dtype, batch and lengths (the counterpart of full_depth for presets)."""
    nbytes = DTYPE_BYTES[p["dtype"]]
    positions = p.get("prompt", p.get("seq", 0)) + p.get("gen", 0)
    count = s["total"]
    kv = sized_kv(s, positions, nbytes) * p["batch"]
    out = {"what": "counted, not measured: " + s["what"], "model": name,
           "source": s["source"], "layers": s["layers"], "trial_layers": p["layers"] or s["layers"],
           "params": count, "dtype": p["dtype"], "weight_bytes": count * nbytes,
           "kv_cache_bytes": kv, "batch": p["batch"],
           "kv_formula": (f"({s['kv_how']}) at {positions} positions × batch {p['batch']} "
                          f"× {nbytes} B"),
           "sizing": s}
    if published:
        out.update(published_params=published, published_text=f"{published / 1e9:.3g}B",
                   relative_error=(count - published) / published)
    return out
