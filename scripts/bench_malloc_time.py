#!/usr/bin/env python3
"""What malloc=live costs a CPU trial's times: the llm-infer decoder at
scripts/bench_depth.py's shape (llama-3-8b narrowed ÷4, fp32, batch 4, 8
layers), prefill and decode timed in fresh processes under glibc's default and
under the pinned mmap threshold (MALLOC_MMAP_THRESHOLD_=65536, as malloc=live
sets it), alternating, one pair at a time.

Each process times 3 requests after a warmup by wall clock and by its own CPU
time (user + system, from getrusage), and counts its minor page faults. CPU
time is the steadier figure on a shared machine: another process's load
stretches wall time but not this process's CPU time.

    python scripts/bench_malloc_time.py [--pairs 2] [--prompt 256] [--gen 16]
        [--code DIR]  # another checkout's decoder, e.g. one from before a change
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FIGURES = ("prefill wall", "prefill CPU", "prefill faults", "decode-step wall",
           "decode-step CPU", "decode-step faults")


def child(prompt: int, gen: int, code: str) -> None:
    sys.path.insert(0, code)
    import resource
    import time

    import torch

    from worker import presets
    from worker.arithmetic import ffn_width
    from worker.workloads.decoder import Decoder, rotary_tables

    p = {**presets.scaled("llama-3-8b", 4), "layers": 8}
    torch.manual_seed(0)
    model = Decoder(p["vocab"], p["hidden"], 8, p["heads"], p["kv_heads"], ffn_width(p)).eval()
    cos, sin = rotary_tables(p["hidden"] // p["heads"], prompt + gen, "cpu", torch.float32)
    tokens = torch.randint(0, p["vocab"], (4, prompt), generator=torch.Generator().manual_seed(0))

    def now():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), r.ru_utime + r.ru_stime, r.ru_minflt

    rows = []
    with torch.inference_mode():
        for i in range(4):  # the first is warmup
            cache = model.new_cache(4, prompt + gen)
            a = now()
            token = model(tokens, cache, 0, cos, sin).argmax(-1)
            b = now()
            for step in range(1, gen):
                token = model(token, cache, prompt + step - 1, cos, sin).argmax(-1)
            c = now()
            if i:
                rows.append([*(y - x for x, y in zip(a, b)),
                             *((y - x) / (gen - 1) for x, y in zip(b, c))])
    print(json.dumps([statistics.mean(col) for col in zip(*rows)]))


def run(setting: str, args) -> list[float]:
    env = dict(os.environ)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if setting == "live":
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    done = subprocess.run([sys.executable, __file__, "--child", f"--prompt={args.prompt}",
                           f"--gen={args.gen}", f"--code={args.code}"], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise SystemExit(f"the {setting} child failed: {done.stderr[-400:]}")
    return json.loads(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--code", default=ROOT, help="the checkout whose worker/ is timed")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.prompt, args.gen, os.path.abspath(args.code))
        return 0
    if not os.path.isfile(os.path.join(args.code, "worker", "workloads", "decoder.py")):
        raise SystemExit(f"--code {args.code}: no worker/workloads/decoder.py there; give a "
                         "trialbot checkout")
    print(f"{args.code}: llama-3-8b ÷4, 8 layers, fp32, batch 4, prompt {args.prompt}, gen "
          f"{args.gen}; {args.pairs} pairs, {os.cpu_count()} CPUs")
    ratios: dict[str, list[float]] = {f: [] for f in FIGURES if "faults" not in f}
    for _ in range(args.pairs):
        pair = {s: run(s, args) for s in ("glibc", "live")}
        for s, v in pair.items():
            print(f"{s:5}: " + ", ".join(f"{f} {x:.4g}" for f, x in zip(FIGURES, v)),
                  flush=True)
        for i, f in enumerate(FIGURES):
            if f in ratios:
                ratios[f].append(pair["live"][i] / pair["glibc"][i])
    for f, rs in ratios.items():
        print(f"{f}: live/glibc {', '.join(f'{x:.2f}' for x in rs)} "
              f"(median {statistics.median(rs):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
