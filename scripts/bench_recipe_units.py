#!/usr/bin/env python3
"""Issue 30's runs in the researcher's units: a speculative-decoding-like
script (a small draft model proposes 4 tokens, a larger target checks them)
run as a recipe with `unit = "forward"`. Its calls are told apart by model and
checked against the script's own count and timers; the whole program's time
is set beside the script's own total; the spread is judged per model, and the
mix's spread (what a report showed before) is printed beside it; the plan's
block line is the one /plan prints.

The draft is a tiny random Llama saved with save_pretrained
(tests/programs/hf_tiny.py), the target a larger random Llama the script
builds. Each repeat is a fresh recipe trial through the worker's launcher.

    python scripts/bench_recipe_units.py [--repeats 3] [--rounds 24]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.plans import estimate  # noqa: E402
from worker import launcher, recipes, stats  # noqa: E402
from worker.spec import parse  # noqa: E402

SCRIPT = """\
import json
import sys
import time

start = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

draft = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
target = LlamaForCausalLM(LlamaConfig(
    hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=1000)).eval()
ids = torch.tensor([[5, 6, 7, 8]])
own = {{"draft": [], "target": []}}
with torch.no_grad():
    draft(ids)  # warmup
    for _ in range({rounds}):
        for _ in range(4):
            t = time.perf_counter()
            logits = draft(ids).logits
            own["draft"].append(time.perf_counter() - t)
            ids = torch.cat([ids, logits[:, -1:].argmax(-1)], 1)
        t = time.perf_counter()
        target(ids)
        own["target"].append(time.perf_counter() - t)
print("OWN " + json.dumps({{**own, "total": time.perf_counter() - start}}))
"""


def trial(book: dict, spec) -> tuple[dict, dict]:
    r = launcher.run_trial(spec, recipes=book)
    if r["status"] != "ok":
        raise SystemExit(f"trial failed: {r['error']}")
    own = json.loads(next(line[4:] for line in r["output_tail"].splitlines()
                          if line.startswith("OWN ")))
    return r, own


def compare(r: dict, own: dict) -> tuple[bool, float]:
    """Prints each model's calls against the script's own; (counts equal, worst error)."""
    draft, target = r["units"]["models"]
    ok, worst = True, 0.0
    for name, model, mine in (("draft", draft, own["draft"]), ("target", target, own["target"])):
        mean = sum(mine) / len(mine)
        err = model["mean"] / mean - 1
        worst = max(worst, abs(err))
        ok &= model["count"] == len(mine)
        print(f"  {name:<6} {model['model']:<20} {model['params']:>10,} params  "
              f"{model['count']:>4} calls (script {len(mine):>4})  "
              f"mean {model['mean'] * 1e3:7.3f} ms "
              f"(script {mean * 1e3:7.3f} ms, {err:+.2%})  IQR/median "
              f"{model['iqr_over_median']:.1%}")
    mix = stats.iqr_ratio(own["draft"] + own["target"])
    print(f"  the mix's IQR/median (one distribution, as before): {mix:.1%}; the report's "
          f"stability, judged per model: {r['stability']['iqr_over_median']:.1%}")
    program = r["units"]["program"]["seconds"]
    print(f"  whole program {program:.3f} s; the script's own timer (after `import time`) "
          f"{own['total']:.3f} s; the interpreter's start and exit around it "
          f"{program - own['total']:+.3f} s")
    return ok, worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="recipe trials (default 3)")
    ap.add_argument("--rounds", type=int, default=24, help="draft-and-check rounds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ckpt = Path(d, "ckpt")
        subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "hf_tiny.py"),
                        str(ckpt)], check=True, capture_output=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
        Path(d, "spec.py").write_text(SCRIPT.format(rounds=args.rounds))
        Path(d, "recipes.toml").write_text(textwrap.dedent(f"""
            [recipes.spec]
            cwd = "{d}"
            argv = ["{{python}}", "spec.py", "{ckpt}"]
            env = {{ HF_HUB_OFFLINE = "1", TOKENIZERS_PARALLELISM = "false" }}
            timeout = "10m"
            unit = "forward"
            """))
        book = recipes.load(str(Path(d, "recipes.toml")))
        spec = parse(["recipe", "spec"], {"spec": book["spec"].workload()})
        ok, worst = True, 0.0
        for i in range(args.repeats):
            print(f"trial {i}:")
            r, own = trial(book, spec)
            counted, err = compare(r, own)
            ok, worst = ok and counted, max(worst, err)
        block = {"kind": "baseline", "runs": 1000, "configs": 1, "gpus": 1}
        e = estimate.estimate_block(block, [{"id": 1, "trial": "T1", "status": "done",
                                             "report": {**r, "status": "ok"}}], {}, {}, True)
        print("plan block, runs:", next(c["source"] for c in e["components"]
                                        if c["name"] == "runs"))
    ok &= worst <= 0.05
    print(f"per-model mean vs the script's own timers: worst {worst:.2%} over {args.repeats} "
          f"trials of {args.rounds} rounds")
    print(("PASS" if ok else "FAIL") + " calls counted per model as the script counts them, "
          "means within 5% of its own timers")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
