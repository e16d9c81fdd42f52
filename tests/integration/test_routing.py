"""Routing: workers' labels, `/trial gpu= min_mem= label=`, the answer when no
worker can run a trial, and fair leasing across users."""
import subprocess
import time

import pytest

from bot import commands
from bot.app.runtime import context
from bot.store import Store
from bot.trials import routing
from bot.trials.workers import can_run
from conftest import BIN

QUICK = "llm-infer gen=1 repeats=1 stability=0 processes=1"
H100 = {"gpus": ["NVIDIA H100 80GB HBM3"] * 2, "gpu_memory": [85899345920] * 2,
        "device": "cuda", "cpus": 32, "labels": {"team": "vision"}}
A100 = {"gpus": ["NVIDIA A100-SXM4-40GB"], "gpu_memory": [42949672960], "device": "cuda",
        "cpus": 16, "labels": {"team": "nlp"}}
CPU = {"gpus": [], "gpu_memory": [], "device": "cpu", "cpus": 4, "labels": {"team": "nlp",
                                                                           "tier": "cheap"}}


@pytest.fixture
def ctx(tmp_path):
    ctx = context(Store(str(tmp_path / "r.db")))
    for name, info in (("h100-box", H100), ("a100-box", A100), ("cpu-box", CPU)):
        ctx.store.upsert_worker(name, info)
    return ctx


def workers(ctx):
    return ctx.store.workers()


@pytest.mark.parametrize("words, says", [
    (["gpu=H10O"], "`gpu=H10O`: `H10O` is not a GPU I know; did you mean H100-80GB?"),
    (["min_mem=lots"], "min_mem is a size"),
    (["label=team"], "a label is written `label=KEY=VALUE`"),
    (["gpu=H100", "gpu=A100-80GB"], "gpu= is given twice"),
])
def test_bad_routing_words_are_refused(ctx, words, says):
    with pytest.raises(routing.RouteError, match=says):
        routing.take(["llm-infer", *words])
    reply, job = commands.trial(ctx, " ".join([QUICK, *words]), "U1", "C1")
    assert job is None and "Nothing was queued" in reply["text"]
    assert ctx.store.jobs() == []


def test_a_route_matches_names_memory_and_labels():
    _, route = routing.take(["gpu=H100", "min_mem=80GB", "label=team=vision"])
    assert route == {"gpu": "H100-80GB", "min_mem": 80 * 10**9, "labels": {"team": "vision"}}
    assert routing.matches(H100, route) and not routing.matches(A100, route)
    assert routing.matches(A100, {"min_mem": 40 * 10**9})
    assert not routing.matches(A100, {"min_mem": 41 * 2**30})
    assert routing.matches(CPU, {"labels": {"tier": "cheap"}})
    assert not routing.matches(CPU, {"gpu": "A100"})
    # a GPU the table lacks is kept as written and matched by the words workers report
    route = routing.take(["gpu=A6000"])[1]
    assert route == {"gpu": "A6000"}
    assert routing.matches({"gpus": ["NVIDIA RTX A6000"]}, route)
    assert not routing.matches(H100, route)


def test_a_trial_no_worker_can_satisfy_is_answered_at_once(ctx):
    reply, job = commands.trial(ctx, f"{QUICK} gpu=H100 label=team=nlp", "U1", "C1")
    assert job is None and "No worker matches `gpu=H100-80GB label=team=nlp`" in reply["text"]
    assert "h100-box: cuda, NVIDIA H100 80GB HBM3 (80 GiB)" in reply["text"]
    assert "labels team=vision" in reply["text"] and ctx.store.jobs() == []


def test_a_trial_whose_workers_are_all_offline_is_queued_and_says_whom_it_waits_for(ctx):
    with ctx.store.tx():  # the H100 box was last seen three days ago, the A100 box 2 min ago
        for name, ago in (("h100-box", 3 * 86400), ("a100-box", 120)):
            ctx.store.db.execute("update workers set last_seen = ? where name = ?",
                                 [time.time() - ago, name])
    reply, job = commands.trial(ctx, f"{QUICK} gpu=H100", "U1", "C1")
    assert job["status"] == "queued" and f"Queued as *{job['trial']}*" in reply["text"]
    assert ("It waits for a worker that matches `gpu=H100-80GB`, and none is online now: "
            "*h100-box*, offline since ") in reply["text"]
    assert "(2592" in reply["text"] and "s ago)" in reply["text"]  # 259200 s and a little
    assert "start one with" not in reply["text"]
    reply, _ = commands.trial(ctx, f"sweep {QUICK} batch=1,2 min_mem=40GB", "U1", "C1")
    assert "none is online now: *a100-box*, offline since" in reply["text"]
    assert "*h100-box*, offline since" in reply["text"]  # both have 40 GB or more
    reply, _ = commands.trial(ctx, "ladder llm-train steps=2 label=team=vision", "U1", "C1")
    assert "Queued ladder" in reply["text"] and "matches `label=team=vision`" in reply["text"]
    # one online worker matches: the usual answer; not routed: no waiting line
    for text in (f"{QUICK} label=team=nlp", QUICK):
        reply, _ = commands.trial(ctx, text, "U1", "C1")
        assert "on next free worker (1 online: cpu-box)" in reply["text"]
        assert "It waits for" not in reply["text"]


def test_thirty_mixed_trials_each_run_on_a_matching_worker(ctx):
    asks = ["gpu=H100", "gpu=A100", "label=team=nlp", "min_mem=60GB", "label=tier=cheap", ""]
    for i in range(30):
        reply, job = commands.trial(ctx, f"{QUICK} {asks[i % len(asks)]}", f"U{i % 3}", "C1")
        assert job, reply["text"]
    infos = {w["name"]: w["info"] for w in workers(ctx)}
    ran = {}
    while True:
        leased = [ctx.queue.lease(name, 0) for name in infos]
        if not any(leased):
            break
        for name, job in zip(infos, leased):
            if job:
                assert can_run(infos[name], job["spec"]), (name, job["spec"])
                ran[job["id"]] = name
                ctx.store.db.execute("update jobs set status = 'done' where id = ?",
                                       [job["id"]])
    assert len(ran) == 30
    for job_id, name in ran.items():
        route = ctx.store.job(job_id)["spec"].get("route")
        assert routing.matches(infos[name], route)


def test_the_plan_target_gpu_is_the_default_route(ctx):
    ctx.store.add_plan("repro", "C1", "U1", {"gpu": "A100"})
    ctx.store.put_block({"plan": "repro", "kind": "baseline", "runs": 5, "trials": []})
    _, job = commands.trial(ctx, f"{QUICK} plan=repro block=baseline", "U1", "C1")
    assert job["spec"]["route"] == {"gpu": "A100"}
    assert ctx.queue.lease("h100-box", 0) is None and ctx.queue.lease("a100-box",
                                                                      0)["id"] == job["id"]


def test_one_users_sweep_does_not_starve_anothers_trial(tmp_path):
    q = context(Store(str(tmp_path / "f.db")))
    q.store.upsert_worker("w1", {"cpus": 4})
    sweep, _ = commands.trial(q, "sweep llm-infer batch=1,2,3,4,5,6,7,8 gen=1 repeats=1",
                                    "UA",
                             "C1")
    _, single = commands.trial(q, QUICK, "UB", "C1")
    order = []
    while (job := q.queue.lease("w1", 0)):
        order.append(job["user"])
        q.store.db.execute("update jobs set status = 'done' where id = ?", [job["id"]])
    assert order[:2] == ["UA", "UB"] and len(order) == 9


def test_worker_labels_on_the_command_line(tmp_path):
    done = subprocess.run([str(BIN / "trialbot-worker"), "--server", "http://127.0.0.1:9",
                           "--token", "t", "--label", "team"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "--label 'team' must be KEY=VALUE" in done.stderr
