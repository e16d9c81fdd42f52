"""hf-infer and hf-train: Hugging Face models' own code, random weights from a
config, run in real child processes on the CPU with tiny configs; their sizing
against transformers' own counts; and every bad model word refused by name."""
import json
import subprocess
import sys

import pytest

from bot import commands
from bot.app.runtime import context
from bot.fits import depth
from bot.store import Store
from bot.trials import command as trial_command
from worker import models, presets
from worker import spec as specs
from worker.launcher import run_trial

transformers = pytest.importorskip("transformers")  # CI installs trialbot[hf]
torch = pytest.importorskip("torch")

from worker.workloads import hf  # noqa: E402 - needs transformers

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 500, "tie_word_embeddings": False}
# Mixtral-like: 4 experts, 2 per token, sliding-window attention
MOE = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
       "vocab_size": 400, "num_local_experts": 4, "num_experts_per_tok": 2,
       "sliding_window": 16}
# Gemma2's class does not support sdpa (transformers' _supports_sdpa = False)
GEMMA2 = {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128, "head_dim": 16,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 256, "sliding_window": 16}
MID = {**TINY, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4}
QUICK = "prompt=8 gen=4 repeats=2 stability=0 warmup=1 malloc=glibc device=cpu processes=1"


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "tiny").mkdir()
    (root / "tiny" / "config.json").write_text(json.dumps(TINY))
    (root / "moe.json").write_text(json.dumps(MOE))
    (root / "mid.json").write_text(json.dumps(MID))
    (root / "gem.json").write_text(json.dumps(GEMMA2))
    (root / "t5.json").write_text(json.dumps({"model_type": "t5", "d_model": 32}))
    (root / "junk.json").write_text("{not json")
    return root


@pytest.fixture
def allowed(configs, monkeypatch):
    monkeypatch.setenv(models.ENV_DIRS, str(configs))
    monkeypatch.setenv(models.ENV_HUB, "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return configs


def trial(words: str) -> dict:
    return run_trial(specs.parse(words.split()))


def hf_count(config: dict, layers: int | None = None) -> int:
    """transformers' own count: a real model built from the config."""
    cfg = transformers.AutoConfig.for_model(**config)
    if layers:
        cfg.num_hidden_layers = layers
    return transformers.AutoModelForCausalLM.from_config(cfg).num_parameters()


# --- sizing ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_a_shipped_config_counts_as_transformers_and_the_published_figure(name):
    cfg, source, full = hf.config(name)
    s = hf.sizing(cfg, full, source, transformers.__version__)
    with torch.device("meta"):
        own = transformers.AutoModelForCausalLM.from_config(cfg).num_parameters()
    assert s["total"] == own
    preset = presets.get(name)
    assert abs(s["total"] - preset.published_params) / preset.published_params < 0.001
    assert s["layers"] == preset.layers == full
    # The decoder's arithmetic agrees except for what it leaves out (qwen's q/k/v biases).
    from worker import arithmetic
    ours = arithmetic.weight_params({**presets.full_shape(name), "layers": preset.layers})
    assert s["total"] - ours["total"] == (28 * (3584 + 2 * 512)
                                          if preset.qkv_bias else 0)


def test_sizing_reads_layers_experts_and_windows(allowed):
    cfg, source, full = hf.config("moe")
    s = hf.sizing(cfg, full, source, transformers.__version__)
    assert s["total"] == hf_count(MOE)
    assert len(s["layer_params"]) == 2 and s["experts"] == {"experts": 4, "per_token": 2}
    assert s["kv"] == [{"kind": "sliding_attention", "elements": 2 * 2 * 16, "keeps": 15,
                        "state": 0, "state_fp32": 0}] * 2
    from worker import arithmetic
    # transformers' dynamic cache keeps window − 1 = 15 positions (tests/test_kvcache.py)
    assert arithmetic.sized_kv(s, 100, 4) == 2 * 64 * 15 * 4
    assert arithmetic.sized_params(s, 1)["total"] == hf_count(MOE, layers=1)


# --- trials ----------------------------------------------------------------------

def test_hf_infer_runs_a_tiny_llama_with_the_llm_infer_report(allowed):
    r = trial(f"hf-infer model=tiny layers=2 batch=2 cache=static {QUICK}")
    assert r["status"] == "ok", r["error"]
    assert [p["name"] for p in r["phases"]] == ["setup", "weights", "data", "warmup", "run"]
    for key in ("headline", "latency", "ttft", "decode_per_token", "throughput", "windows",
                "scale", "stability", "quality_probe"):
        assert r[key] is not None, key
    assert r["ttft"]["mean"] < r["latency"]["mean"]
    assert r["scale"]["requests"] == 2
    assert r["model"]["layers"] == 2 and r["model"]["full_layers"] == 3
    assert r["model"]["architecture"] == "LlamaForCausalLM"
    fd = r["full_depth"]
    assert fd["params"] == hf_count(TINY) and fd["layers"] == 3 and fd["trial_layers"] == 2
    # one trial predicts its full depth: measured + the third layer's weights and KV
    pred = depth.from_trial({**r, "trial": "T1"})
    s = fd["sizing"]
    layer = s["layer_params"][2] * 4 + 2 * 2 * 16 * (8 + 4) * 2 * 4
    for v in pred["memory"].values():
        assert v["predicted"] == v["measured"] + layer
    assert depth.partial({**r, "trial": "T1"}) == "T1: 2 of 3 layers of tiny"
    assert "importing transformers" in pred["what"]


def test_a_mixture_of_experts_runs_and_counts_as_transformers(allowed):
    r = trial(f"hf-infer model=moe layers=1 {QUICK}")
    assert r["status"] == "ok", r["error"]
    assert r["full_depth"]["params"] == hf_count(MOE)
    assert r["scale"]["gen_tokens"] == 4
    pred = depth.from_trial(r)
    assert "mixture of 4 experts" in pred["decode"]["experts"]


def test_hf_train_trains_with_gradient_checkpointing_over_zero1_ranks(allowed):
    r = trial("hf-train model=tiny layers=2 batch=2 seq=16 steps=3 warmup=1 zero=1 world=2 "
              "checkpointing=full attn=eager malloc=glibc device=cpu processes=1")
    assert r["status"] == "ok", r["error"]
    t = r["training"]
    assert t["params"] == hf_count(TINY, layers=2) and t["checkpointing"] == "full"
    # the spawned rank built the same model (its own make) and holds half the states
    assert [x["shard_params"] for x in t["ranks"]] and sum(
        x["shard_params"] for x in t["ranks"]) == t["params"]
    assert t["loss_final"] < t["loss_first"]  # AdamW on one fixed batch
    assert r["full_depth"]["params"] == hf_count(TINY)


@pytest.mark.parametrize("model, layers, attn, says", [
    ("t5", 0, "sdpa", "cannot build this model as a causal LM"),
    ("tiny", 7, "sdpa", "tiny has 3 layers; use layers=1..3"),
    ("org/name", 0, "sdpa", "may not fetch configs from the Hugging Face hub"),
    ("nothing", 0, "sdpa", "is not a preset"),
    ("tiny", 0, "flash_attention_2", "flash-attn is not installed"),
    ("gem", 0, "sdpa", r"`model=gem` \(Gemma2ForCausalLM\) does not support attn=sdpa in "
                       r"transformers .*; use attn=eager$"),  # flash-attn is not installed
])
def test_the_worker_refuses_what_it_cannot_build_and_says_how(allowed, model, layers, attn,
                                                               says):
    from worker.workloads import Unsupported
    with pytest.raises(Unsupported, match=says):
        cfg, _, _ = hf.config(model, layers)
        hf.build(cfg, "fp32", "cpu", attn, 0, model)


def test_a_refused_model_is_an_unsupported_trial_not_a_crash(allowed):
    r = trial(f"hf-infer model=tiny layers=7 {QUICK}")
    assert r["status"] == "failed" and r["error"]["class"] == "unsupported"
    assert "tiny has 3 layers" in r["error"]["message"]


def test_a_config_path_may_not_leave_the_allowed_directory(configs, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(TINY))
    (configs / "link.json").symlink_to(outside)
    for name in ("../outside", str(outside), "link"):
        with pytest.raises(models.ModelError, match="is not a preset"):
            models.resolve(name, [str(configs)], hub=False)
    (configs / "link.json").unlink()
    assert models.resolve("tiny", [str(configs)], hub=False)["kind"] == "file"
    assert models.resolve("mistral-7b", [], hub=False)["kind"] == "preset"


def test_the_local_command_takes_a_config_path(configs, tmp_path):
    done = subprocess.run([sys.executable, "-m", "worker.cli", "trial", "hf-infer",
                           f"model={configs / 'tiny'}", *QUICK.split(), "--json"],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
                               "PYTHONPATH": str(__import__("pathlib").Path(__file__)
                                                 .parents[2])}, cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["status"] == "ok", report["error"]
    assert report["model"]["name"] == "tiny" and str(configs) in report["model"]["source"]


# --- the bot's side ----------------------------------------------------------------

@pytest.fixture(scope="module")
def caps(configs):
    return models.capabilities([str(configs)], hub=False)  # asks a child: once


def test_the_worker_registers_what_it_can_build(caps):
    assert caps["transformers"] == transformers.__version__ and caps["hub"] is False
    assert caps["models"]["tiny"] == {"model_type": "llama", "layers": 3, "architectures": [],
                                      "attn": ["sdpa", "eager", "flash_attention_2"]}
    # what transformers' Gemma2ForCausalLM supports, without sdpa
    assert caps["models"]["gem"]["attn"] == ["eager", "flash_attention_2"]
    assert "cannot build" in caps["models"]["t5"]["error"]
    assert "not valid JSON" in caps["models"]["junk"]["error"]


@pytest.fixture
def ctx(tmp_path, caps):
    ctx = context(Store(str(tmp_path / "r.db")))
    ctx.store.upsert_worker("plain", {"gpus": [], "device": "cpu", "cpus": 2})
    ctx.store.upsert_worker("hf-box", {"gpus": [], "device": "cpu", "cpus": 2, "hf": caps})
    return ctx


@pytest.mark.parametrize("words, says", [
    ("hf-infer", "hf-infer needs model="),
    ("hf-infer model=mistral-7b layers=33", "mistral-7b has 32 layers"),
    ("hf-infer model=tiny layers=4", "has `model=tiny` with 3 layers"),
    ("hf-infer model=t5", "cannot build `model=t5`"),
    ("hf-infer model=nope", "has no config named `model=nope`"),
    ("hf-infer model=org/name", "may not fetch `model=org/name` from the hub"),
    ("hf-infer model=tiny attn=flash_attention_2", "has no flash-attn"),
    ("hf-infer model=gem", "hf-box cannot run `model=gem` with attn=sdpa: its transformers "
                           "class does not support it; use attn=eager;"),
    ("hf-infer model=../etc", "must be text matching"),
    ("sweep hf-infer model=tiny layers=0,1,2", "`layers=0`"),
])
def test_the_bot_refuses_what_no_worker_can_run_before_queueing(ctx, words, says):
    reply, job = commands.trial(ctx, words, "U1", "C1")
    assert job is None and says in reply["text"], reply["text"]
    assert ctx.store.jobs() == []


def test_trial_workers_lists_what_each_can_build(ctx):
    reply, _ = commands.trial(ctx, "workers", "U1", "C1")
    line = next(x for x in reply["text"].splitlines() if "hf-box" in x)
    assert f"transformers {transformers.__version__}" in line
    assert "models `gem` (attn=eager/flash_attention_2), `mid`, `moe`, `tiny`" in line
    assert "cannot build `junk`, `t5`" in line


def test_a_worker_without_transformers_is_named(ctx):
    ctx.store.upsert_worker("hf-box", {"gpus": [], "device": "cpu", "cpus": 2})
    reply, job = commands.trial(ctx, "hf-infer model=mistral-7b layers=1", "U1", "C1")
    assert job is None and "pip install 'trialbot[hf]'" in reply["text"]


def test_the_attn_a_model_supports_is_queued_where_the_default_is_refused(ctx):
    reply, job = commands.trial(ctx, "hf-infer model=gem attn=eager", "U1", "C1")
    assert job is not None, reply["text"]
    assert ctx.queue.lease("hf-box", 0)["id"] == job["id"]


def test_what_a_worker_can_build_is_queued_and_routed_to_it(ctx):
    reply, job = commands.trial(ctx, "hf-infer model=tiny layers=2", "U1", "C1")
    assert job is not None, reply["text"]
    assert ctx.queue.lease("plain", 0) is None  # no transformers there
    assert ctx.queue.lease("hf-box", 0)["id"] == job["id"]


def test_a_depth_sweep_and_a_ladder_take_hf_workloads():
    cmd = trial_command.parse_trial("sweep hf-infer model=mistral-7b layers=1,2,4", {})
    assert [s.params["layers"] for s in cmd.specs] == [1, 2, 4]
    cmd = trial_command.parse_trial("ladder hf-train model=mistral-7b layers=1", {})
    assert [s.workload for s in cmd.specs] == ["hf-train"] * 4


def test_a_depth_sweep_of_an_hf_model_fits_and_predicts_its_full_depth(allowed):
    from bot.fits import sweep
    words = QUICK.replace("malloc=glibc", "malloc=live")
    reports = [{**trial(f"hf-infer model=mid layers={n} {words}"), "trial": f"T{n}"}
               for n in (1, 3)]
    fit = sweep.fit_sweep(reports)
    assert fit["kind"] == "depth" and fit["preset"] == "mid" and not fit["error"], fit["error"]
    pred = depth.from_sweep(fit)
    assert pred["layers"] == 4  # the config's depth, from transformers' sizing
    per = fit["per_layer"]["total"]
    # The kernel's max RSS is not informative when this test process has peaked higher
    # (Linux counts the parent's peak at exec: both depths then read the same, and that
    # fit has an error): then the sampled peak. When it is the child's own, host_rss_peak
    # is that figure (the child ran alone) and the fit keeps no second copy of it.
    kernel = fit["memory"].get("host_rss_peak_kernel") or {"error": "not measured"}
    method = "host_rss_peak" if kernel.get("error") else "host_rss_peak_kernel"
    got = depth.slope(fit["memory"][method])
    assert 0.8 * per < got < 1.5 * per  # what one more layer cost, near the arithmetic


def test_a_registration_with_a_malformed_hf_block_is_refused(caps):
    from bot.http.workerapi import check_info
    assert check_info({"hf": caps}) is None
    for bad in ({"models": ["tiny"]}, {"hub": "yes"}, {"transformers": 5}, "all"):
        assert "`info.hf` must be" in check_info({"hf": bad})


def test_a_hub_id_the_worker_cannot_reach_is_refused_by_name(allowed, monkeypatch):
    from worker.workloads import Unsupported
    monkeypatch.setenv(models.ENV_HUB, "1")  # allowed, but offline: as a box without a route
    import huggingface_hub.constants  # read once at import: the env alone is too late here
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(Unsupported, match="the hub's config could not be read .* --models"):
        hf.config("some-org/some-model")


def test_a_trial_child_is_offline_unless_the_operator_allows_the_hub(monkeypatch):
    from worker.launcher.process import builtin_env
    spec = specs.parse(["hf-infer", "model=mistral-7b"])
    monkeypatch.setenv(models.ENV_HUB, "0")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert builtin_env(spec)["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setenv(models.ENV_HUB, "1")
    assert "HF_HUB_OFFLINE" not in builtin_env(spec)
