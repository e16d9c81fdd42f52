"""`/trial sweep` and `/trial fit`: parsing and the queue posting the fit once when
a sweep's last trial ends; one sweep through `trialbot console` is
tests/e2e/test_sweep_console.py."""
import json
import time

import pytest

from bot import commands
from bot.app.runtime import context
from bot.store import Store
from bot.trials import command as trial_command
from worker import report as reports
from worker import spec
from worker.spec import Param, Workload

RECIPE = Workload("paper-infer", "a paper's script", (
    Param("batch", "int", 4, low=1, high=512), Param("seq", "int", 256, low=1, high=8192),
    Param("batches", "int", 3, low=1, high=1000),
    Param("dtype", "choice", "fp32", choices=("fp32", "bf16"))) + spec.COMMON, recipe=True)


def test_sweep_is_the_cartesian_product_each_parsed_as_a_trial():
    cmd = trial_command.parse_trial("sweep llm-infer batch=1,2,4 prompt=64,128 gen=8 dtype=bf16")
    assert cmd.name == "sweep" and len(cmd.specs) == 6
    assert [(s.params["batch"], s.params["prompt"]) for s in cmd.specs] == [
        (1, 64), (1, 128), (2, 64), (2, 128), (4, 64), (4, 128)]
    assert all(s.params["gen"] == 8 and s.params["dtype"] == "bf16" for s in cmd.specs)
    assert cmd.words[0] == "llm-infer batch=1 prompt=64 gen=8 dtype=bf16"
    assert cmd.specs[0] == spec.parse(cmd.words[0].split())
    recipe = trial_command.parse_trial("sweep recipe paper-infer batch=1,2,4 seq=64",
                                  {"paper-infer": RECIPE})
    assert [s.params["batch"] for s in recipe.specs] == [1, 2, 4]
    assert recipe.specs[0].recipe == "paper-infer" and recipe.specs[0].params["seq"] == 64


@pytest.mark.parametrize("text, token, says", [
    ("sweep", "", "Name what to sweep"),
    ("sweep llm-infer batch=4 prompt=512", "llm-infer batch=4 prompt=512", "at least 2 configs"),
    ("sweep llm-infer batch=1,two", "batch=1,two", "whole number"),
    ("sweep llm-infer batch=1,2.5", "batch=1,2.5", "whole number"),
    ("sweep llm-infer batch=1,2,1", "batch=1,2,1", "listed twice"),
    ("sweep llm-infer batch=1,,2", "batch=1,,2", "empty item"),
    ("sweep llm-infer batch=1,", "batch=1,", "empty item"),
    ("sweep llm-infer batch=0,1", "batch=0,1", "from 1 to 4096"),
    ("sweep llm-infer dtype=fp32,bf16", "dtype=fp32,bf16", "whole-number"),
    ("sweep llm-infer hidden=64,128", "hidden=64,128", "batch, prompt, gen or layers"),
    ("sweep llm-infer colour=1,2", "colour=1,2", "has no parameter"),
    ("sweep llm-infer batch=1,2 batch=3,4", "batch=3,4", "given twice"),
    ("sweep llm-infer batch=1,2,3,4,5 prompt=8,16,32,64", None, "at most 16"),
    ("sweep llm-finetune batch=1,2", "llm-finetune", "not a workload"),
    ("sweep recipe nope batch=1,2", "nope", "not a recipe"),
    ("sweep recipe paper-infer seq=1,2 batches=1,2", None, "at most one other"),
    ("sweep recipe paper-infer timeout=1,2", "timeout=1,2", "one value"),
    ("sweep llm-infer batch=1,2 scenario=single-stream", "batch=2", "single-stream"),
    ("sweep llm-infer batch=1,2 heads=3", "heads=3", "divide evenly"),
    ("fit", "fit", "takes a sweep id"),
    ("fit T12", "T12", "not a sweep id"),
    ("fit S1 batch", "batch", "key=value"),
    ("fit S1 batch=0", "batch=0", "whole number"),
    ("fit S1 batch=x", "batch=x", "whole number"),
    ("fit S1 batch=2 batch=4", "batch=4", "twice"),
    ("fit S1 gpu=A100", "gpu=A100", "A100-40GB"),
    ("fit S1 gpu=Z9", "gpu=Z9", "H100-80GB"),
])
def test_bad_sweep_and_fit_words_name_the_problem(text, token, says):
    with pytest.raises(spec.SpecError) as err:
        trial_command.parse_trial(text, {"paper-infer": RECIPE})
    assert says in err.value.message
    if token is not None:
        assert err.value.token == token


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "s.db")))


def ok_report(job, rss):
    r = reports.new_report(job["workload"], job["spec"]["params"])
    r.update(status="ok", env={"device": "cpu"})
    r["memory"]["host_rss_peak"] = rss
    r["latency"] = {"mean": 0.01 * job["spec"]["params"]["batch"]}
    return r


def sweep_messages(ctx):
    return [m for m in ctx.store.unsent(100) if m["kind"] == "sweep"]


def test_the_fit_is_posted_once_when_the_last_trial_ends(ctx):
    reply, last = commands.trial(ctx, "sweep llm-infer batch=1,2,4 gen=4", "U1", "C1")
    assert "Queued sweep *S1*: T1–T3 (3 trials)" in reply["text"]
    assert last["trial"] == "T3" and last["sweep"] == 1
    assert "is not finished" in commands.trial(ctx, "fit S1", "U1", "C1")[0]["text"]
    for n in range(3):
        job = ctx.queue.lease("w1", 0)
        assert sweep_messages(ctx) == []
        ctx.queue.finish(job["id"], "w1", job["lease"],
                     ok_report(job, 300 * 2**20 + job["spec"]["params"]["batch"] * 2**20))
    (msg,) = sweep_messages(ctx)
    assert msg["channel"] == "C1" and msg["job"] == 3 and msg["thread_of"] is None
    assert "*Sweep S1*" in msg["text"] and "3 ok, 0 failed" in msg["text"]
    assert "held out T3" in msg["text"] and "error +0.0%" in msg["text"]
    assert "No GPU answer" in msg["text"] and "device=cuda" in msg["text"]
    assert "256 B per token" not in msg["text"] and "KV cache 2·layers" in msg["text"]
    assert 5 <= len(msg["blocks"]) <= 50 and "\n~" not in msg["text"]
    assert msg["blocks"][-1]["type"] == "context" and "least squares" in msg["text"]
    answer = commands.trial(ctx, "fit S1 batch=16 gpu=H100", "U1", "C1")[0]
    assert answer["response_type"] == "ephemeral"
    assert "Predicted at batch=16 prompt=64 gen=4" in answer["text"]
    assert "host_rss_peak: 316 MiB" in answer["text"] and "extrapolated 4×" in answer["text"]
    assert "No answer: this sweep measured host RSS only" in answer["text"]
    json.dumps(answer)


def test_a_sweep_ending_in_a_lost_lease_still_posts_its_fit(ctx):
    commands.trial(ctx, "sweep llm-infer batch=1,2,4 gen=4", "U1", "C1")
    for n in range(2):
        job = ctx.queue.lease("w1", 0)
        ctx.queue.finish(job["id"], "w1", job["lease"], ok_report(job, 2**28 * n + 2**28))
    ctx.queue.lease_seconds, ctx.queue.max_leases = 0.1, 1
    ctx.queue.lease("w1", 0)
    time.sleep(0.2)
    ctx.queue.fail_exhausted()
    (msg,) = sweep_messages(ctx)
    assert "2 ok, 1 failed" in msg["text"] and "T3 (batch=4 prompt=64 gen=4): killed" in msg["text"]
    assert "held-out error cannot be computed" in msg["text"]   # two points: a line
    assert ctx.store.job(3)["status"] == "failed"


def test_fit_questions_that_cannot_be_answered_create_nothing(ctx):
    assert "There is no sweep S7" in commands.trial(ctx, "fit S7", "U1", "C1")[0]["text"]
    commands.trial(ctx, "sweep llm-infer batch=1,2 gen=4", "U1", "C1")
    for _ in range(2):
        job = ctx.queue.lease("w1", 0)
        ctx.queue.finish(job["id"], "w1", job["lease"], ok_report(job, 2**28 * job["id"]))
    bad = commands.trial(ctx, "fit S1 colour=3", "U1", "C1")[0]["text"]
    assert bad.startswith(":x: `colour=3`") and "batch" in bad
    assert "batch=1,2" not in commands.trial(ctx, "fit S1 gpu=A100", "U1", "C1")[0]["text"]
    off = commands.trial(ctx, "fit S1 batch=8 prompt=4096", "U1", "C1")[0]["text"]
    assert "cannot say" in off and "sweep the length too" in off
    assert len(ctx.store.jobs(100)) == 2
