"""hf-train: a Hugging Face causal LM's own code (random weights from its
config) trained as llm-train trains the built-in decoder: AdamW on one fixed
synthetic batch, the same precision, checkpointing and ZeRO-1 choices, rank 0
timing the phases (worker/workloads/llm_train.py).

checkpointing=full is transformers' own `gradient_checkpointing_enable`, one
checkpoint per decoder layer, as the paper's training code would call it.
"""
from __future__ import annotations

from torch import nn

from worker.workloads import hf, llm_train


class Trainable(nn.Module):
    """The HF model with llm-train's interface: tokens in, logits out."""

    def __init__(self, model, vocab: int):
        super().__init__()
        self.model, self.vocab = model, vocab

    def forward(self, tokens):
        return self.model(input_ids=tokens, use_cache=False).logits


def make(p: dict, dev) -> nn.Module:
    """Weights stay fp32 under autocast, as in llm-train."""
    cfg, _, _ = hf.config(p["model"], p["layers"])
    model = hf.build(cfg, "fp32", str(dev.type), p["attn"], p["seed"], p["model"])
    if p["checkpointing"] == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return Trainable(model, cfg.get_text_config().vocab_size)


def run(p: dict, trial) -> dict:
    # refused here, before any rank starts
    cfg, source, full, version, import_rss = hf.imported(p["model"], p["layers"])
    hf.check_attn(p["attn"])
    out = llm_train.run(p, trial, make)
    return {**out, **hf.described({**p, "dtype": "fp32"}, cfg, source, full, version,
                                  import_rss)}
