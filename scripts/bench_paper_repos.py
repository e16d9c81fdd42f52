#!/usr/bin/env python3
"""Issue 30's target "Real repositories": public inference-acceleration
repositories run UNCHANGED as trialbot recipes, each in its own environment
pinned as the repository declares (the worker's torch linked in), on CPU with
tiny random Llama models this script saves with that environment's own
transformers. Everything runs through the worker's path: `recipes.load` then
`launcher.run_trial`, as a `/trial recipe` would.

Per repository: the trial's phases with their host memory peak, its units in
the declared kind (per model), a plan block's runs line (bot/plans/estimate.py
on the report), and the units' count and time beside the program's own
timer/count, each over the span the program itself times.

    python scripts/bench_paper_repos.py CHECKOUTS [--work DIR] [--only NAME,...]

CHECKOUTS holds git checkouts, one directory per repository, named
`owner+name` or `name`; a missing one is skipped, saying so. Nothing is
downloaded but packages (no weights, no data sets). A benchmark: minutes, so
not part of CI.
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

from bot.plans import estimate  # noqa: E402
from worker import launcher, recipes  # noqa: E402
from worker.spec import parse  # noqa: E402

# The tiny model and tokenizer, saved by the repository environment's own
# transformers (a model saved by transformers 5 need not load in 4.33).
# One token per byte (any prompt encodes), every id decodes to text, and
# lm_head rows 0 and 2 zeroed: greedy never emits </s> (fixed token counts)
# and LLMSpeculativeSampling's sample() never draws id 0 (it raises on it).
MAKE_MODEL = r'''
import importlib.util, json, os, sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, Regex
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast, LlamaConfig, LlamaForCausalLM
spec = json.load(open(sys.argv[1]))
V = 1000
vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>"] + sorted(ByteLevel.alphabet()))}
while len(vocab) < V:
    vocab["w%d" % len(vocab)] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Sequence([
    ByteLevel(add_prefix_space=False, use_regex=False),
    pre_tokenizers.Split(Regex("."), "isolated")])
tok.decoder = decoders.ByteLevel()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                               eos_token="</s>")
for m in spec["models"]:
    torch.manual_seed(m["seed"])
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=m["layers"],
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
        bos_token_id=1, eos_token_id=2, pad_token_id=0))
    with torch.no_grad():
        model.lm_head.weight[0].zero_(); model.lm_head.weight[2].zero_()
    d = os.path.join(spec["out"], m["name"])
    model.save_pretrained(d, safe_serialization=importlib.util.find_spec("safetensors") is not None)
    fast.save_pretrained(d)
'''

# Run environment of every program: offline, one CPU thread (torch's two
# OpenMP threads collapse on a loaded 2-core box: 78 against 5 ms a token).
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "",
       "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def own_llmspec(out: str) -> dict:
    """`[benchmark] AS_large, tokens/sec: X, T sec generates N tokens`: T is the
    mean of TEST_TIME=10 calls (its tokens/sec divides by 10 twice: unused),
    N is prompt + generated tokens."""
    got = {m[1]: {"seconds": 10 * float(m[2]), "calls": 10, "tokens": int(m[3])}
           for m in re.finditer(r"\[benchmark\] (\w+), tokens/sec: \S+, ([\d.eE+-]+) sec "
                                r"generates (\d+) tokens", out)}
    return got


def own_lade(out: str) -> dict:
    """`Input tokens: N Generated tokens: M Time: T s ...`: one generate call."""
    m = re.search(r"Input tokens:\s+(\d+)\s+Generated tokens:\s+(\d+)\s+Time:\s+([\d.]+)\s+s", out)
    return {"generate": {"seconds": float(m[3]), "calls": 1, "tokens": int(m[2])}} if m else {}


def own_none(out: str) -> dict:
    return {}


def mt_bench(data: Path) -> None:
    """streaming-llm reads DATA_ROOT/mt_bench.jsonl (the shipped file is 80
    samples × 2 turns × 1000 tokens); one sample of 2 short turns here."""
    data.mkdir(parents=True, exist_ok=True)
    (data / "mt_bench.jsonl").write_text(json.dumps({"question_id": 1, "turns": [
        "Write a short travel blog post about Hawaii.",
        "Rewrite your previous response, starting every sentence with A."]}) + "\n")


def stretches(units: list[dict]) -> list[tuple[str, list[dict]]]:
    """Units in time order, cut where the model changes."""
    out = []
    for u in sorted(units, key=lambda u: u["t0"]):
        if out and out[-1][0] == u.get("model"):
            out[-1][1].append(u)
        else:
            out.append((u.get("model"), [u]))
    return out


def llmspec_spans(repo: dict, r: dict, probe: dict) -> None:
    """main.py runs autoregressive_sampling on the target once untimed, then
    10 times timed (AS_large), the same on the draft (AS_small), then
    deepmind's speculative_sampling_v2, which starts with `gamma` draft
    forwards. Each sampling call is N forwards (one per new token), so the
    first one-model stretch is 11·N target forwards, the second 11·N + gamma
    draft ones, the timed part forwards N..11·N of each. The speculative
    calls' count depends on what is accepted: no count to check."""
    n, gamma = repo["max_tokens"], repo["gamma"]
    own = repo["own"](r.get("output_tail") or "")
    parts = stretches([u for u in probe.get("units") or [] if u["kind"] == "forward"])
    for (model, units), label, extra in zip(parts[:2], ("AS_large", "AS_small"), (0, gamma)):
        timed = units[n:11 * n]
        span = timed[-1]["t1"] - timed[0]["t0"]
        busy = sum(u["t1"] - u["t0"] for u in timed)
        o = own.get(label)
        if not o:
            print(f"  {label}: the program printed no timer")
            continue
        print(f"  {label} ({model}): {len(units)} forwards in its stretch against "
              f"{11 * n + extra} by construction; the {10 * n} timed ones: first start to "
              f"last end {span:.3f} s against its own {o['seconds']:.3f} s "
              f"({span / o['seconds'] - 1:+.2%}); inside the forwards {busy:.3f} s")
    rest = sum(len(units) for _, units in parts[2:])
    print(f"  speculative part: {rest} forwards in {len(parts) - 2} one-model stretches "
          "(deepmind's and google's, untimed and timed): no count of its own to compare")


# setup.py declares nothing; README: pip install torch torchvision torchaudio
# (the worker's torch; torchvision/torchaudio are never imported), pip install
# transformers==4.33.0 accelerate datasets evaluate wandb scikit-learn scipy
# sentencepiece, then `python setup.py develop` (here ".").
STREAMING_RUN = {
    "dirs": ["mit-han-lab+streaming-llm"],
    "keys": {"requirements": ["."],
             "packages": ["transformers==4.33.0", "accelerate", "datasets", "evaluate", "wandb",
                          "scikit-learn", "scipy", "sentencepiece"]},
    "models": [{"name": "llama", "layers": 2, "seed": 3}],
    # greedy_generate calls the model once per token: a run is one forward;
    # it prints no timer and no count: 2 prompts × 1000 tokens by construction
    "unit": "forward", "expected": 2 * 1000,
    "argv": ["examples/run_streaming_llama.py", "--model_name_or_path", "{models}/llama",
             "--data_root", "{data}"],
    "data": mt_bench, "own": own_none}

# README: pip install -r requirements.txt; pip install -e . (its torch<2.1.1 is
# overridden by the worker's torch). USE_LADE=0 is the baseline it compares
# against; its own Time is one model.generate, after a 1-token warm-up one.
LADE_RUN = {
    "dirs": ["hao-ai-lab+LookaheadDecoding"],
    "keys": {"requirements": ["requirements.txt", "."], "packages": []},
    "models": [{"name": "llama", "layers": 2, "seed": 4}],
    "unit": "generate",
    "argv": ["applications/chatbot.py", "--model_path", "{models}/llama", "--device", "cpu",
             "--debug"],
    "own": own_lade}

REPOS = [
    {"name": "LLMSpeculativeSampling", "dirs": ["feifeibear+LLMSpeculativeSampling"],
     # requirements.txt pins transformers==4.33.2 (and torch==2.0.1: the
     # worker's torch is used). GLUE: accelerate, which main.py's
     # device_map="auto" needs under 4.33 and requirements.txt omits.
     "keys": {"requirements": ["requirements.txt"], "packages": ["accelerate==0.23.0"]},
     "models": [{"name": "approx", "layers": 2, "seed": 1},
                {"name": "target", "layers": 4, "seed": 2}],
     # its speculative loop calls the two models' forwards: a run is one forward
     "unit": "forward", "max_tokens": 32, "gamma": 4,
     "spans": llmspec_spans,
     "argv": ["main.py", "--approx_model_name", "{models}/approx", "--target_model_name",
              "{models}/target", "--max_tokens", "32", "--gamma", "4", "--seed", "7",
              "--benchmark"],
     "own": own_llmspec},
    {**STREAMING_RUN, "name": "streaming-llm"},
    {**STREAMING_RUN, "name": "streaming-llm --enable_streaming",  # the same environment
     "argv": STREAMING_RUN["argv"] + ["--enable_streaming", "--start_size", "4",
                                      "--recent_size", "256"]},
    {**LADE_RUN, "name": "LookaheadDecoding", "env": {"USE_LADE": "0"}},
    # lookahead itself: its `torch<2.1.1` is there because transformers picks
    # SDPA attention on a newer torch, whose forward lacks lade's `lookahead`
    # argument; with the worker's torch the trial fails, and says why
    {**LADE_RUN, "name": "LookaheadDecoding USE_LADE=1", "env": {"USE_LADE": "1"}},
]


def recipe_book(repo: dict, checkout: Path, work: Path) -> dict:
    """Two recipes on one environment: `models` saves the tiny models with the
    environment's transformers (its trial builds the environment), `paper`
    runs the repository's program (its trial reuses it)."""
    slug = re.sub(r"[^a-z0-9]+", "-", repo["name"].lower()).strip("-")
    models, data = work / "models" / slug, work / "data" / slug
    (work / "make_model.py").write_text(MAKE_MODEL)
    spec = work / f"{slug}.models.json"
    spec.write_text(json.dumps({"out": str(models), "models": repo["models"]}))
    if repo.get("data"):
        repo["data"](data)
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    env = json.dumps({**ENV, **repo.get("env", {})})[1:-1].replace('": "', '" = "')
    shared = "\n".join([f'repo = "{checkout}"', f'commit = "{commit}"',
                        *(f"{k} = {json.dumps(v)}" for k, v in repo["keys"].items()),
                        f"env = {{ {env} }}", 'timeout = "20m"'])
    make = ["{python}", str(work / "make_model.py"), str(spec)]
    argv = ["{python}"] + [a.replace("{models}", str(models)).replace("{data}", str(data))
                           for a in repo["argv"]]
    path = work / f"{slug}.toml"
    path.write_text(f"[recipes.models]\n{shared}\nargv = {json.dumps(make)}\n\n"
                    f"[recipes.paper]\n{shared}\nargv = {json.dumps(argv)}\n"
                    f'unit = "{repo["unit"]}"\n')
    return recipes.load(str(path), env_cache=str(work / "envs"))


def trial(book: dict, name: str) -> tuple[dict, dict]:
    """The report, and the probe's own record of each unit (kind, model, t0,
    t1) that the report summarises: what the spans a program times need."""
    seen, read = {}, launcher._probe_result

    def keep(directory, run):
        seen["probe"] = read(directory, run)
        return seen["probe"]

    launcher._probe_result = keep
    try:
        r = launcher.run_trial(parse(["recipe", name], {name: book[name].workload()}),
                               recipes=book)
    finally:
        launcher._probe_result = read
    return r, seen.get("probe") or {}


def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.0f}"


def show_phases(r: dict) -> None:
    print("  phases: " + "; ".join(
        f"{p['name']} {p['seconds']:.2f} s"
        + (" (env cached)" if p.get("cached") else " (env built)" if "cached" in p else "")
        + f", host peak {mib(p.get('host_rss_peak'))} MiB" for p in r["phases"]))
    m = r.get("memory") or {}
    share = m.get("host_rss_launch_share")
    print(f"  trial host peak {mib(m.get('host_rss_peak'))} MiB "
          f"(kernel's {mib(m.get('host_rss_peak_kernel'))}); held by the end of launch "
          f"(imports): {'-' if share is None else f'{share:.0%}'}")


def show_units(r: dict) -> None:
    u = r["units"]
    print(f"  units (unit = {u['kind']}): {u['count']} seen, {u['run']} in the run phase, "
          f"{u['warmup']} warmup; kinds {u['kinds']}; program "
          f"{u['program']['seconds']:.2f} s")
    for m in u.get("models") or []:
        print(f"    {m['kind']} on {m.get('model')} ({m.get('params')} params): {m['count']} × "
              f"mean {m['mean'] * 1e3:.3f} ms = {m['count'] * m['mean']:.3f} s"
              + (f", IQR/median {m['iqr_over_median']:.1%}"
                 if m.get("iqr_over_median") is not None else ""))


def plan_block(r: dict) -> str:
    block = {"kind": "baseline", "runs": 1000, "configs": 1, "gpus": 1}
    trials = [{"id": 1, "trial": "T1", "status": "done", "report": {**r, "status": "ok"}}]
    problem = estimate.unit_problem(trials[0])
    if problem:
        return "refused: " + problem
    e = estimate.estimate_block(block, trials, {}, {}, True)
    return next(c["source"] for c in e["components"] if c["name"] == "runs")


def compare(repo: dict, r: dict) -> None:
    """The units against the program's own timer/count, over the span it times."""
    own, u = repo["own"](r.get("output_tail") or ""), r["units"]
    models = u.get("models") or []
    if repo.get("expected"):  # no own timer or count: the count fixed by construction
        d = u["count"] / repo["expected"] - 1
        print(f"  own: none printed; {u['count']} {u['kind']} units seen against "
              f"{repo['expected']} by construction ({d:+.2%})")
    for name, o in own.items():
        print(f"  own {name}: {o['calls']} call(s), {o['seconds']:.3f} s, {o['tokens']} tokens")
    if repo["unit"] == "generate" and "generate" in own and models:
        m, o = models[0], own["generate"]
        d = m["mean"] * m["count"] / o["seconds"] - 1
        print(f"  run-phase generate: {m['count']} call(s), {m['mean'] * m['count']:.3f} s "
              f"against its own {o['calls']} call(s), {o['seconds']:.3f} s ({d:+.2%})")


def run_repo(repo: dict, checkout: Path, work: Path) -> None:
    book = recipe_book(repo, checkout, work)
    made, _ = trial(book, "models")
    setup = next(p for p in made["phases"] if p.get("found_by") == "recipe-environment")
    print(f"  environment: {'reused' if setup['cached'] else 'built'} in "
          f"{setup['seconds']:.1f} s; "
          + ", ".join(f"{k} {v}" for k, v in sorted(
              (made["env"].get("environment") or {}).get("packages", {}).items())
              if k in ("torch", "transformers", "accelerate", "tokenizers")))
    if made["status"] != "ok":
        print(f"  models: {made['status']}: {made.get('error')}")
        return
    r, probe = trial(book, "paper")
    error = r.get("error") or {}
    print(f"  trial: {r['status']} in {r['seconds']:.1f} s" + (
        f": {error.get('class')} in phase {error.get('phase')}: "
        f"{(error.get('message') or '').strip().splitlines()[-1:]}" if r["status"] != "ok"
        else ""))
    show_phases(r)
    if r["status"] != "ok":
        return
    show_units(r)
    print("  plan block, 1000 runs: " + plan_block(r))
    compare(repo, r)
    if repo.get("spans"):
        repo["spans"](repo, r, probe)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkouts", type=Path)
    ap.add_argument("--work", type=Path, help="environments, models, recipe files (default: "
                    "a temporary directory)")
    ap.add_argument("--only", default="", help="comma-separated repository names")
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    with tempfile.TemporaryDirectory(prefix="bench-paper-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        print(f"load average {os.getloadavg()[0]:.2f} at start; work {work}", flush=True)
        for repo in REPOS:
            if only and repo["name"] not in only:
                continue
            checkout = next((args.checkouts / d for d in repo["dirs"]
                             if (args.checkouts / d / ".git").exists()), None)
            print(f"== {repo['name']}", flush=True)
            if checkout is None:
                print(f"  skipped: no checkout {' or '.join(repo['dirs'])} in {args.checkouts}")
                continue
            run_repo(repo, checkout.resolve(), work)
        print(f"load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
