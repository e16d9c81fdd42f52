#!/usr/bin/env python3
"""Issue 18's target for unmodified paper code: a script with no marks, run as
a recipe, gets weights, data, warmup and run phases from the probe's hooks;
its run count equals its generate() calls in the timed loop; and the run
phase's time agrees with the script's own timing within 5%.

The script is written as paper code is: it loads a tiny random Llama saved
with save_pretrained (tests/programs/hf_tiny.py), tokenizes a few prompts,
calls generate once as a warmup, then K times in a loop that it times itself.
Each repeat is a fresh recipe trial through the worker's launcher.

    python scripts/bench_recipe_hooks.py [--repeats 5] [--calls 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from worker import launcher, recipes  # noqa: E402
from worker.spec import parse  # noqa: E402

SCRIPT = """\
import sys
import time

from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
batch = tokenizer(["the cat sat on a mat", "dogs ran past big red barns"],
                  return_tensors="pt", padding=True)
settings = dict(max_new_tokens=16, min_new_tokens=16, do_sample=False)
model.generate(**batch, **settings)  # warmup
start = time.perf_counter()
for _ in range({calls}):
    model.generate(**batch, **settings)
print(f"LOOP_SECONDS {{time.perf_counter() - start:.6f}}")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="recipe trials (default 5)")
    ap.add_argument("--calls", type=int, default=10, help="generate calls in the loop")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ckpt = Path(d, "ckpt")
        subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "hf_tiny.py"),
                        str(ckpt)], check=True, capture_output=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
        Path(d, "paper.py").write_text(SCRIPT.format(calls=args.calls))
        Path(d, "recipes.toml").write_text(textwrap.dedent(f"""
            [recipes.paper]
            cwd = "{d}"
            argv = ["{{python}}", "paper.py", "{ckpt}"]
            env = {{ HF_HUB_OFFLINE = "1", TOKENIZERS_PARALLELISM = "false" }}
            timeout = "10m"
            """))
        book = recipes.load(str(Path(d, "recipes.toml")))
        spec = parse(["recipe", "paper"], {"paper": book["paper"].workload()})
        errors, ok = [], True
        print(f"{'trial':>5} {'phases (found by)':<70} {'runs':>4} {'run phase':>10} "
              f"{'script':>10} {'error':>8}")
        for i in range(args.repeats):
            r = launcher.run_trial(spec, recipes=book)
            if r["status"] != "ok":
                print(f"trial {i} failed: {r['error']}")
                return 1
            names = [p["name"] for p in r["phases"]]
            run = sum(p["seconds"] for p in r["phases"] if p["name"] == "run")
            loop = float(next(line for line in r["output_tail"].splitlines()
                              if line.startswith("LOOP_SECONDS")).split()[1])
            err = run / loop - 1
            errors.append(err)
            ok &= ({"weights", "data", "warmup", "run"} <= set(names)
                   and r["latency"]["count"] == args.calls)
            found = ", ".join(f"{p['name']}({p['found_by'].removeprefix('hook:')})"
                              for p in r["phases"])
            print(f"{i:>5} {found:<70.70} {r['latency']['count']:>4} {run:>9.3f}s "
                  f"{loop:>9.3f}s {err:>+8.2%}")
    worst = max(abs(e) for e in errors)
    ok &= worst <= 0.05
    print(f"run phase vs the script's own loop timing: median {statistics.median(errors):+.2%}, "
          f"worst {worst:.2%} over {args.repeats} trials of {args.calls} generate calls")
    print(("PASS" if ok else "FAIL") + " phases found by hooks, runs = generate calls, "
          "time within 5% of the script's own")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
