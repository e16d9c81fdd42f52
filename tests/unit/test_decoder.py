"""The decoder's grouped-query attention: SDPA reads the shared K/V heads in place
(enable_gqa) and gives what copying each KV head per query group gives."""
import types

import pytest
import torch
from torch.nn import functional as F

from worker.workloads import decoder
from worker.workloads.decoder import Decoder, generate, rotary_tables

SHAPE = dict(vocab=97, hidden=64, layers=2, heads=8, kv_heads=2, ffn=96)  # 4 heads per KV head


def copying_sdpa(calls):
    """The old path: K and V repeated to the query heads, then plain SDPA."""
    def sdpa(q, k, v, is_causal=False, enable_gqa=False):
        calls.append((q.shape[1], k.shape[1], enable_gqa))
        group = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                              v.repeat_interleave(group, dim=1),
                                              is_causal=is_causal)
    return sdpa


def build(seed=0):
    torch.manual_seed(seed)
    model = Decoder(**SHAPE).eval()
    cos, sin = rotary_tables(SHAPE["hidden"] // SHAPE["heads"], 32, "cpu", torch.float32)
    prompt = torch.randint(0, SHAPE["vocab"], (3, 11), generator=torch.Generator().manual_seed(1))
    return model, cos, sin, prompt


def test_prefill_and_decode_equal_the_copying_path(monkeypatch):
    model, cos, sin, prompt = build()
    tokens, _, _ = generate(model, prompt, 6, cos, sin, lambda: None)
    with torch.inference_mode():
        logits = model(prompt, model.new_cache(3, 11), 0, cos, sin)
    calls = []
    monkeypatch.setattr(decoder, "F", types.SimpleNamespace(
        silu=F.silu, scaled_dot_product_attention=copying_sdpa(calls)))
    ref_tokens, _, _ = generate(model, prompt, 6, cos, sin, lambda: None)
    with torch.inference_mode():
        ref_logits = model(prompt, model.new_cache(3, 11), 0, cos, sin)
    assert calls and all(c == (8, 2, True) for c in calls)  # the decoder asked for GQA, uncopied
    assert torch.equal(tokens, ref_tokens)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)


def test_training_forward_and_gradients_equal_the_copying_path(monkeypatch):
    def loss_and_grads():
        model, cos, sin, prompt = build()
        model.train()
        logits = model.train_forward(prompt, cos, sin)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, SHAPE["vocab"]),
                               prompt[:, 1:].reshape(-1))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss, grads = loss_and_grads()
    monkeypatch.setattr(decoder, "F", types.SimpleNamespace(
        silu=F.silu, scaled_dot_product_attention=copying_sdpa([])))
    ref_loss, ref_grads = loss_and_grads()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for g, ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kv_heads", [8, 1])
def test_no_grouping_and_one_kv_head_still_build_and_run(kv_heads):
    torch.manual_seed(0)
    model = Decoder(**{**SHAPE, "kv_heads": kv_heads}).eval()
    cos, sin = rotary_tables(8, 16, "cpu", torch.float32)
    tokens, _, _ = generate(model, torch.zeros(2, 5, dtype=torch.long), 4, cos, sin, lambda: None)
    assert tokens.shape == (2, 4)
