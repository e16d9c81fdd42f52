#!/usr/bin/env python3
"""Does a small sweep predict a bigger batch's peak memory? (issue target:
a sweep at 3 small batches predicts the peak memory of a batch 4× larger than
the largest measured within ±10% for host RSS, and within ±5% for the CUDA
allocator.)

Each trial is `python -m worker.cli trial llm-infer ... --json` in a child
process run from the repo root, so this runs on a GPU box with the repo not
pip-installed (`PYTHON=python3 python3 scripts/bench_scaling.py`). The model
is big enough that the KV cache and activations matter next to the ~250 MB
torch baseline. The fit is bot/fits/scaling.py's, the one the bot posts.

    python scripts/bench_scaling.py [--batches 1,2,4] [--factor 4] [--cuda auto|yes|no]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.fits import scaling  # noqa: E402
from bot.fits.sweep import fit_sweep, predict_seconds  # noqa: E402

PYTHON = os.environ.get("PYTHON") or sys.executable
CPU_MODEL = ("device=cpu dtype=fp32 layers=4 hidden=512 heads=8 kv_heads=8 vocab=8192 "
             "prompt=512 gen=16")
CUDA_MODEL = ("device=cuda dtype=bf16 layers=8 hidden=2048 heads=16 kv_heads=4 vocab=32000 "
              "prompt=1024 gen=64")
MEASURE = "repeats=2 stability=0 run_cap=2 warmup=1"
TARGETS = {"host_rss_peak": 0.10, "peak_allocated": 0.05, "peak_reserved": 0.05,
           "process_used_peak": 0.05}


EXTRA_ENV: dict[str, str] = {}


def trial(words: list[str], timeout: float) -> dict:
    cmd = [PYTHON, "-m", "worker.cli", "trial", "llm-infer", *words, "--json"]
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **EXTRA_ENV})
    try:
        report = json.loads(done.stdout)
    except ValueError:
        sys.exit(f"no report from {' '.join(cmd)}:\n{done.stderr[-3000:]}")
    print(f"  {' '.join(words[:1])}: {report['status']} in {time.monotonic() - t0:.1f} s"
          + (f" ({report['error']['class']}: {report['error']['message'][-200:]})"
             if report["status"] != "ok" else ""), flush=True)
    return report


def mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:9.1f} MiB"


def bench(label: str, model: str, batches: list[int], factor: int, timeout: float) -> bool:
    big = factor * max(batches)
    print(f"== {label}: llm-infer {model} {MEASURE}\n   fit on batch {batches}, predict "
          f"batch {big}", flush=True)
    small = []
    for b in batches:
        r = trial([f"batch={b}", *model.split(), *MEASURE.split()], timeout)
        r["trial"] = f"b{b}"
        small.append(r)
    target = trial([f"batch={big}", *model.split(), *MEASURE.split()], timeout)
    fit = fit_sweep(small)
    if fit["error"] or target["status"] != "ok":
        print(f"   FAIL: {fit['error'] or 'the batch-' + str(big) + ' trial failed'}")
        return False
    arith = fit["arithmetic"]
    print(f"   weights {mib(arith['weight_bytes'])} (exact), KV cache "
          f"{arith['kv_bytes_per_token']} B per token ({arith['kv_formula']})")
    ok = True
    for method, model_fit in fit["memory"].items():
        measured = target["memory"].get(method)
        if model_fit.get("error") or measured is None:
            continue
        value, se, dof = scaling.predict_memory(fit, method, {"batch": big})
        err = value / measured - 1
        tol = TARGETS[method]
        verdict = "PASS" if abs(err) <= tol else "FAIL"
        ok &= verdict == "PASS"
        held = model_fit["held_out"]
        coef = dict(zip(model_fit["features"], model_fit["coef"]))
        points = " ".join(mib(p["memory"][method]).strip() for p in fit["points"])
        print(f"   {method:18} points {points}"
              f"; fit {mib(coef.get('1')).strip()} + {mib(coef.get('b')).strip()}·b"
              + (f"; held-out {held['relative_error']:+.1%}" if held else ""))
        print(f"   {method:18} batch {big}: predicted {mib(value)} ± {mib(se).strip()} (se, dof "
              f"{dof}), measured {mib(measured)}: error {err:+.2%} (target ±{tol:.0%}) {verdict}")
        if method == "host_rss_peak":
            kernel = target["memory"].get("host_rss_peak_kernel")
            print(f"   {'':18} (the kernel's max RSS of the "
                  f"batch-{big} child is {mib(kernel).strip()})")
    if fit["time"] and target.get("latency"):
        value, se, dof = predict_seconds(fit, {"batch": big})
        measured = target["latency"]["mean"]
        print(f"   {'latency mean':18} batch {big}: predicted {value * 1e3:.1f} ms, measured "
              f"{measured * 1e3:.1f} ms: error {value / measured - 1:+.1%} (no target: CPU "
              "times on a shared box are noisy)")
    return ok


def has_cuda() -> bool:
    done = subprocess.run([PYTHON, "-c", "import torch; print(torch.cuda.is_available())"],
                          cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() == "True"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,2,4")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--cuda", choices=("auto", "yes", "no"), default="auto")
    ap.add_argument("--cuda-batches", default="2,4,8")
    ap.add_argument("--cpu-model", default=CPU_MODEL)
    ap.add_argument("--cuda-model", default=CUDA_MODEL)
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--reps", type=int, default=1, help="repeat each experiment (fresh trials)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the trials, e.g. MALLOC_MMAP_THRESHOLD_=131072 "
                         "to see how much of host RSS is glibc keeping freed memory")
    a = ap.parse_args()
    EXTRA_ENV.update(kv.split("=", 1) for kv in a.env)
    if EXTRA_ENV:
        print(f"trial environment adds: {EXTRA_ENV}")
    results = []
    for rep in range(a.reps):
        tag = f" (rep {rep + 1}/{a.reps})" if a.reps > 1 else ""
        if not a.skip_cpu:
            results.append(bench("CPU, host RSS" + tag, a.cpu_model,
                                 [int(x) for x in a.batches.split(",")], a.factor, a.timeout))
    cuda = a.cuda == "yes" or (a.cuda == "auto" and has_cuda())
    for rep in range(a.reps if cuda else 0):
        tag = f" (rep {rep + 1}/{a.reps})" if a.reps > 1 else ""
        results.append(bench("CUDA, allocator and NVML" + tag, a.cuda_model,
                             [int(x) for x in a.cuda_batches.split(",")], a.factor, a.timeout))
    if not cuda:
        print("== CUDA: skipped (no CUDA device; --cuda yes to insist)")
    print(f"{sum(results)} of {len(results)} experiments PASS"
          + ("" if all(results) else " — SOME FAIL"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
