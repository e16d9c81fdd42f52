"""The KV cache per token, per architecture, against the tensors transformers
really stores: a tiny random model of each built from its own config class
(CPU, nothing downloaded), one forward with use_cache=True over a prompt
longer than any window, and the bytes of every tensor left in the cache
(keys, values, conv and recurrent states) summed layer by layer. The config
reaches worker/kvcache.py as worker/models.py reads a saved config.json, and
reaches the sizing the bot's fits read through hf.sizing."""
import pytest

from worker import arithmetic, kvcache, models

transformers = pytest.importorskip("transformers")  # CI installs trialbot[hf]
torch = pytest.importorskip("torch")

from worker.workloads import hf  # noqa: E402 - needs transformers

PROMPT = 20  # longer than every window below (8)
BASE = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}
MLA = {**BASE, **MOE, "num_key_value_heads": 4,  # MLA's expansion needs kv_heads = heads
       "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
       "n_routed_experts": 4, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
# architecture: (model_type, config, the rule that must hold, elements per token per layer)
TABLE = {
    "Llama": ("llama", BASE, "2·kv_heads·head_dim", 64),
    "Mistral": ("mistral", {**BASE, "sliding_window": 8}, "window−1 = 7 positions", 64),
    "Qwen2": ("qwen2", {**BASE, "use_sliding_window": True, "sliding_window": 8,
                        "max_window_layers": 2}, "2 sliding_attention", 64),
    "Qwen3": ("qwen3", {**BASE, "head_dim": 32}, "2·kv_heads·head_dim = 2·2·32", 128),
    "Gemma2": ("gemma2", {**BASE, "head_dim": 16, "sliding_window": 8},
               "2 sliding_attention (64 per token, at most window−1 = 7", 64),
    "Gemma3 (text)": ("gemma3_text", {**BASE, "head_dim": 16, "sliding_window": 8,
                                      "sliding_window_pattern": 2}, "2 full_attention", 64),
    "Phi3": ("phi3", {**BASE, "sliding_window": 8, "pad_token_id": 0}, "window−1", 64),
    "GPT-NeoX": ("gpt_neox", {"hidden_size": 64, "intermediate_size": 96,
                              "num_hidden_layers": 2, "num_attention_heads": 4,
                              "vocab_size": 128}, "2·4·16", 128),
    "GPT-2": ("gpt2", {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 128,
                       "bos_token_id": 0, "eos_token_id": 0}, "2·4·16", 128),
    "OPT": ("opt", {"hidden_size": 64, "ffn_dim": 96, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "vocab_size": 128, "word_embed_proj_dim": 64},
            "2·4·16", 128),
    "Falcon (multi-query)": ("falcon", {"hidden_size": 64, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "vocab_size": 128},
                             "2·1·16", 32),
    "Falcon (new decoder)": ("falcon", {"hidden_size": 64, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "vocab_size": 128,
                                        "new_decoder_architecture": True, "num_kv_heads": 2},
                             # before 5.25.0 its cache held the KV heads broadcast to all 4
                             *(("2·2·16", 64) if kvcache._version(transformers.__version__)
                               >= kvcache.FALCON_GROUPED else ("2·4·16", 128))),
    "Mixtral": ("mixtral", {**BASE, "num_local_experts": 4, "num_experts_per_tok": 2,
                            "sliding_window": 8}, "window−1", 64),
    "Qwen2-MoE": ("qwen2_moe", {**BASE, **MOE, "num_experts": 4,
                                "shared_expert_intermediate_size": 32}, "2·2·16", 64),
    "DeepSeek-V2": ("deepseek_v2", {**MLA, "q_lora_rank": None},
                    "MLA kv_lora_rank+qk_rope_head_dim = 32+8", 40),
    "DeepSeek-V3": ("deepseek_v3", {**MLA, "q_lora_rank": 48},
                    "MLA kv_lora_rank+qk_rope_head_dim = 32+8", 40),
    "Qwen3-Next (linear attention)": (
        "qwen3_next", {**BASE, **MOE, "head_dim": 16, "num_experts": 4,
                       "shared_expert_intermediate_size": 32, "linear_num_value_heads": 4,
                       "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                       "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4},
        "3 linear_attention (no per-token cache); state conv (2·32+64)·4 = 512 + recurrent "
        "4·16·16 = 1024 in float32",
        64),
    "LFM2 (convolution)": ("lfm2", {**BASE, "layer_types": ["conv", "full_attention"] * 2},
                           "state conv hidden·conv_L_cache = 64·3", 64),
}


def stored(cache) -> list[int]:
    """Bytes of every tensor each cache layer holds."""
    out = []
    for layer in cache.layers:
        tensors = [getattr(layer, k, None) for k in ("keys", "values")]
        for states in ("conv_states", "recurrent_states"):
            tensors += list((getattr(layer, states, None) or {}).values())
        out.append(sum(t.numel() * t.element_size() for t in tensors
                       if isinstance(t, torch.Tensor)))
    return out


def forward(cfg, dtype=torch.float32, **kwargs):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    with torch.no_grad():
        return model(torch.randint(1, 100, (2, PROMPT)), use_cache=True, **kwargs).cache


def saved(cfg, tmp_path) -> dict:
    cfg.save_pretrained(tmp_path)
    return models.read(tmp_path / "config.json")


@pytest.mark.parametrize("arch", list(TABLE))
def test_the_sizing_equals_what_transformers_stores(arch, tmp_path):
    model_type, config, rule, per_layer = TABLE[arch]
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    got = stored(forward(cfg))
    shape = kvcache.shape(saved(cfg, tmp_path), transformers=transformers.__version__)
    assert rule in shape.how, shape.how
    attending = [x.per_token for x in shape.layers if x.per_token]
    assert attending and set(attending) == {per_layer}
    # layer by layer, batch 2, fp32: what the forward left in each layer's tensors
    assert [2 * x.bytes(PROMPT, 4) for x in shape.layers] == got
    # the worker's sizing (what "fits on", "largest batch" and the fits read) agrees
    s = hf.sizing(cfg, cfg.num_hidden_layers, {"name": arch, "source": "test"},
                  transformers.__version__)
    assert arithmetic.sized_kv(s, PROMPT, 4) * 2 == sum(got)
    assert s["kv_how"] == shape.how


@pytest.mark.parametrize("arch", ["Gemma2", "DeepSeek-V2", "Qwen3-Next (linear attention)"])
def test_in_bf16_the_cache_halves_but_a_recurrent_state_stays_float32(arch):
    model_type, config, _, _ = TABLE[arch]
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    got = stored(forward(cfg, torch.bfloat16))
    assert [2 * x.bytes(PROMPT, 2) for x in kvcache.shape(cfg.to_dict()).layers] == got


def test_a_static_cache_keeps_the_whole_window():
    cfg = transformers.AutoConfig.for_model("mistral", **BASE, sliding_window=8)
    cache = transformers.StaticCache(config=cfg, max_cache_len=PROMPT)
    got = stored(forward(cfg, cache=cache))
    shape = kvcache.shape(cfg.to_dict(), cache="static")
    assert [x.keeps for x in shape.layers] == [8] * 4 and "at most window = 8" in shape.how
    assert sum(got) == 2 * shape.bytes(PROMPT, 4)


def test_a_recurrent_state_is_fixed_whatever_the_length(tmp_path):
    _, config, _, _ = TABLE["LFM2 (convolution)"]
    cfg = transformers.AutoConfig.for_model("lfm2", **config)
    shape = kvcache.shape(saved(cfg, tmp_path))
    assert shape.state_bytes(4) == 2 * 64 * 3 * 4 and shape.per_token_bytes(4) == 2 * 64 * 4
    assert shape.bytes(1000, 4) - shape.bytes(999, 4) == shape.per_token_bytes(4)


def test_the_old_formula_was_wrong_where_the_issue_said():
    """2·kv_heads·head_dim read 64 elements for the tiny DeepSeek-V3 where 40 are
    stored, and 16,384 against 576 (28×) at DeepseekV3Config's defaults."""
    tiny = transformers.AutoConfig.for_model("deepseek_v3", **TABLE["DeepSeek-V3"][1])
    old = 2 * tiny.num_key_value_heads * tiny.head_dim
    assert (old, kvcache.shape(tiny.to_dict()).layers[0].per_token) == (64, 40)
    full = transformers.DeepseekV3Config()
    old = 2 * full.num_key_value_heads * full.head_dim
    assert (old, kvcache.shape(full.to_dict()).layers[0].per_token) == (16384, 576)
