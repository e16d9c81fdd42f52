"""Leasing on a real SQLite file: a worker is offered exactly the trials it can
run however many others wait, users take turns, and a lease whose worker went
silent goes back to the queue with its card saying so."""
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot import commands
from bot.app.runtime import context
from bot.store import Store
from bot.trials.workers import can_run, needs

QUICK = "llm-infer gen=1 repeats=1 stability=0"
GPU = {"gpus": ["NVIDIA H100 80GB HBM3"], "gpu_memory": [85899345920], "device": "cuda",
       "cpus": 32, "labels": {"team": "gpu"}}
CPU = {"gpus": [], "gpu_memory": [], "device": "cpu", "cpus": 4}


@pytest.fixture
def ctx(tmp_path):
    ctx = context(Store(str(tmp_path / "l.db")))
    ctx.store.upsert_worker("gpu-box", GPU)
    ctx.store.upsert_worker("cpu-box", CPU)
    return ctx


def last_seen(ctx, worker: str, ago: float) -> None:
    with ctx.store.tx():
        ctx.store.db.execute("update workers set last_seen = ? where name = ?",
                             [time.time() - ago, worker])


def queue(ctx, text: str, user: str) -> dict:
    answer, job = commands.trial(ctx, text, user, "C1")
    assert job, answer["text"]
    return job


def drain(ctx, worker: str) -> list[dict]:
    """Lease and end every job `worker` gets, in order."""
    out = []
    while job := ctx.queue.lease(worker, 0):
        out.append(job)
        ctx.store.db.execute("update jobs set status = 'done' where id = ?", [job["id"]])
    return out


def test_sixty_trials_for_a_box_that_is_down_do_not_hide_a_plain_one(ctx):
    # The operator's report: trials routed to a GPU box that is down, then one
    # plain trial; the idle CPU worker must get it on its next poll.
    last_seen(ctx, "gpu-box", 3 * 86400)
    for _ in range(60):
        queue(ctx, f"{QUICK} label=team=gpu", "UA")
    plain = queue(ctx, QUICK, "UB")
    assert ctx.queue.lease("cpu-box", 0)["id"] == plain["id"]
    assert ctx.queue.lease("cpu-box", 0) is None
    assert ctx.store.job_counts()["queued"] == 60
    assert len(drain(ctx, "gpu-box")) == 60  # the box is back: it gets them all


def test_trials_put_in_by_sql_without_a_class_are_classified_and_leased(ctx):
    # Rows from before migration 10, or a script's bulk insert, carry no class.
    routed = queue(ctx, f"{QUICK} label=team=gpu", "UA")
    plain = queue(ctx, QUICK, "UB")
    with ctx.store.tx():
        ctx.store.db.execute("update jobs set needs = null")
        ctx.store.db.conn.executemany(
            "insert into jobs (workload, spec, words, user, channel, status, created) "
            "select workload, spec, words, user, channel, 'queued', ? from jobs where id = ?",
            [(time.time(), routed["id"])] * 59)
    assert ctx.queue.lease("cpu-box", 0)["id"] == plain["id"]
    assert ctx.store.unclassified() == []
    assert [j["spec"]["route"] for j in drain(ctx, "gpu-box")] == [{"labels": {"team": "gpu"}}] * 60


def test_users_take_turns_the_least_recently_served_first(ctx):
    for user in ("UA", "UA", "UA", "UB", "UB", "UC"):
        queue(ctx, QUICK, user)
    assert [j["user"] for j in drain(ctx, "cpu-box")] == ["UA", "UB", "UC", "UA", "UB", "UA"]
    # UA was served last, so UB's newer trial goes before UA's older one
    older = queue(ctx, QUICK, "UA")
    newer = queue(ctx, QUICK, "UB")
    assert [j["id"] for j in drain(ctx, "cpu-box")] == [newer["id"], older["id"]]


def test_an_expired_lease_goes_back_to_the_queue_and_its_card_says_why(ctx):
    job = queue(ctx, QUICK, "U1")
    ctx.queue.lease_seconds = 0.1
    ctx.queue.lease("cpu-box", 0)
    time.sleep(0.15)
    ctx.queue.reap()
    assert ctx.store.job(job["id"])["status"] == "queued"
    card_id, edit = ctx.store.unsent()[0]["id"], ctx.store.unsent()[1]
    assert edit["update_of"] == card_id and "queued again" in edit["text"]
    assert "*cpu-box* stopped heartbeating" in edit["text"] and "started on" not in edit["text"]
    assert edit["blocks"][1]["elements"][0]["action_id"] == "trial_cancel"
    (lost,) = ctx.store.attempts(job["id"])
    assert lost["error_class"] == "killed" and lost["expired"] == 1
    assert ctx.store.workers()[1]["job"] is None  # cpu-box holds it no more
    again = ctx.queue.lease("gpu-box", 0)
    assert again["id"] == job["id"] and again["attempts"] == 2
    assert "started on *gpu-box*" in ctx.store.unsent()[-1]["text"]


GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Apple M2"]
RECIPE = st.fixed_dictionaries({"name": st.sampled_from(["adkv", "flash"]),
                                "requires": st.sampled_from(["cuda", "any"])})
HF_MODEL = st.one_of(st.fixed_dictionaries({"layers": st.integers(1, 64)}),
                     st.fixed_dictionaries({"error": st.just("bad config")}))
HF = {"transformers": st.sampled_from(["4.50", "4.50", ""]),
      "flash_attn": st.sampled_from(["2.7", ""]), "hub": st.booleans(),
      "models": st.dictionaries(st.sampled_from(["tiny", "org/x"]), HF_MODEL, min_size=1)}
INFO = {"gpus": st.lists(st.sampled_from(GPUS), max_size=4),
        "gpu_memory": st.lists(st.sampled_from([42949672960, 85899345920]), max_size=4),
        "device": st.sampled_from(["cuda", "cpu", "mps", None]),
        "cpus": st.one_of(st.none(), st.integers(1, 64)),
        "labels": st.dictionaries(st.sampled_from(["team", "tier"]), st.sampled_from(["a", "b"])),
        "recipes": st.lists(RECIPE, max_size=2),
        "hf": st.one_of(st.fixed_dictionaries(HF), st.fixed_dictionaries({}, optional=HF))}
ROUTE = {"gpu": st.sampled_from(["H100-80GB", "A100", "M2"]),
         "min_mem": st.sampled_from([40 * 10**9, 80 * 10**9]),
         "labels": st.dictionaries(st.sampled_from(["team", "tier"]), st.sampled_from(["a", "b"]))}
PARAMS = {"world": st.sampled_from([0, 1, 1, 2, 4, 8]),
          "device": st.sampled_from(["auto", "cuda", "cpu"]),
          "attn": st.sampled_from(["sdpa", "flash_attention_2"]),
          "model": st.sampled_from(["none", "mistral-7b", "tiny", "tiny", "org/x", "nope"]),
          "layers": st.integers(0, 80), "batch": st.integers(1, 64)}
SPEC = {"workload": st.sampled_from(["llm-infer", "llm-train", "hf-infer", "hf-train", "adkv"]),
        "params": st.one_of(st.fixed_dictionaries(PARAMS),  # every key, or some (defaults)
                            st.fixed_dictionaries({}, optional=PARAMS)),
        "route": st.one_of(st.none(), st.fixed_dictionaries({}, optional=ROUTE)),
        "recipe": st.sampled_from([None, None, None, "adkv", "flash"])}


def some(fields: dict):
    """Dicts with every field, or with any of them left out."""
    return st.one_of(st.fixed_dictionaries(fields), st.fixed_dictionaries({}, optional=fields))


@settings(max_examples=2000, deadline=None)
@given(some(INFO), some(SPEC))
@example({"hf": {"transformers": "4.50", "models": {"tiny": {"layers": 4}}}},
         {"workload": "hf-infer", "params": {"model": "tiny", "layers": 10}})
@example({"hf": {"transformers": "4.50", "flash_attn": ""}, "device": "cuda"},
         {"workload": "hf-train", "params": {"model": "mistral-7b",
                                             "attn": "flash_attention_2"}})
@example({"gpus": ["H100"]}, {"workload": "llm-train", "params": {"world": 2, "device": "cuda"}})
@example({"recipes": [{"name": "adkv", "requires": "cuda"}], "device": "cpu"},
         {"workload": "adkv", "recipe": "adkv", "params": {}})
@example({"labels": {"team": "a"}}, {"workload": "llm-infer", "params": {},
                                     "route": {"labels": {"team": "b"}}})
def test_a_trials_needs_decide_where_it_runs_as_its_spec_does(info, spec):
    # Leasing asks can_run of a class's needs, not of each trial: the two must agree
    # for every worker, whatever can_run comes to read.
    assert can_run(info, needs(spec)) == can_run(info, spec)
    assert needs(needs(spec)) == needs(spec)


def test_trials_that_differ_only_in_size_share_one_class(ctx):
    queue(ctx, f"sweep {QUICK} batch=1,2,4,8", "UA")
    queue(ctx, f"{QUICK} label=team=gpu", "UA")
    queue(ctx, "llm-train steps=2 world=2 device=cpu", "UA")
    assert len(ctx.store.queued_needs()) == 3
