"""A preset's ffn in a real llm-train child process (the arithmetic: tests/unit/test_presets.py)."""
from worker import arithmetic, launcher, spec


def test_llm_train_counts_the_ffn_it_was_given():
    words = ["llm-train", "layers=2", "hidden=64", "heads=2", "kv_heads=1", "vocab=256",
             "seq=16", "steps=1", "ffn=48", "processes=1"]
    r = launcher.run_trial(spec.parse(words))
    assert r["status"] == "ok", r.get("error")
    assert r["training"]["params"] == arithmetic.weight_params(r["params"])["total"]
