"""The decoder's exact arithmetic: parameter count, weight bytes, KV-cache bytes.

Pure and torch-free, so the worker puts it in a report and the bot's scaling
fit (bot/fits/scaling.py) uses the same numbers. `p` is a dict of llm-infer /
llm-train parameters; `ffn` 0 (or absent, in reports from before it existed)
means 4·hidden.
"""
from __future__ import annotations

from worker import presets

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
        "layers": preset.layers, "trial_layers": p["layers"],
        "params": count, "dtype": p["dtype"], "weight_bytes": count * nbytes,
        "kv_cache_bytes": kv_cache_bytes(full),
        "kv_formula": f"2·{preset.layers}·{preset.kv_heads}·{hd}·({p['prompt']}+{p['gen']})"
                      f"·{p['batch']}·{nbytes}",
        "published_params": preset.published_params,
        "published_text": preset.published_text,
        "relative_error": (count - preset.published_params) / preset.published_params,
    }
