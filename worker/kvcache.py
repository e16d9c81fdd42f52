"""What transformers' cache keeps for a model, layer by layer, from its config
dict (a config.json as worker/models.py reads it, or a config's to_dict()).

Pure and torch-free. The rules are transformers 5's own (cache_utils.py, its
get_layer_types_and_kwargs and each layer class), and tests/integration/test_kvcache.py
holds them to the tensors a forward of each architecture really stores:

- attention: K and V, `2·kv_heads·head_dim` elements per token;
- multi-head latent attention (DeepSeek-V2/V3, any config with
  `kv_lora_rank`): the compressed latent and the shared rope key,
  `kv_lora_rank + qk_rope_head_dim` per token;
- a sliding (or chunked) window: the dynamic cache keeps `window − 1`
  positions, a static cache `window`;
- linear attention, convolution and other recurrent layers: no per-token
  cache, a fixed state per sequence (conv and recurrent states);
- a layer that reuses another's KV, or has no attention (`moe`, `mlp`): none.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

WINDOWED = ("sliding_attention", "chunked_attention")
RECURRENT = ("linear_attention", "conv")
HYBRID = {"hybrid": "full_attention", "hybrid_sliding": "sliding_attention"}
NO_CACHE = ("dummy", "moe", "mlp")


@dataclass(frozen=True)
class LayerCache:
    """One layer's cache, in elements: at the cache's dtype, except a recurrent
    state transformers keeps in float32 whatever the model's dtype."""
    kind: str                # the layer type transformers' cache dispatches on
    per_token: int           # elements kept per token (K and V; MLA: the latent)
    keeps: int | None        # at most this many positions; None: every position
    state: int | None = 0    # fixed elements per sequence at the dtype; None: not sized
    state_fp32: int = 0      # fixed elements per sequence held in float32

    def bytes(self, positions: float, nbytes: int) -> float:
        """Bytes this layer keeps for one sequence after `positions` tokens."""
        kept = positions if self.keeps is None else min(positions, self.keeps)
        return (self.per_token * kept + (self.state or 0)) * nbytes + self.state_fp32 * 4

    def as_dict(self) -> dict:
        return {"kind": self.kind, "elements": self.per_token, "keeps": self.keeps,
                "state": self.state, "state_fp32": self.state_fp32}

    @classmethod
    def of(cls, d: dict) -> LayerCache:
        """From as_dict(); a report from before "keeps" carried it as "window"."""
        return cls(d.get("kind", "full_attention"), d["elements"],
                   d.get("keeps", d.get("window")), d.get("state") or 0,
                   d.get("state_fp32") or 0)


@dataclass(frozen=True)
class CacheShape:
    layers: tuple[LayerCache, ...]
    how: str                 # the formula, with the config's numbers

    def per_token_bytes(self, nbytes: int) -> int:
        """Bytes each token adds over all layers (no window full yet)."""
        return sum(x.per_token for x in self.layers) * nbytes

    def state_bytes(self, nbytes: int) -> float:
        """Fixed bytes per sequence over all layers."""
        return sum(x.bytes(0, nbytes) for x in self.layers)

    def bytes(self, positions: float, nbytes: int) -> float:
        """Bytes one sequence keeps after `positions` tokens."""
        return sum(x.bytes(positions, nbytes) for x in self.layers)


def _get(config: dict, *keys: str, default=None):
    return next((config[k] for k in keys if config.get(k) is not None), default)


# Falcon's new decoder cached its KV heads broadcast to every query head until
# transformers 5.25.0, which caches the groups (FalconAttention, both read).
FALCON_GROUPED = (5, 25)


def _version(text: str | None) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text or "")[:2]
    return tuple(int(x) for x in numbers) if numbers else (10**6,)  # unknown: the newest


def _heads(config: dict, transformers: str | None = None) -> tuple[int, int, int]:
    """(attention heads, KV heads, head size) as the model's attention builds them
    in `transformers` (its version; None: the newest rule)."""
    heads = _get(config, "num_attention_heads", "n_head", "num_heads")
    hidden = _get(config, "hidden_size", "n_embd", "d_model")
    kv = _get(config, "num_key_value_heads", default=heads)
    if config.get("model_type") == "falcon":  # FalconAttention.num_kv_heads
        multi = config.get("multi_query", True) and not config.get("new_decoder_architecture")
        kv = 1 if multi else _get(config, "num_kv_heads", default=heads)
        if config.get("new_decoder_architecture") and _version(transformers) < FALCON_GROUPED:
            kv = heads
    return heads, kv, _get(config, "head_dim", default=hidden // heads)


def _layer_types(config: dict) -> list[str]:
    """Per layer, the type transformers' cache dispatches on."""
    n = _get(config, "num_hidden_layers", "n_layer", "num_layers")
    types = config.get("layer_types")
    if not types:
        window = config.get("sliding_window")
        if config.get("use_sliding_window") is False:  # Qwen2's switch
            window = None
        start = config.get("max_window_layers") if config.get("use_sliding_window") else 0
        types = ["sliding_attention" if window and i >= (start or 0) else
                 "chunked_attention" if config.get("attention_chunk_size") else
                 "full_attention" for i in range(n)]
    modes = config.get("kv_sharing_modes") or [None] * n
    return ["dummy" if mode == "reuse" else t for t, mode in zip(types[:n], modes)]


def _state(config: dict, kind: str) -> tuple[int | None, int, str]:
    """A recurrent layer's fixed elements per sequence (at the dtype, in
    float32), and how."""
    c = config
    if kind == "linear_attention" and c.get("linear_key_head_dim"):  # gated delta net
        k = c["linear_num_key_heads"] * c["linear_key_head_dim"]
        v = c["linear_num_value_heads"] * c["linear_value_head_dim"]
        conv = (2 * k + v) * c["linear_conv_kernel_dim"]
        rec = c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"]
        # the delta rule runs, and leaves its state, in float32
        return conv, rec, (f"state conv (2·{k}+{v})·{c['linear_conv_kernel_dim']} = {conv} + "
                           f"recurrent {c['linear_num_value_heads']}·{c['linear_key_head_dim']}"
                           f"·{c['linear_value_head_dim']} = {rec} in float32 per sequence")
    if kind == "conv" and c.get("conv_L_cache"):  # LFM2's short convolution
        hidden = _get(c, "hidden_size")
        return hidden * c["conv_L_cache"], 0, (f"state conv hidden·conv_L_cache = {hidden}·"
                                               f"{c['conv_L_cache']} = "
                                               f"{hidden * c['conv_L_cache']} per sequence")
    return None, 0, f"its {kind} state is not sized here"


def shape(config: dict, cache: str = "dynamic", transformers: str | None = None) -> CacheShape:
    """The cache transformers keeps for `config` (`cache`: dynamic or static), in
    the `transformers` version given (None: the newest rule)."""
    heads, kv, hd = _heads(config, transformers)
    if config.get("kv_lora_rank"):
        rank, rope = config["kv_lora_rank"], config["qk_rope_head_dim"]
        per, formula = rank + rope, f"MLA kv_lora_rank+qk_rope_head_dim = {rank}+{rope}"
    else:
        per, formula = 2 * kv * hd, f"2·kv_heads·head_dim = 2·{kv}·{hd}"
    layers, notes = [], {}
    for kind in _layer_types(config):
        attends = HYBRID.get(kind, kind)
        state, fp32, note = (_state(config, kind) if kind in RECURRENT or kind in HYBRID
                             else (0, 0, ""))
        if note:
            notes[kind] = note
        window = (config.get("attention_chunk_size") if attends == "chunked_attention"
                  else config.get("sliding_window"))
        if attends in WINDOWED and window:
            keeps = window if cache == "static" else window - 1
            layers.append(LayerCache(kind, per, keeps, state, fp32))
        elif attends == "full_attention":
            layers.append(LayerCache(kind, per, None, state, fp32))
        elif attends in NO_CACHE or attends in RECURRENT:
            layers.append(LayerCache(kind, 0, None, state, fp32))
        else:  # a kind this module does not know: counted as full attention, and said
            notes[kind] = "counted as full attention (a cache kind not sized here)"
            layers.append(LayerCache(kind, per, None, None))
    return CacheShape(tuple(layers), _how(layers, formula, per, notes, cache))


def _how(layers: list[LayerCache], formula: str, per: int, notes: dict, cache: str) -> str:
    counts = Counter((x.kind, x.per_token, x.keeps) for x in layers)
    parts = []
    for (kind, elements, keeps), n in counts.items():
        part = f"{n} {kind}"
        if elements and keeps is not None:
            kept = "window" if cache == "static" else "window−1"
            part += f" ({elements} per token, at most {kept} = {keeps} positions)"
        elif elements:
            part += f" ({elements} per token)"
        else:
            part += " (no per-token cache)"
        parts.append(part + (f"; {notes[kind]}" if kind in notes else ""))
    return f"{formula} = {per} elements per token per attention layer: " + ", ".join(parts)
