#!/usr/bin/env python3
"""Issue 18's targets for Hugging Face models (hf-infer), on this CPU.

1. Parameter counts: every shipped config's full-depth count, as trialbot's
   sizing reads it (worker/workloads/hf.py), equals transformers' own
   `num_parameters()` and is within 0.1% of the published figure; a tiny
   Mixtral-like MoE config's count equals transformers' on a real build.
2. Partial depth: `hf-infer` at 2 layers predicts, through the bot's own path
   (bot/fits/depth.from_trial), (a) its own 8-layer host peak and (b) the
   8-layer peak of a plain transformers script that calls generate(),
   measured with /usr/bin/time -v; both within 5%. Same allocator setting
   everywhere: malloc=live, glibc's mmap threshold pinned at 64 KiB.

Shape (as the issue measured it): llama, hidden 1024, 8 heads / 2 KV heads,
ffn 2816, vocab 32000, fp32, batch 4, prompt 512, 16 new tokens.

    python scripts/bench_hf.py [--skip-depth]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from bot.fits import depth  # noqa: E402
from worker import models, presets  # noqa: E402
from worker import spec as specs  # noqa: E402
from worker.launcher import run_trial  # noqa: E402
from worker.launcher.process import LIVE_MMAP_THRESHOLD  # noqa: E402
from worker.workloads import hf  # noqa: E402

SHAPE = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
         "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
         "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False}
MOE = {"model_type": "mixtral", "hidden_size": 128, "intermediate_size": 256,
       "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
       "vocab_size": 1000, "num_local_experts": 8, "num_experts_per_tok": 2}
BATCH, PROMPT, GEN = 4, 512, 16
WORDS = (f"batch={BATCH} prompt={PROMPT} gen={GEN} dtype=fp32 device=cpu malloc=live "
         "warmup=0 repeats=2 stability=0")
PLAIN = """
import sys, torch, transformers
cfg = transformers.AutoConfig.from_pretrained(sys.argv[1])
model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
ids = torch.randint(0, cfg.vocab_size, ({batch}, {prompt}))
with torch.inference_mode():
    for _ in range(2):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens={gen},
                             min_new_tokens={gen}, do_sample=False, pad_token_id=0)
assert out.shape[1] == {prompt} + {gen}
"""


def counts() -> bool:
    ok = True
    print(f"{'model':<12} {'transformers':>15} {'trialbot sizing':>16} {'published':>10} "
          f"{'vs published':>12}")
    for name, p in presets.PRESETS.items():
        cfg, source, full = hf.config(name)
        with torch.device("meta"):
            own = transformers.AutoModelForCausalLM.from_config(cfg).num_parameters()
        s = hf.sizing(cfg, full, source, transformers.__version__)
        err = (s["total"] - p.published_params) / p.published_params
        ok &= s["total"] == own and abs(err) <= 0.001
        print(f"{name:<12} {own:>15,} {s['total']:>16,} {p.published_text:>10} {err:>+12.4%}")
    with tempfile.TemporaryDirectory() as d:
        Path(d, "moe.json").write_text(json.dumps(MOE))
        os.environ[models.ENV_DIRS] = d
        cfg, source, full = hf.config("moe")
        own = transformers.AutoModelForCausalLM.from_config(cfg).num_parameters()  # real
        s = hf.sizing(cfg, full, source, transformers.__version__)
        ok &= s["total"] == own
        print(f"{'tiny MoE':<12} {own:>15,} {s['total']:>16,} {'(8 experts, 2 per token; '}"
              "real build)")
    print(("PASS" if ok else "FAIL") + " counts equal transformers' own; within 0.1% of "
          "the published figure")
    return ok


def max_rss(argv: list[str], env: dict) -> int:
    done = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True,
                          env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{argv} failed:\n{done.stderr[-2000:]}")
    kib = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return int(kib.group(1)) * 1024


def partial_depth() -> bool:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "shape").mkdir()
        Path(d, "shape", "config.json").write_text(json.dumps(SHAPE))
        os.environ[models.ENV_DIRS] = d
        reports = {}
        for layers in (2, 8):
            r = run_trial(specs.parse(["hf-infer", "model=shape", f"layers={layers}",
                                       *WORDS.split()]))
            if r["status"] != "ok":
                raise SystemExit(f"hf-infer layers={layers} failed: {r['error']}")
            reports[layers] = r
        script = Path(d, "plain.py")
        script.write_text(PLAIN.format(batch=BATCH, prompt=PROMPT, gen=GEN))
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(LIVE_MMAP_THRESHOLD)}
        plain = max_rss([sys.executable, str(script), str(Path(d, "shape"))], env)
    pred = depth.from_trial({**reports[2], "trial": "layers=2"})
    ok = True
    print(f"\npartial depth, {WORDS}; shape {SHAPE['hidden_size']}/{SHAPE['num_attention_heads']}"
          f"/{SHAPE['num_key_value_heads']}, transformers {transformers.__version__}")
    print(f"  per layer by arithmetic: {pred['per_layer']['total'] / 2**20:.2f} MiB "
          f"({pred['per_layer']['weights'] / 2**20:.2f} weights + "
          f"{pred['per_layer']['kv'] / 2**20:.2f} KV)")
    # The kernel's figure apart only where it is not already host_rss_peak (bot/fits/depth.py).
    for method in [m for m in ("host_rss_peak_kernel", "host_rss_peak") if m in pred["memory"]]:
        p = pred["memory"][method]["predicted"]
        own = reports[8]["memory"][method]
        e_own = p / own - 1
        line = (f"  {method:<21} measured at 2: {reports[2]['memory'][method] / 2**20:8.1f} MiB;"
                f" predicted at 8: {p / 2**20:8.1f}; hf-infer at 8: {own / 2**20:8.1f} "
                f"({e_own:+.2%})")
        ok &= abs(e_own) <= 0.05
        if method == "host_rss_peak_kernel" or "host_rss_peak_kernel" not in pred["memory"]:
            e_plain = p / plain - 1
            ok &= abs(e_plain) <= 0.05
            line += f"; plain generate() script (/usr/bin/time -v): {plain / 2**20:8.1f} " \
                    f"({e_plain:+.2%})"
        print(line)
    imported = reports[2]["model"]["import_rss_bytes"]
    print(f"  importing transformers added {imported / 2**20:.0f} MiB of host RSS in the trial")
    print(("PASS" if ok else "FAIL") + " 2 layers predict the 8-layer host peak within 5% "
          "(hf-infer's own and the plain script's)")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-depth", action="store_true", help="the counts only (seconds)")
    args = ap.parse_args()
    ok = counts()
    if not args.skip_depth:
        ok &= partial_depth()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
