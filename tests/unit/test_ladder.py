"""The optimization ladder: its steps, its table, its recommendation (pure); one
whole ladder through the console is tests/e2e/test_ladder_console.py."""
import pytest

from bot.trials import ladder, ladderfit
from worker import arithmetic
from worker.spec import SpecError

TINY = ("llm-train layers=2 hidden=64 heads=2 kv_heads=1 vocab=256 seq=32 batch=4 steps=3 "
        "processes=1")


def test_each_step_is_on_top_of_the_previous():
    steps, budget = ladder.parse(TINY.split() + ["budget=24GB", "world=4"])
    assert [n for n, _, _ in steps] == list(ladder.STEPS) and budget == 24 * 10**9
    p = [s.params for _, s, _ in steps]
    assert (p[0]["precision"], p[0]["checkpointing"], p[0]["zero"]) == ("fp32", "none", 0)
    assert (p[1]["precision"], p[1]["checkpointing"]) == ("bf16", "none")
    assert (p[2]["precision"], p[2]["checkpointing"], p[2]["zero"]) == ("bf16", "full", 0)
    assert (p[3]["zero"], p[3]["world"], p[3]["checkpointing"]) == (1, 4, "full")


@pytest.mark.parametrize("extra, says", [
    (["budget=lots"], "budget is a size, a number and its unit"),
    (["budget=0GB"], "budget must be from 1 MiB to 100 TiB"),
    (["zero=1"], "the ladder sets it itself"),
    (["precision=fp32"], "give bf16 or fp16"),
    (["world=3"], "must divide evenly"),
])
def test_bad_ladders_are_refused(extra, says):
    with pytest.raises(SpecError, match=says):
        ladder.parse(TINY.split() + extra)
    with pytest.raises(SpecError, match="training workload"):
        ladder.parse(["llm-infer"])


SHAPE = {"layers": 4, "hidden": 64, "heads": 2, "kv_heads": 1, "vocab": 256, "batch": 8,
         "seq": 32}


CONFIGS = [("fp32", "none"), ("bf16", "none"), ("bf16", "full"), ("bf16", "full")]


def report(mem, seconds, loss, world=1, states=(800,), sd=None, count=8, step=None):
    step = step if step is not None else 3 if world > 1 else 0
    precision, checkpointing = CONFIGS[step]
    return {"status": "ok", "trial": f"T{step + 1}",
            "params": {**SHAPE, "zero": int(world > 1), "world": world,
                       "precision": precision, "checkpointing": checkpointing},
            "latency": {"mean": seconds, "stdev": sd, "count": count},
            "training": {"loss_final": loss, "steps": 4, "world": world,
                         "optimizer_state_theory_per_rank": 800 / world,
                         "ranks": [{"rank": i, "peak_allocated": mem, "host_rss_peak": None,
                                    "optimizer_state_bytes": b} for i, b in enumerate(states)]}}


def test_a_step_that_breaks_quality_is_not_adopted_whatever_it_saves():
    reports = [report(10 * 2**30, 1.0, 5.0), report(6 * 2**30, 0.5, 5.2, step=1),
               report(4 * 2**30, 0.6, 5.0, step=2), report(3 * 2**30, 0.7, 5.0, 2, (400, 400))]
    table = ladder.rows(list(ladder.STEPS), reports)
    assert table[1]["quality_ok"] is False and table[1]["dmem_prev"] == pytest.approx(-0.4)
    advice = ladder.recommend(table, budget=5 * 2**30)
    assert "quality broke" in advice[0] and "not adopted" in advice[0]
    assert advice[1].startswith("checkpointing: adopt for memory — 33% less memory")
    assert "Fits the budget" in advice[2]
    # no sd measured: time is not judged, and no "faster" is claimed
    assert "no verdict" in advice[1] and "faster" not in advice[1]
    assert advice[3] == ("checkpointing and zero-1 were measured with precision=bf16 anyway "
                         "(precision was not "
                         "adopted; the ladder queues every step at once, each on top of the "
                         "previous).")
    assert advice[-1].startswith("Recommended configuration: precision=bf16 "
                                 "checkpointing=full zero=0 world=1 (the checkpointing step, T3; "
                                 "it keeps precision, not adopted on its own")


MiB = 2**20


def test_a_gain_inside_the_noise_is_not_adopted_and_recomputation_is_not_called_faster():
    # issue 17: checkpointing "45% faster" with a step sd of 870 ms on a mean of 787 ms
    reports = [report(900 * MiB, 1.50, 5.0, sd=0.02, count=8),
               report(898 * MiB, 1.43, 5.0, sd=0.05, count=3, step=1),
               report(600 * MiB, 0.787, 5.0, sd=0.870, count=3, step=2),
               report(599 * MiB, 0.80, 5.0, 2, (400, 400), sd=0.01, count=8)]
    table = ladder.rows(list(ladder.STEPS), reports)
    assert table[2]["time_test"]["verdict"] == "same"
    advice = ladder.recommend(table, budget=None)
    # precision: 0.2% less memory (inside 1%), time not measurably different
    assert advice[0].startswith("precision: not adopted: no measurable gain — memory -0.2%, "
                                "within the 1% noise of torch allocator")
    assert "precision/baseline ×0.95 (95% Welch t interval" in advice[0]
    assert advice[1].startswith("checkpointing: adopt for memory — 33% less memory; time "
                                "checkpointing/precision ×0.55")
    assert "no measurable difference; quality held" in advice[1] and "faster" not in advice[1]
    assert advice[2].startswith("zero-1: not adopted: no measurable gain")
    assert "checkpointing and zero-1 were measured with precision=bf16 anyway" in advice[3]
    assert advice[-1].startswith("Recommended configuration: precision=bf16 checkpointing=full "
                                 "zero=0 world=1 (the checkpointing step, T3")
    text = ladder.message([{"id": 1, "trial": f"T{i}", "channel": "C"} for i in (1, 2, 3, 4)],
                          reports, None)["text"]
    assert "787 ms ±870 ms" in text and "Recommended configuration:" in text


def test_slower_but_smaller_is_adopted_for_memory_and_faster_for_time():
    reports = [report(900 * MiB, 1.0, 5.0, sd=0.01, count=10),
               report(890 * MiB, 0.5, 5.0, sd=0.01, count=10, step=1),
               report(500 * MiB, 0.7, 5.0, sd=0.01, count=10, step=2),
               report(300 * MiB, 0.7, 5.0, 2, (400, 400), sd=0.01, count=10)]
    advice = ladder.recommend(ladder.rows(list(ladder.STEPS), reports), budget=None)
    assert advice[0].startswith("precision: adopt for memory and time — 1% less memory")
    assert "precision is faster" in advice[0]
    assert advice[1].startswith("checkpointing: adopt for memory, though slower — 44% less")
    assert "checkpointing is slower" in advice[1]
    assert advice[-1] == ("Recommended configuration: precision=bf16 checkpointing=full zero=1 "
                          "world=2 (the zero-1 step, T4).")


def test_a_baseline_that_fits_is_the_recommended_configuration():
    reports = [report(900 * MiB, 1.0, 5.0), report(800 * MiB, 0.9, 5.0, step=1),
               report(700 * MiB, 1.2, 5.0, step=2), report(500 * MiB, 1.3, 5.0, 2, (400, 400))]
    advice = ladder.recommend(ladder.rows(list(ladder.STEPS), reports), budget=2**30)
    assert advice[-1] == ("Recommended configuration: precision=fp32 checkpointing=none zero=0 "
                          "world=1 (the baseline, T1).")


def test_nothing_fits_says_so_with_the_numbers():
    reports = [report(10 * 2**30, 1.0, 5.0), report(9 * 2**30, 0.9, 5.0, step=1),
               report(8 * 2**30, 1.2, 5.0, step=2), report(7 * 2**30, 1.3, 5.0, 2, (400, 400))]
    advice = ladder.recommend(ladder.rows(list(ladder.STEPS), reports), budget=2**30)
    assert any("Nothing fits 1 GiB" in a and "7 GiB" in a for a in advice)
    text = "\n".join(advice)
    # checkpointing 8 GiB on one rank, ZeRO-1 7 GiB on two: ~256 MiB per sequence,
    # so the 6 GiB over is more than all four sequences' activations
    assert "no smaller batch or sequence fits: 6 GiB over" in text
    assert "fewer layers alone cannot fit: all 4 layers" in text
    # the step is bf16: not a V100 or a T4, which have no bf16
    assert ("smallest in the datasheet table above 7 GiB that does bf16 (V100 and T4 do not) "
            "is L4 (24 GB)") in text


def test_the_redefined_goal_is_predicted_from_the_measured_peak():
    p = {**SHAPE, "zero": 0}
    fixed, per_layer = ladderfit.fixed_bytes(p, 1)
    params = arithmetic.weight_params(p)
    assert fixed == params["total"] * 16 and per_layer == params["per_layer"] * 16
    row = {"params": p, "world": 1, "memory": fixed + 8000, "method": "torch allocator"}
    lines = ladderfit.redefine(row, budget=fixed + 2000)
    # a quarter of the activations' room: batch 8 → 2, seq 32 → 8
    assert "batch=2 (now 8) or seq=8 (now 32)" in lines[0]
    # fewer layers: each drops per_layer bytes; the activations are kept
    want = (2000 - 8000) // per_layer + 4
    assert f"layers={want} (now 4)" in lines[1] or want < 1
    sharded = ladderfit.fixed_bytes({**p, "zero": 1}, 2)[0]
    assert sharded == params["total"] * 12  # 4 + 4 + 8/2
    assert "no smaller batch or sequence fits" in ladderfit.redefine(row, budget=fixed // 2)[0]
    # on host RSS the runtime's own share does not shrink with the batch
    host = {**row, "runtime": 4000, "memory": fixed + 4000 + 8000, "method": "host max RSS"}
    lines = ladderfit.redefine(host, budget=fixed + 4000 + 2000)
    assert "batch=2 (now 8)" in lines[0] and "of runtime" in lines[0]
    assert "GPU worker before renting" in lines[-2]


def test_activations_per_sequence_come_from_the_checkpointing_and_zero_steps():
    MiB = 2**20
    reports = [report(900 * MiB, 1.0, 5.0), report(800 * MiB, 0.9, 5.0, step=1),
               report(700 * MiB, 1.2, 5.0, step=2), report(500 * MiB, 1.3, 5.0, 2, (400, 400))]
    table = ladder.rows(list(ladder.STEPS), reports)
    moved = 8 * arithmetic.weight_params(SHAPE)["total"] / 2
    per_seq = ladderfit.per_sequence(table)
    assert per_seq == int((200 * MiB - moved) / 4)  # batch 8 on one rank vs 4 per rank
    # 500 MiB with 4 sequences per rank, budget 400 MiB: drop 100 MiB of ~400 of activations
    g = ladderfit.goal(table[-1], 400 * MiB, per_seq)
    assert g["activations"] == per_seq * 4
    assert g["batch"] == 2 * int(4 * (1 - 100 * MiB / (per_seq * 4)))
    assert g["seq"] == int(32 * (1 - 100 * MiB / (per_seq * 4)))
    text = "\n".join(ladder.recommend(table, 400 * MiB))
    assert f"batch={g['batch']} (now 8) or seq={g['seq']} (now 32)" in text
    assert "measured as the checkpointing step's peak less the ZeRO-1 step's" in text
    # a difference that is not positive measures nothing
    reports[3] = report(700 * MiB, 1.3, 5.0, 2, (400, 400))
    assert ladderfit.per_sequence(ladder.rows(list(ladder.STEPS), reports)) is None


def test_ranks_no_worker_has_are_refused_before_a_job(tmp_path):
    from bot import commands
    from bot.app.runtime import context
    from bot.store import Store
    q = context(Store(str(tmp_path / "r.db")))
    q.store.upsert_worker("gpu-a", {"gpus": ["NVIDIA H200"], "cpus": 16})
    reply, job = commands.trial(q, "ladder llm-train device=cuda world=2", "U1", "C1")
    assert job is None and "No worker can run `world=2` ranks" in reply["text"]
    assert "gpu-a: 1 GPU(s), 16 cores" in reply["text"] and q.store.jobs() == []
    _, job = commands.trial(q, "llm-train device=cuda", "U1", "C1")
    assert job is not None  # one rank fits


def test_a_step_whose_loss_diverged_breaks_quality_and_says_so():
    # The worker reports a loss that was not finite as null (JSON has no NaN):
    # the step is not adopted, and the table says why rather than "nan%".
    reports = [report(10 * 2**30, 1.0, 5.0), report(6 * 2**30, 0.5, None, step=1),
               report(4 * 2**30, 0.6, 5.0, step=2), report(3 * 2**30, 0.7, 5.0, 2, (400, 400))]
    table = ladder.rows(list(ladder.STEPS), reports)
    assert table[1]["quality"] is None and table[1]["quality_ok"] is False
    advice = ladder.recommend(table, budget=5 * 2**30)
    assert advice[0].startswith("precision: quality broke (loss not finite against the fp32 "
                                "baseline")
    jobs = [{"id": i, "trial": f"T{i}", "channel": "C1", "ladder": 1} for i in range(1, 5)]
    text = ladder.message(jobs, reports, 5 * 2**30)["text"]
    assert "not finite BROKE" in text and "nan" not in text.lower()
