"""A paper's unmodified Hugging Face code, measured phase by phase by the probe's
hooks: real child processes, real transformers on CPU, a tiny random model
saved the way a released checkpoint is (no download)."""
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worker import launcher, recipes, summary
from worker.report import validate
from worker.spec import parse

PROGRAMS = Path(__file__).parents[1] / "programs"
PROBE = Path(__file__).resolve().parents[2] / "worker" / "probe"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")

K = 4  # generate (or model) calls in the timed loop

HEAD = """\
import sys
import time

from transformers import AutoModelForCausalLM, AutoTokenizer

path = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path).eval()
"""

GENERATE = HEAD + f"""\
prompts = ["the cat sat on a mat", "dogs ran past big red barns", "small blue boats"]
batch = tokenizer(prompts, return_tensors="pt", padding=True)
settings = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
model.generate(**batch, **settings)  # warmup
start = time.perf_counter()
for _ in range({K}):
    out = model.generate(**batch, **settings)
print(f"LOOP_SECONDS {{time.perf_counter() - start:.6f}}")
print(tokenizer.decode(out[0]))
"""

MARKED = HEAD + f"""\
batch = tokenizer(["the cat sat on a mat"], return_tensors="pt")
print("TRIALBOT_PHASE warmup", flush=True)
model.generate(**batch, max_new_tokens=4, do_sample=False)
print("TRIALBOT_PHASE run", flush=True)
for _ in range({K}):
    tokens = tokenizer(["dogs ran past big red barns"], return_tensors="pt")
    model.generate(**tokens, max_new_tokens=4, do_sample=False)
print("done")
"""

SCORING = HEAD + f"""\
import torch

ids = tokenizer(["the cat sat on a mat while dogs ran"], return_tensors="pt").input_ids
with torch.no_grad():
    model(ids)  # warmup
    total = 0.0
    for _ in range({K}):
        logits = model(ids).logits
        total += torch.log_softmax(logits, -1).max().item()
print(f"score {{total:.3f}}")
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([sys.executable, str(PROGRAMS / "hf_tiny.py"), str(out)], check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300,
                   capture_output=True)
    return out


def run_script(tmp_path, checkpoint, body: str, arg: str = "", env: str = "") -> dict:
    """`body` run as recipe `paper` with the checkpoint's path (and `arg`)."""
    (tmp_path / "paper.py").write_text(body)
    (tmp_path / "recipes.toml").write_text(textwrap.dedent(f"""
        [recipes.paper]
        cwd = "{tmp_path}"
        argv = ["{{python}}", "paper.py", "{checkpoint}", "{arg}"]
        env = {{ HF_HUB_OFFLINE = "1", TOKENIZERS_PARALLELISM = "false"{env} }}
        timeout = "5m"
        """))
    book = recipes.load(str(tmp_path / "recipes.toml"))
    r = launcher.run_trial(parse(["recipe", "paper"], {"paper": book["paper"].workload()}),
                           recipes=book)
    assert r["status"] == "ok", (r["error"], r.get("output_tail"))
    return r


def by_name(r: dict, name: str) -> list[dict]:
    return [p for p in r["phases"] if p["name"] == name]


def test_unmarked_generate_script_gets_phases_and_latency(tmp_path, checkpoint):
    r = run_script(tmp_path, checkpoint, GENERATE)
    assert [(p["name"], p["found_by"]) for p in r["phases"]] == [
        ("launch", "start"), ("data", "hook:tokenizer"), ("weights", "hook:from_pretrained"),
        ("data", "hook:tokenizer"), ("warmup", "hook:generate"), ("run", "hook:generate")]
    # K generate calls in the loop, each running 6 forwards inside it that are not units.
    assert r["latency"]["count"] == K and r["units"]["run"] == K
    assert r["units"]["kinds"] == {"generate": K + 1} and r["units"]["warmup"] == 1
    loop = float(next(line for line in r["output_tail"].splitlines()
                      if line.startswith("LOOP_SECONDS")).split()[1])
    run = by_name(r, "run")[0]["seconds"]
    assert abs(run - loop) / loop < 0.05, (run, loop)
    assert r["latency"]["mean"] * K <= run * 1.001
    assert r["windows"]["unit"] == "generate call" and sum(
        w["count"] for w in r["windows"]["rows"]) == K
    assert r["stability"]["count"] == K and r["stability"]["stopped_by"] == "count"
    assert "TRIALBOT_PHASE" not in r["output_tail"]  # hooks never write to its stdout
    assert r["seconds"] >= sum(p["seconds"] for p in r["phases"])
    assert validate(r) == []
    assert f"over {K} generate calls" in dict(summary.facts(r))["latency per generate call"]


def test_the_scripts_own_marks_win(tmp_path, checkpoint):
    r = run_script(tmp_path, checkpoint, MARKED)
    # Hooks mark phases only until the script's first mark; the tokenizer calls
    # inside its marked run stay in the run.
    assert [(p["name"], p["found_by"]) for p in r["phases"]] == [
        ("launch", "start"), ("data", "hook:tokenizer"), ("weights", "hook:from_pretrained"),
        ("data", "hook:tokenizer"), ("warmup", "mark"), ("run", "mark")]
    assert r["latency"]["count"] == K and r["units"]["warmup"] == 1


def test_a_scoring_script_counts_model_calls_not_inner_forwards(tmp_path, checkpoint):
    r = run_script(tmp_path, checkpoint, SCORING)
    assert [p["name"] for p in r["phases"]] == ["launch", "data", "weights", "data", "warmup",
                                                 "run"]
    # LlamaForCausalLM's call runs LlamaModel's inside it: one unit, not two.
    assert r["units"]["kinds"] == {"forward": K + 1}
    assert r["latency"]["count"] == K and r["windows"]["unit"] == "model call"
    assert by_name(r, "run")[0]["found_by"] == "hook:forward"


def test_a_program_without_transformers_is_as_before(tmp_path):
    program = tmp_path / "plain.py"
    program.write_text("print('hello')\n")
    (tmp_path / "recipes.toml").write_text(f'[recipes.plain]\ncwd = "{tmp_path}"\n'
                                           'argv = ["{python}", "plain.py"]\n')
    book = recipes.load(str(tmp_path / "recipes.toml"))
    r = launcher.run_trial(parse(["recipe", "plain"], {"plain": book["plain"].workload()}),
                           recipes=book)
    assert r["status"] == "ok"
    assert [(p["name"], p["found_by"]) for p in r["phases"]] == [("run", "whole-program")]
    assert "latency" in r and r["latency"] is None
    # No run units: one run is the whole program (the default unit), timed.
    assert r["units"]["kind"] == "program" and r["units"]["count"] == 0
    assert 0 < r["units"]["program"]["seconds"] <= r["seconds"]


def test_the_probe_imports_neither_torch_nor_transformers(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", "import sys, json; import trialbot_hooks; "
         "print(json.dumps([m for m in ('torch', 'transformers', 'numpy') if m in sys.modules]))"],
        env={**os.environ, "PYTHONPATH": str(PROBE), "TRIALBOT_PROBE_OUT": str(tmp_path)},
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert list(tmp_path.glob("probe-*.json"))  # the probe did run


DATASET = HEAD + """\
from datasets import load_dataset

rows = load_dataset("json", data_files=sys.argv[2], split="train")
batch = tokenizer([row["text"] for row in rows], return_tensors="pt", padding=True)
for _ in range(3):
    model.generate(**batch, max_new_tokens=3, do_sample=False)
"""


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None,
                    reason="datasets is not installed (the load_dataset hook is optional)")
def test_load_dataset_is_a_data_phase(tmp_path, checkpoint):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "the cat sat"}\n{"text": "small blue boats"}\n')
    cache = tmp_path / "cache"
    r = run_script(tmp_path, checkpoint, DATASET, str(data),
                   f', HF_DATASETS_OFFLINE = "1", HF_DATASETS_CACHE = "{cache}"')
    assert [(p["name"], p["found_by"]) for p in r["phases"]] == [
        ("launch", "start"), ("data", "hook:tokenizer"), ("weights", "hook:from_pretrained"),
        ("data", "hook:load_dataset"), ("warmup", "hook:generate"), ("run", "hook:generate")]
    assert r["latency"]["count"] == 2
