"""A recipe's runs counted in the researcher's units (`unit` in the recipe file):
programs the tests write, run by the real launcher, their reports finished
through the real queue and counted by `/plan` on a real SQLite store."""
import datetime as dt
import importlib.util
import re
import textwrap

import pytest

import test_recipe_hooks
from bot import commands
from bot.app.runtime import context
from bot.store import Store
from worker import launcher, recipes, summary
from worker.report import validate
from worker.spec import parse

checkpoint = test_recipe_hooks.checkpoint  # the tiny saved Llama (a fixture)
HF = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                        reason="transformers is not installed")


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "u.db")), admins=frozenset({"U1"}))


def book(tmp_path, body: str, unit: str | None = None, args: str = "",
         params: str = "") -> dict:
    """`body` as recipe `paper`, declaring `unit` (or not: the default)."""
    (tmp_path / "paper.py").write_text(body)
    (tmp_path / "recipes.toml").write_text(textwrap.dedent(f"""
        [recipes.paper]
        cwd = "{tmp_path}"
        argv = ["{{python}}", "paper.py"{args}]
        env = {{ HF_HUB_OFFLINE = "1", TOKENIZERS_PARALLELISM = "false" }}
        timeout = "5m"
        """) + (f'unit = "{unit}"\n' if unit else "") + textwrap.dedent(params))
    return recipes.load(str(tmp_path / "recipes.toml"))


def run(recipe_book: dict, *words: str) -> tuple:
    spec = parse(["recipe", "paper", *words], {"paper": recipe_book["paper"].workload()})
    r = launcher.run_trial(spec, recipes=recipe_book)
    assert r["status"] == "ok", (r["error"], r.get("output_tail"))
    assert validate(r) == []
    return spec, r


def finish(ctx, spec, r) -> str:
    """Queue the trial, lease it and report `r` as a worker would."""
    job = ctx.queue.submit(spec, "recipe paper", "U1", "C1")
    leased = ctx.store.lease_next("w1", 60)
    ctx.queue.finish(job["id"], "w1", leased["lease"], dict(r, trial=job["trial"]))
    return job["trial"]


def say(ctx, text: str) -> str:
    return commands.plan(ctx, text, "U1", "C1", dt.date(2026, 12, 1))["text"]


def own_seconds(r: dict, word: str) -> float:
    return float(next(line.split()[1] for line in r["output_tail"].splitlines()
                      if line.startswith(word)))


ONE_GENERATE = """\
import sys
import time

start = time.perf_counter()
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
batch = tokenizer(["the cat sat on a mat"], return_tensors="pt")
model.generate(**batch, max_new_tokens=8, min_new_tokens=8, do_sample=False)
print(f"OWN_SECONDS {time.perf_counter() - start:.6f}")
"""


@HF
def test_a_script_that_generates_once_is_counted_in_program_runs(tmp_path, ctx, checkpoint):
    spec, r = run(book(tmp_path, ONE_GENERATE, args=f', "{checkpoint}"'))
    units = r["units"]
    assert units["kind"] == "program" and units["kinds"] == {"generate": 1}
    # The program's time holds its own timer (imports to its last line) and
    # the interpreter's start and exit around it; never the worker's finish.
    program = units["program"]["seconds"]
    assert own_seconds(r, "OWN_SECONDS") < program < r["seconds"]
    t = finish(ctx, spec, r)
    say(ctx, "new repro gpu=H100")
    out = say(ctx, f"repro block baseline runs=100 trial={t}")
    assert "baseline block added" in out, out
    assert f"100 runs × {program:.4g} s per program run" in out
    assert not re.search(r"runs +0 GPU-h", out) and "per run phase" not in out
    assert "each program run loads its own data" in out


@HF
def test_a_generate_unit_without_a_second_generate_is_refused(tmp_path, ctx, checkpoint):
    spec, r = run(book(tmp_path, ONE_GENERATE, "generate", args=f', "{checkpoint}"'))
    assert r["units"]["kind"] == "generate" and r["units"]["run"] == 0
    assert r["latency"] is None
    t = finish(ctx, spec, r)
    say(ctx, "new repro")
    out = say(ctx, f"repro block baseline runs=100 trial={t}")
    assert out.startswith(":x:") and "Nothing was stored" in out
    assert f"{t} made 1 generate call(s) and none in its run phase" in out
    assert 'declare unit = "program"' in out
    assert ctx.store.db["blocks"].count == 0


SPECULATIVE = """\
import sys
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

draft = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
target = LlamaForCausalLM(LlamaConfig(
    hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=1000)).eval()
ids = torch.tensor([[5, 6, 7, 8]])
calls = 0
with torch.no_grad():
    for _ in range(12):  # 4 draft tokens, then one target check
        for _ in range(4):
            ids = torch.cat([ids, draft(ids).logits[:, -1:].argmax(-1)], 1)
            calls += 1
        target(ids)
        calls += 1
print(f"CALLS {calls}")
"""


@HF
def test_a_draft_and_a_target_are_two_distributions(tmp_path, ctx, checkpoint):
    spec, r = run(book(tmp_path, SPECULATIVE, "forward", args=f', "{checkpoint}"'))
    units = r["units"]
    assert units["kinds"] == {"forward": 60}  # the script's own count
    draft, target = units["models"]
    assert (draft["model"], target["model"]) == ("LlamaForCausalLM#1", "LlamaForCausalLM#2")
    assert draft["count"] == 47 and target["count"] == 12  # the first call is the warmup
    assert target["params"] > 10 * draft["params"] and target["mean"] > draft["mean"]
    # Each model's spread is judged on its own: the mix's is their difference.
    assert r["stability"]["iqr_over_median"] == max(draft["iqr_over_median"],
                                                    target["iqr_over_median"])
    card = dict(summary.facts(r))["one run (the recipe's unit)"]  # the posted report's line
    assert card.startswith("one model call (unit = forward): LlamaForCausalLM#1 (")
    assert "LlamaForCausalLM#2" in card and "; the whole program " in card
    t = finish(ctx, spec, r)
    say(ctx, "new repro")
    out = say(ctx, f"repro block baseline runs=100 trial={t}")
    assert "per model call" in out and "59 runs of one model call each" in out
    assert f"LlamaForCausalLM#1 ({draft['params']:,} params) 47 ×" in out
    assert f"LlamaForCausalLM#2 ({target['params']:,} params) 12 ×" in out
    assert f"a whole program run {units['program']['seconds']:.4g} s" in out


MARKED = """\
import time

import trialbot_probe

print("TRIALBOT_PHASE weights", flush=True)
time.sleep(0.2)
for _ in range(5):
    with trialbot_probe.unit("prompt"):
        time.sleep(0.05)
    time.sleep(0.03)  # between the program's runs: in none
print("done")
"""


def test_spans_the_program_marks_are_its_runs(tmp_path, ctx):
    spec, r = run(book(tmp_path, MARKED, "mark:prompt"))
    units = r["units"]
    assert units["kind"] == "mark:prompt" and units["run"] == 5 and units["unit"] == "prompt span"
    assert 0.05 <= r["latency"]["mean"] < 0.075, r["latency"]
    assert r["windows"]["unit"] == "prompt span"
    t = finish(ctx, spec, r)
    say(ctx, "new repro")
    out = say(ctx, f"repro block baseline runs=100 trial={t}")
    assert f"100 runs × {r['latency']['mean']:.4g} s per `prompt` span" in out, out


def test_phases_marked_with_the_units_name_are_its_runs(tmp_path):
    body = ("import time\nfor _ in range(3):\n    print('TRIALBOT_PHASE prompt', flush=True)\n"
            "    time.sleep(0.05)\nprint('TRIALBOT_PHASE report', flush=True)\n")
    _spec, r = run(book(tmp_path, body, "mark:prompt"))
    assert r["units"]["run"] == 3 and r["latency"]["count"] == 3
    assert 0.05 <= r["latency"]["mean"] < 0.1


def test_a_mark_unit_the_program_never_marks_is_refused(tmp_path, ctx):
    spec, r = run(book(tmp_path, "print('no marks')\n", "mark:prompt"))
    t = finish(ctx, spec, r)
    say(ctx, "new repro")
    out = say(ctx, f"repro block baseline runs=10 trial={t}")
    assert out.startswith(":x:") and f"{t}'s program marked no `prompt` span" in out
    assert "TRIALBOT_UNIT prompt" in out


@pytest.mark.parametrize("unit, says", [
    ("tokens", "`unit` of recipe `paper` is 'tokens'"),
    ("mark:", "\"mark:NAME\""),
    ("mark:a b", "\"mark:NAME\""),
])
def test_an_unknown_unit_is_refused_at_start_naming_the_line(tmp_path, unit, says):
    with pytest.raises(recipes.RecipeError) as err:
        book(tmp_path, "pass\n", unit)
    path = tmp_path / "recipes.toml"
    line = path.read_text().splitlines().index(f'unit = "{unit}"') + 1
    assert f"{path}:{line}" in str(err.value) and says in str(err.value)


SLEEPER = """\
import sys
import time

import trialbot_probe

for _ in range(3):
    with trialbot_probe.unit("decode"):  # a run whose time grows with max_tokens
        time.sleep(int(sys.argv[1]) * 0.002)
"""

SWEEP_PARAMS = """
    [recipes.paper.params]
    batch = { type = "int", min = 1, max = 64, default = 4 }
    max_tokens = { type = "int", min = 1, max = 4096, default = 8 }
    """


def test_a_recipe_sweep_predicts_on_its_own_swept_parameter(tmp_path, ctx):
    b = book(tmp_path, SLEEPER, "mark:decode", args=', "{max_tokens}"', params=SWEEP_PARAMS)
    specs = [parse(["recipe", "paper", f"max_tokens={n}"], {"paper": b["paper"].workload()})
             for n in (8, 16, 32)]
    jobs = ctx.queue.submit_sweep(specs, ["recipe paper"] * 3, "U1", "C1")
    for job, spec in zip(jobs, specs):
        r = launcher.run_trial(spec, recipes=b)
        leased = ctx.store.lease_next("w1", 60)
        ctx.queue.finish(job["id"], "w1", leased["lease"], dict(r, trial=job["trial"]))
    s = jobs[0]["id"]
    say(ctx, "new repro")
    out = say(ctx, f"repro block scale runs=10 sweep=S{s} max_tokens=64")
    assert "scale block added" in out, out
    assert "per `decode` span, predicted for max_tokens=64 (at the sweep's batch=4)" in out
    refused = say(ctx, f"repro block verify runs=10 sweep=S{s} batch=1")
    assert refused.startswith(":x:") and f"Sweep S{s} varied max_tokens; batch was 4" in refused
    assert "give max_tokens=N" in refused
    assert "has no parameter `colour`" in say(ctx, f"repro block verify runs=1 sweep=S{s} "
                                                   "colour=3")
    assert ctx.store.db["blocks"].count == 1
    # A correction keeps the swept parameter as the block's own.
    assert "predict max_tokens=64 → max_tokens=48" in say(ctx, "repro block scale correct "
                                                              "max_tokens=48")
    (block,) = ctx.store.blocks("repro")
    assert block["predict"] == {"max_tokens": 48}


def test_a_program_unit_sweep_fits_the_programs_time():
    from bot.fits.sweep import fit_sweep
    from worker import report as reports

    def trial(n):
        r = reports.new_report("recipe", {"batch": 4, "max_tokens": n})
        r.update(trial=f"T{n}", status="ok", recipe="paper", env={"device": "cpu"},
                 phases=[{"name": "launch", "seconds": 1.0}, {"name": "run", "seconds": 0.1}],
                 units={"kind": "program", "program": {"seconds": 2.0 + 0.01 * n}})
        return r
    fit = fit_sweep([trial(n) for n in (8, 16, 32)])
    assert fit["time"]["coef"] == pytest.approx([2.0, 0.01])
    assert "whole program" in fit["time"]["what"]


def test_a_sweep_block_takes_the_recipes_parameter_and_refuses_one_held_fixed(ctx):
    # Reports as a worker from before `unit` posts them: the run phase is the time.
    from test_sweep import RECIPE
    work = {"paper-infer": RECIPE}
    specs = [parse(["recipe", "paper-infer", f"seq={n}"], work) for n in (64, 128, 256)]
    jobs = ctx.queue.submit_sweep(specs, ["recipe paper-infer"] * 3, "U1", "C1")
    for job, spec in zip(jobs, specs):
        leased = ctx.store.lease_next("w1", 60)
        r = launcher_report(spec.params, job["trial"], 0.5 + spec.params["seq"] / 256)
        ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    say(ctx, "new repro")
    assert "scale block added" in say(ctx, "repro block scale runs=10 sweep=S1 seq=512")
    out = say(ctx, "repro block scale runs=10 sweep=S1 batch=1")
    assert "Sweep S1 varied seq; batch was" in out and "give seq=N" in out
    assert "the sweep's" in say(ctx, "repro show")
    # /trial fit answers as the block does
    from bot import commands
    fixed = commands.trial(ctx, "fit S1 batch=1", "U1", "C1")[0]["text"]
    assert fixed.startswith(":x:") and "sweep S1 varied seq; batch was" in fixed, fixed
    assert "Ask with seq=N" in fixed
    assert "seq=512" in commands.trial(ctx, "fit S1 seq=512", "U1", "C1")[0]["text"]


def launcher_report(params: dict, trial: str, run: float) -> dict:
    from worker import report as reports
    r = reports.new_report("recipe", params)
    r.update(trial=trial, status="ok", recipe="paper-infer", env={"device": "cpu"},
             seconds=1.0 + run, phases=[{"name": "launch", "seconds": 1.0},
                                        {"name": "run", "seconds": run}])
    return r


def test_a_legacy_recipe_report_with_no_run_time_is_refused_not_zero():
    # A script that called generate() once, reported by a worker from before
    # `unit`: its one call was the warmup, its run phase nothing.
    from bot.plans import estimate
    r = launcher_report({"batch": 4, "seq": 64}, "T7", 0.0)
    r["phases"] = [{"name": "launch", "seconds": 3.0}, {"name": "weights", "seconds": 0.5},
                   {"name": "warmup", "seconds": 0.4}]
    r["seconds"] = 3.9
    trial = {"id": 7, "trial": "T7", "status": "done", "report": r, "worker": "w1"}
    with pytest.raises(estimate.EstimateError, match="T7 measured 0 s per run phase: a block "
                                                      "cannot count runs that take no time"):
        estimate.estimate_block({"kind": "baseline", "runs": 100, "configs": 1, "gpus": 1},
                                [trial], {}, {}, True)


def test_trials_of_two_units_are_not_pooled():
    from bot.plans import estimate
    trials = []
    for i, kind in enumerate(("program", "mark:prompt"), 1):
        r = launcher_report({"batch": 4, "seq": 64}, f"T{i}", 1.0)
        r["units"] = {"kind": kind, "run": 3, "program": {"seconds": 2.0}}
        trials.append({"id": i, "trial": f"T{i}", "status": "done", "report": r})
    with pytest.raises(estimate.EstimateError, match="T1 counted a run as a program and T2 as "
                                                      "a mark:prompt"):
        estimate.per_run(trials)
