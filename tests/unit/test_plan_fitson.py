"""Fits on at the plan's inputs (issue 33, item 4): `/plan show` evaluates each
block's "fits on" at the plan's `inputs`, beside its trial's own shape, and
carries a trial there only by something measured."""
import datetime as dt

import pytest

from bot import commands
from bot.app.runtime import context
from bot.fits import depth, gpus, scaling
from bot.fits.sweep import fit_sweep
from bot.plans import fitson
from bot.store import Store
from test_depth import gpu_report
from worker.spec import parse

TODAY = dt.date(2026, 12, 1)
MIB = 2**20
LLAMA2 = dict(preset="llama-2-7b", dtype="fp16", gen=256)


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "f.db")), admins=frozenset({"U1"}))


def say(ctx, text):
    return commands.plan(ctx, text, "U1", "C1", TODAY)["text"]


def finish(ctx, r):
    job = ctx.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1")
    leased = ctx.store.lease_next("w1", 60)
    ctx.queue.finish(job["id"], "w1", leased["lease"], dict(r, trial=job["trial"]))
    return job["trial"]


def fits_part(text):
    return text[text.index("*Fits on*"):text.index("*Open checklist")]


def line(text, start):
    return next(x for x in fits_part(text).splitlines() if x.lstrip().startswith(start))


def trial_plan(ctx, inputs=None):
    """A plan on a 2-layer Llama-2-7B trial at prompt 256, batch 1, on a GPU."""
    t = finish(ctx, gpu_report(layers=2, prompt=256, batch=1, **LLAMA2))
    say(ctx, "new kv gpu=H100")
    say(ctx, f"kv block baseline runs=10 trial={t}")
    if inputs:
        say(ctx, f"kv set inputs={inputs}")
    return t


def test_a_plan_with_inputs_4096_shows_fits_on_at_4096_beside_the_trials_shape(ctx):
    t = trial_plan(ctx, '"batch 8, prompt 4096, gen 256"')
    out = say(ctx, "kv show")
    at = line(out, "• baseline at the plan's inputs (prompt=4096 gen=256 batch=8)")
    own = line(out, f"at {t}'s own shape (prompt=256 gen=256 batch=1)")
    # One trial at prompt 256 measures nothing about prompt 4096's activations:
    # no fits on is claimed there, the floor is the arithmetic's, and the trial is named.
    assert "*not measured*" in at and "fits on" not in at.split("/trial")[0]
    full = {**depth.full_params(ctx.store.job(1)["report"]["params"]), "prompt": 4096,
            "batch": 8}
    floor = depth.fits_on(full, {})
    assert f"need {fitson.size(floor['peak'])} there" in at
    assert "L4" in at.split("hold;")[0] and "H100-80GB" not in at.split("hold;")[0]
    assert "`/trial llm-infer batch=8 prompt=4096 gen=256 layers=2" in at
    assert "gpu=H100-80GB" in at
    # Beside it, the trial's own shape as today: fits on with the largest batch.
    pred = depth.from_trial(ctx.store.job(1)["report"])
    l4 = next(g for g in pred["fits"]["gpus"] if g["gpu"] == "L4")
    assert l4["fits"] and f"L4 (largest batch {l4['largest_batch']})" in own


def test_only_the_batch_differs_the_batch_rule_carries_the_trial(ctx):
    trial_plan(ctx, '"batch 8, prompt 256, gen 256"')
    out = say(ctx, "kv show")
    at = line(out, "• baseline at the plan's inputs (prompt=256 gen=256 batch=8)")
    f = depth.from_trial(ctx.store.job(1)["report"])["fits"]
    peak = f["weights"] + 8 * f["kv_per_sequence"] + f["rest"] * 8
    assert f"batch 8 needs {fitson.size(peak)} by the batch rule" in at
    fitting = [g.name for g in gpus.TABLE.values() if g.bytes >= peak]
    assert fitting and all(name in at for name in fitting)
    assert "L4" not in at.split(";")[0]  # it holds batch 1, not batch 8


def test_a_length_sweep_carries_the_block_to_the_plans_prompt(ctx):
    commands.trial(ctx, "sweep llm-infer preset=llama-2-7b layers=32 batch=8 "
                        "prompt=256,1024,2048 gen=256 dtype=fp16", "U1", "C1")
    for _ in range(3):
        job = ctx.queue.lease("w1", 0)
        p = job["spec"]["params"]
        r = gpu_report(layers=32, trial=job["trial"], prompt=p["prompt"], batch=8,
                       rest=p["prompt"] * MIB, **LLAMA2)
        ctx.queue.finish(job["id"], "w1", job["lease"], dict(r, params=p))
    say(ctx, "new kv gpu=H100 inputs=\"batch 8, prompt 4096, gen 256\"")
    say(ctx, "kv block scale runs=10 sweep=S1 prompt=2048")
    out = say(ctx, "kv show")
    at = line(out, "• scale at the plan's inputs (prompt=4096 gen=256 batch=8)")
    fit = fit_sweep([j["report"] for j in ctx.store.sweep_jobs(1)])
    high = scaling.band(fit, "peak_reserved", {"prompt": 4096, "gen": 256, "batch": 8}).high
    assert f"peak_reserved fit at prompt=4096 gen=256 batch=8: {fitson.size(high)}" in at
    assert "*not measured*" not in at
    assert ("A100-40GB" in at) == (high <= gpus.TABLE["A100-40GB"].bytes)
    assert "no largest batch: the sweep did not vary batch" in at
    assert "at S1's own shape (prompt=2048 gen=256 batch=8)" in out


def test_a_plan_without_inputs_is_at_the_trials_shape_and_says_so(ctx):
    t = trial_plan(ctx)
    out = say(ctx, "kv show")
    assert line(out, f"• baseline at {t}'s own shape (prompt=256 gen=256 batch=1): fits on")
    assert "plan's inputs (" not in out
    assert "The plan sets no inputs, so these are at each block's own shape" in out
    assert '`/plan kv set inputs="batch 8, prompt 4096, gen 256"`' in out


def test_a_block_with_no_fits_on_answer_adds_no_section(ctx):
    from test_planner import report
    t = finish(ctx, report())  # llm-infer without a preset: no full depth to size
    say(ctx, "new kv gpu=H100 inputs=\"prompt 4096\"")
    say(ctx, f"kv block baseline runs=10 trial={t}")
    assert "*Fits on*" not in say(ctx, "kv show")


@pytest.mark.parametrize("text, says", [
    ("ShareGPT prompts", "names no prompt, gen or batch figure"),
    ("prompt 4k", "`prompt 4k` is not a whole number of at least 1"),
    ("batch 0, prompt 4096", "`batch 0` is not a whole number of at least 1"),
    ("prompt 4096, prompt 2048", "gives prompt more than once (4096, 2048)"),
])
def test_inputs_that_cannot_be_read_get_a_clear_answer(ctx, text, says):
    t = trial_plan(ctx)
    reply = say(ctx, f'kv set inputs="{text}"')
    assert says in reply and "e.g. `" in reply and "own shape" in reply
    out = say(ctx, "kv show")
    assert "The plan's inputs cannot be read" in out and says in out
    assert line(out, f"• baseline at {t}'s own shape (prompt=256 gen=256 batch=1)")


@pytest.mark.parametrize("text, given", [
    ("batch 8, prompt 4096, gen 256", {"batch": 8, "prompt": 4096, "gen": 256}),
    ("prompt=4096 batch=8", {"prompt": 4096, "batch": 8}),
    ("Prompt: 2048; gen: 64 (greedy)", {"prompt": 2048, "gen": 64}),
    ("", {}),
])
def test_inputs_are_read_as_prompt_gen_and_batch(text, given):
    assert fitson.read_inputs(text) == {"given": given, "problem": None, "text": text}


def test_readable_inputs_are_confirmed_when_set(ctx):
    trial_plan(ctx)
    reply = say(ctx, 'kv set inputs="prompt 4096, gen 256"')
    assert "Inputs read as prompt=4096 gen=256: `/plan kv show` gives fits on there" in reply
    out = say(ctx, "kv show")
    assert line(out, "• baseline at the plan's inputs (prompt=4096 gen=256 batch=1; batch as")
