"""A decoder-only transformer in plain PyTorch, shaped like Llama-family models:
RMSNorm, rotary position embeddings, grouped-query attention, gated (SwiGLU)
feed-forward, and a preallocated KV cache for prefill then decode.

Weights are random: a trial measures memory and time, which depend on the
shapes, not on what the weights learned.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def rotary_tables(head_dim: int, positions: int, device, dtype, base: float = 10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(positions, device=device).float(), inv)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x, cos, sin):
    # x: [batch, heads, seq, head_dim]; cos/sin: [seq, head_dim/2]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = hidden // heads
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, cache_k, cache_v, start: int):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache_k is None:  # training: the whole sequence at once, no cache
            keys, values = k, v
        else:
            cache_k[:, :, start:start + s] = k
            cache_v[:, :, start:start + s] = v
            keys, values = cache_k[:, :, :start + s], cache_v[:, :, :start + s]
        # Grouped-query attention: each KV head serves heads/kv_heads query heads.
        # enable_gqa lets SDPA read the shared heads in place, as real models'
        # SDPA path does; copying K and V per group was memory and decode time
        # only this proxy paid. Prefill is causal; a single decode token may
        # attend to the whole cache.
        out = F.scaled_dot_product_attention(q, keys, values, is_causal=s > 1,
                                             enable_gqa=self.heads != self.kv_heads)
        return self.o(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn):
        super().__init__()
        self.attn_norm = RMSNorm(hidden)
        self.attn = Attention(hidden, heads, kv_heads)
        self.ffn_norm = RMSNorm(hidden)
        self.ffn = FeedForward(hidden, ffn)

    def forward(self, x, cos, sin, cache_k, cache_v, start):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache_k, cache_v, start)
        return x + self.ffn(self.ffn_norm(x))


class Decoder(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, kv_heads, ffn):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.kv_heads, self.head_dim = kv_heads, hidden // heads

    def new_cache(self, batch: int, positions: int):
        """One K and one V tensor per layer: 2·layers·kv_heads·head_dim·positions·batch
        elements, the KV-cache size the planner's arithmetic uses."""
        p = self.lm_head.weight
        shape = (batch, self.kv_heads, positions, self.head_dim)
        return [(torch.empty(shape, device=p.device, dtype=p.dtype),
                 torch.empty(shape, device=p.device, dtype=p.dtype)) for _ in self.blocks]

    def forward(self, tokens, cache, start: int, cos, sin):
        x = self.embed(tokens)
        s = tokens.shape[1]
        c, sn = cos[start:start + s], sin[start:start + s]
        for block, (ck, cv) in zip(self.blocks, cache):
            x = block(x, c, sn, ck, cv, start)
        # Only the last position's logits are needed to pick the next token.
        return self.lm_head(self.norm(x[:, -1:]))

    def train_forward(self, tokens, cos, sin, checkpointing: bool = False):
        """Logits for every position, as training needs. With `checkpointing`
        each block's activations are recomputed in the backward pass instead of
        kept (torch.utils.checkpoint, one checkpoint per transformer layer)."""
        from torch.utils.checkpoint import checkpoint
        x = self.embed(tokens)
        s = tokens.shape[1]
        c, sn = cos[:s], sin[:s]
        for block in self.blocks:
            if checkpointing:
                x = checkpoint(block, x, c, sn, None, None, 0, use_reentrant=False)
            else:
                x = block(x, c, sn, None, None, 0)
        return self.lm_head(self.norm(x))


@torch.inference_mode()
def generate(model: Decoder, prompt, gen: int, cos, sin, sync):
    """Greedy generation; returns (tokens, time to first token, decode seconds)."""
    import time

    batch, length = prompt.shape
    cache = model.new_cache(batch, length + gen)
    t0 = time.perf_counter()
    logits = model(prompt, cache, 0, cos, sin)
    token = logits.argmax(-1)
    sync()
    t_first = time.perf_counter()
    out = [token]
    for step in range(1, gen):
        logits = model(token, cache, length + step - 1, cos, sin)
        token = logits.argmax(-1)
        out.append(token)
    sync()
    t_end = time.perf_counter()
    return torch.cat(out, dim=1), t_first - t0, t_end - t_first
