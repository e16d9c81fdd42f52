"""Named model shapes for llm-infer and llm-train: `preset=llama-3-8b`.

Pure data, torch-free. A preset carries public architecture facts only (from
the model's `config.json` on the Hugging Face hub, by model id) and the
published parameter count; never weights. The built-in decoder
(worker/workloads/decoder.py) is Llama-shaped: RMSNorm, rotary embeddings,
grouped-query attention, SwiGLU feed-forward, no biases, untied embedding and
lm head. Every preset below is that architecture, except that Qwen2.5 has
biases on the q/k/v projections (`qkv_bias`), which the decoder leaves out:
28·(3584 + 2·512) = 129,024 parameters, 0.002% of the model — inside the 1%
the arithmetic is held to, so the decoder has no bias option.

`published_params` is the figure the hub shows for the model (its safetensors
parameter count, as rounded on the model page); `scripts/bench_presets.py`
compares it with our exact count.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

# The parameters a preset fills; giving one of them with a different value
# alongside `preset=` is refused.
SHAPE_KEYS = ("hidden", "heads", "kv_heads", "ffn", "vocab")


@dataclass(frozen=True)
class Preset:
    name: str
    source: str            # Hugging Face hub model id; facts from its config.json
    hidden: int            # hidden_size
    layers: int            # num_hidden_layers: the full depth
    heads: int             # num_attention_heads
    kv_heads: int          # num_key_value_heads
    ffn: int               # intermediate_size
    vocab: int             # vocab_size
    published_params: int  # the hub's figure, as rounded there
    norm: str = "rmsnorm"
    activation: str = "swiglu"  # silu-gated feed-forward (gate, up, down)
    tied_embeddings: bool = False
    qkv_bias: bool = False

    @property
    def published_text(self) -> str:
        """As the hub writes it: 6.74B, 70.6B."""
        return f"{self.published_params / 1e9:.3g}B"

    def shape(self) -> dict:
        return {k: getattr(self, k) for k in SHAPE_KEYS}

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS = {p.name: p for p in (
    Preset("llama-2-7b", "meta-llama/Llama-2-7b-hf", hidden=4096, layers=32, heads=32,
           kv_heads=32, ffn=11008, vocab=32000, published_params=6_740_000_000),
    Preset("llama-3-8b", "meta-llama/Meta-Llama-3-8B", hidden=4096, layers=32, heads=32,
           kv_heads=8, ffn=14336, vocab=128256, published_params=8_030_000_000),
    Preset("llama-3-70b", "meta-llama/Meta-Llama-3-70B", hidden=8192, layers=80, heads=64,
           kv_heads=8, ffn=28672, vocab=128256, published_params=70_600_000_000),
    Preset("mistral-7b", "mistralai/Mistral-7B-v0.1", hidden=4096, layers=32, heads=32,
           kv_heads=8, ffn=14336, vocab=32000, published_params=7_240_000_000),
    Preset("qwen2.5-7b", "Qwen/Qwen2.5-7B", hidden=3584, layers=28, heads=28, kv_heads=4,
           ffn=18944, vocab=152064, published_params=7_610_000_000, qkv_bias=True),
)}

TOLERANCE = 0.01  # full-depth count vs the published figure


def get(name: str) -> Preset | None:
    return PRESETS.get(name)


def known() -> str:
    return ", ".join(PRESETS)


def scaled(name: str, divisor: int) -> dict:
    """The preset's shape narrowed by `divisor` with its ratios kept: hidden, heads,
    ffn and vocab divided, the head size and the heads-per-KV-head grouping
    unchanged. For benchmarks on a small machine (scripts/bench_depth.py)."""
    p = PRESETS[name]
    if any(x % divisor for x in (p.hidden, p.heads, p.kv_heads, p.ffn)):
        raise ValueError(f"{name} does not narrow by {divisor}: its hidden, heads, kv_heads "
                         "and ffn must all divide by it")
    return {"hidden": p.hidden // divisor, "heads": p.heads // divisor,
            "kv_heads": p.kv_heads // divisor, "ffn": p.ffn // divisor,
            "vocab": p.vocab // divisor}


def full_shape(name: str) -> dict:
    """The preset's shape at full depth, as llm-infer/llm-train parameters."""
    p = PRESETS[name]
    return {"layers": p.layers, **p.shape()}
