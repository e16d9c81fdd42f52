"""`llm-train`: real training steps in child processes, ZeRO-1 over real ranks (gloo)."""
import pytest

from worker import launcher, stats, summary
from worker.spec import SpecError, parse

# One pass a trial (malloc=glibc): these test training, the two-pass default is
# tests/test_passes.py's.
TINY = ["llm-train", "layers=2", "hidden=64", "heads=2", "kv_heads=1", "vocab=256", "seq=16",
        "malloc=glibc", "processes=1", "steps=3"]


def trial(*words):
    report = launcher.run_trial(parse([*TINY, *words]))
    assert report["status"] == "ok", report.get("error")
    return report


def test_training_lowers_the_loss_and_adam_keeps_8_bytes_per_param():
    r = trial()
    t = r["training"]
    assert t["loss_final"] < t["loss_first"] and len(t["losses"]) == 4  # warmup + 3 steps
    assert t["ranks"][0]["optimizer_state_bytes"] == 8 * t["params"]
    assert r["latency"]["count"] == 3 and r["headline"]["metric"] == "step time"
    assert [p["name"] for p in r["phases"]] == ["setup", "weights", "data", "warmup", "run"]


def test_training_reports_its_stability_over_the_measured_steps():
    r = trial()
    st = r["stability"]
    assert st["count"] == 3 and st["stopped_by"] == "count" and st["threshold"] is None
    assert st["bound"] == stats.FIXED_BOUND and isinstance(st["stable"], bool)
    assert st["iqr_over_median"] > 0
    assert st["seconds"] >= 3 * r["latency"]["mean"] * 0.99
    line = dict(summary.facts(r))["stability"]
    assert "over a fixed 3 steps" in line and "5% bound" in line
    assert line.startswith("UNSTABLE") == (not st["stable"])


def test_zero1_over_two_ranks_shards_the_states_and_keeps_the_loss():
    base, zero = trial(), trial("world=2", "zero=1")
    t = zero["training"]
    per_rank = [x["optimizer_state_bytes"] for x in t["ranks"]]
    assert len(per_rank) == 2 and sum(per_rank) == 8 * t["params"]
    assert t["optimizer_state_theory_per_rank"] == 8 * t["params"] / 2
    # the batch is split over the ranks, so the trajectory is the same training
    assert t["losses"] == pytest.approx(base["training"]["losses"], rel=1e-4)


def test_checkpointing_recomputes_without_changing_the_result():
    plain, ckpt = trial(), trial("checkpointing=full")
    assert ckpt["training"]["losses"] == pytest.approx(plain["training"]["losses"], rel=1e-5)


@pytest.mark.parametrize("words, says", [
    (["zero=1"], "world=1 has one"),
    (["world=3"], "must divide evenly"),
    (["precision=fp8"], "precision must be one of"),
    (["world=0"], "world must be from 1"),
])
def test_bad_training_configs_are_refused_before_a_job(words, says):
    with pytest.raises(SpecError, match=says):
        parse([*TINY, *words])


def test_more_ranks_than_the_cpu_has_is_unsupported():
    import os
    ranks = 2 * (os.cpu_count() or 1)
    r = launcher.run_trial(parse([*TINY, f"world={ranks}", f"batch={ranks}"]))
    assert r["status"] == "failed" and r["error"]["class"] == "unsupported"
    assert f"world={ranks}" in r["error"]["message"]


def test_a_rank_that_dies_takes_the_others_down_and_fails_the_attempt():
    import threading
    import time

    import psutil
    me = psutil.Process()
    out = {}
    runner = threading.Thread(target=lambda: out.update(r=launcher.run_trial(
        parse([*TINY[:-1], "world=2", "zero=1", "steps=100000", "timeout=120"]))))
    runner.start()
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:
        victim = next((p for p in me.children(recursive=True)
                       if "spawn_main" in " ".join(p.cmdline())), None)
        time.sleep(0.2)
    assert victim is not None, "rank 1 never started"
    time.sleep(3)  # let it reach the training steps
    victim.kill()
    runner.join(60)
    assert not runner.is_alive(), "the trial did not end when a rank died"
    r = out["r"]
    assert r["status"] == "failed" and r["error"]["class"] == "crash"
    assert "rank 1 died" in r["error"]["message"]
    assert not [p for p in me.children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]
