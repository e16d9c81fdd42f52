"""Presets (issue 9, first slice): `ffn`, `preset=NAME`, the full-depth arithmetic."""
from contextlib import contextmanager

import pytest
import torch

from bot.trials import command as trial_command
from worker import arithmetic, presets, report, spec, summary
from worker.workloads import llm_infer
from worker.workloads.decoder import Decoder

INFER = "llm-infer preset=llama-3-8b layers=2 batch=8 prompt=4096 gen=256 dtype=bf16"


def meta_count(shape: dict) -> int:
    with torch.device("meta"):
        model = Decoder(shape["vocab"], shape["hidden"], shape["layers"], shape["heads"],
                        shape["kv_heads"], arithmetic.ffn_width(shape))
    return sum(t.numel() for t in model.parameters())


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_full_depth_arithmetic_is_the_module_count_and_within_1pct(name):
    shape = presets.full_shape(name)
    ours = arithmetic.weight_params(shape)["total"]
    assert ours == meta_count(shape)
    p = presets.PRESETS[name]
    assert abs(ours - p.published_params) / p.published_params <= presets.TOLERANCE
    assert p.source.count("/") == 1  # a hub model id


def test_the_presets_the_issue_names_are_there():
    assert {"llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2.5-7b"} <= set(
        presets.PRESETS)
    # the well-known exact counts (safetensors totals) of the bias-free ones
    assert arithmetic.weight_params(presets.full_shape("llama-2-7b"))["total"] == 6_738_415_616
    assert arithmetic.weight_params(presets.full_shape("llama-3-8b"))["total"] == 8_030_261_248
    assert arithmetic.weight_params(presets.full_shape("mistral-7b"))["total"] == 7_241_732_096


def test_ffn_defaults_to_4_hidden_and_is_counted():
    p = spec.parse(["llm-infer", "hidden=96", "heads=6", "kv_heads=2", "vocab=300"]).params
    assert p["ffn"] == 0 and arithmetic.ffn_width(p) == 4 * 96
    old = {k: v for k, v in p.items() if k not in ("ffn", "preset")}  # a report from before
    assert arithmetic.weight_params(old) == arithmetic.weight_params(p)
    narrow = spec.parse(["llm-infer", "hidden=96", "heads=6", "kv_heads=2", "vocab=300",
                         "ffn=40", "layers=3"]).params
    assert arithmetic.weight_params(narrow)["total"] == meta_count(narrow)
    assert (arithmetic.weight_params(p)["per_layer"] - arithmetic.weight_params(narrow)["per_layer"]
            == 3 * 96 * (4 * 96 - 40))


class FakeTrial:
    device = "cpu"

    @contextmanager
    def phase(self, name):
        yield

    def sync(self):
        pass


def test_llm_infer_builds_the_decoder_with_ffn(monkeypatch):
    built = []

    class Spy(Decoder):
        def __init__(self, *args):
            built.append(args)
            super().__init__(*args)

    monkeypatch.setattr(llm_infer, "Decoder", Spy)
    p = spec.parse(["llm-infer", "hidden=32", "heads=2", "kv_heads=1", "vocab=64", "ffn=24",
                    "layers=1", "prompt=4", "gen=2", "repeats=1", "stability=0",
                    "warmup=0"]).params
    llm_infer.run(p, FakeTrial())
    assert built == [(64, 32, 1, 2, 1, 24)]


def test_a_preset_fills_the_shape_and_keeps_the_layers():
    s = spec.parse(INFER.split())
    p = s.params
    assert (p["hidden"], p["heads"], p["kv_heads"], p["ffn"], p["vocab"], p["layers"]) == (
        4096, 32, 8, 14336, 128256, 2)
    assert spec.parse(s.words().split()) == s  # the canonical words round-trip
    assert spec.parse(["llm-train", "preset=qwen2.5-7b"]).params["layers"] == 2
    assert spec.parse(["llm-infer", "preset=llama-3-70b", "layers=80"]).params["layers"] == 80
    # the preset's own value is no conflict
    assert spec.parse(["llm-infer", "preset=mistral-7b", "vocab=32000"]).params["vocab"] == 32000
    assert trial_command.parse_trial(INFER).spec == s


@pytest.mark.parametrize("words, token, says", [
    ("llm-infer preset=gpt-9", "preset=gpt-9", "llama-3-8b"),
    ("llm-infer preset=gpt-9", "preset=gpt-9", "qwen2.5-7b"),
    ("llm-infer preset=llama-3-8b layers=33", "layers=33", "32 layers"),
    ("llm-train preset=qwen2.5-7b layers=29", "layers=29", "layers=1..28"),
    ("llm-infer preset=llama-3-8b hidden=1024", "hidden=1024",
     "preset=llama-3-8b sets hidden=4096"),
    ("llm-infer preset=llama-3-8b ffn=0", "ffn=0", "sets ffn=14336"),
    ("llm-train preset=mistral-7b kv_heads=32", "kv_heads=32", "sets kv_heads=8"),
    ("llm-infer hidden=100 heads=3", "heads=3", "divide evenly"),
    ("llm-infer heads=4 kv_heads=3", "kv_heads=3", "multiple of kv_heads"),
])
def test_bad_preset_words_name_the_word(words, token, says):
    with pytest.raises(spec.SpecError) as err:
        spec.parse(words.split())
    assert err.value.token == token
    assert says in err.value.message
    assert err.value.usage.startswith("/trial")


def test_the_report_carries_the_full_depth_arithmetic():
    p = spec.parse(INFER.split()).params
    fd = report.new_report("llm-infer", p)["full_depth"]
    assert fd["params"] == 8_030_261_248 and fd["layers"] == 32 and fd["trial_layers"] == 2
    assert fd["weight_bytes"] == 2 * 8_030_261_248
    assert fd["kv_cache_bytes"] == 2 * 32 * 8 * 128 * (4096 + 256) * 8 * 2
    assert fd["published_params"] == 8_030_000_000
    assert fd["relative_error"] == pytest.approx(261_248 / 8_030_000_000)
    assert fd["source"] == "meta-llama/Meta-Llama-3-8B" and "not measured" in fd["what"]
    # no preset, no block; the measured report stays as it was
    assert "full_depth" not in report.new_report("llm-infer", spec.parse(["llm-infer"]).params)
    assert "full_depth" not in report.new_report("llm-infer", {})


def test_the_summary_labels_it_arithmetic():
    p = spec.parse(INFER.split()).params
    r = report.fail(report.new_report("llm-infer", p), "oom", "CUDA out of memory", "run")
    r["phases"] = []
    facts = dict(summary.facts(r))
    line = facts["full depth (arithmetic, not measured)"]
    assert "llama-3-8b at 32 layers (this trial 2)" in line
    assert "8,030,261,248 params" in line and "8.03B" in line
    assert "2·32·8·128·(4096+256)·8·2" in line and "4.25 GiB" in line
    assert "full depth" in summary.text(r)


def test_old_specs_resolve_without_a_preset():
    old = spec.TrialSpec("llm-infer", {"batch": 2, "hidden": 64, "heads": 2, "kv_heads": 1})
    p = spec.resolve(old).params
    assert p["preset"] == "none" and p["ffn"] == 0
