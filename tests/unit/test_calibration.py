"""The calibration of estimates by their past actuals (bot/plans/calibration.py), pure."""
import math

import numpy as np
import pytest

from bot.plans import calibration as cal

SCOPE = "1× NVIDIA H100 80GB HBM3 · llm-infer"


def pair(ratio, i=0, scope=SCOPE, est=3600.0, **kw):
    return {"estimate": est, "actual": est * ratio, "plan": f"p{i}", "block": "baseline",
            "scope": scope, "recorded": float(i), **kw}


@pytest.mark.parametrize("level, need", [(0.90, 9), (0.80, 4), (0.95, 19), (0.50, 1)])
def test_the_fewest_pairs_follow_from_the_level(level, need):
    assert cal.min_pairs(level) == need
    assert math.ceil((need + 1) * level - 1e-9) <= need
    assert math.ceil(need * level - 1e-9) > need - 1  # one fewer has no finite bound


def test_below_the_minimum_the_interval_says_uncalibrated_and_how_many_are_missing():
    out = cal.calibrate([pair(1.1, i) for i in range(3)], scope=SCOPE)
    assert not out["calibrated"] and out["low"] is None
    assert out["text"] == (f"uncalibrated: 3 of the 9 pairs needed ({SCOPE}) "
                           "(6 more recorded actuals)")


def test_no_actuals_at_all_is_uncalibrated_and_nothing_breaks():
    out = cal.calibrate([])
    assert out["text"].startswith("uncalibrated: 0 of the 9 pairs needed")
    rec = cal.record([])
    assert rec["n"] == 0 and rec["median_error"] is None and rec["worst"] is None


def test_the_multipliers_are_the_expected_order_statistics():
    rng = np.random.default_rng(7)
    r = np.exp(rng.normal(0.1, 0.2, 20))
    out = cal.calibrate([pair(x, i) for i, x in enumerate(r)], scope=SCOPE)
    logs = np.log(r)
    c = np.median(logs)
    scores = sorted(abs(logs[i] - np.median(np.delete(logs, i))) for i in range(20))
    k = math.ceil(21 * 0.9)  # 19: the 19th smallest of 20 scores
    assert out["rank"] == k and out["n"] == 20
    assert out["low"] == pytest.approx(math.exp(c - scores[k - 1]))
    assert out["high"] == pytest.approx(math.exp(c + scores[k - 1]))
    assert out["text"] == (f"calibrated on 20 past blocks ({SCOPE}): 90% of actuals fell "
                           f"within ×{out['low']:.2f}–×{out['high']:.2f} of their estimate")
    assert out["used"] == [f"p{i} baseline" for i in range(20)]


def test_at_the_minimum_the_bound_is_the_largest_score():
    r = [0.9, 0.95, 1.0, 1.02, 1.05, 1.1, 1.2, 1.3, 1.5]
    out = cal.calibrate([pair(x, i) for i, x in enumerate(r)])
    logs = np.log(r)
    worst = max(abs(logs[i] - np.median(np.delete(logs, i))) for i in range(9))
    assert out["calibrated"] and out["rank"] == 9
    assert out["high"] == pytest.approx(math.exp(np.median(logs) + worst))


def test_the_calibrated_interval_covers_new_actuals_from_the_same_conditions():
    # 10 past blocks and the next 10, ratios from one noisy distribution: over many
    # draws the interval holds about 9 in 10 or more (10/11 for exact conformal).
    rng = np.random.default_rng(1)
    held = []
    for _ in range(400):
        r = np.exp(rng.normal(0.2, 0.15, 20))
        out = cal.calibrate([pair(x, i) for i, x in enumerate(r[:10])])
        held += [out["low"] <= x <= out["high"] for x in r[10:]]
    assert np.mean(held) >= 0.88


def test_another_scope_is_never_mixed_in_and_a_block_is_not_calibrated_on_itself():
    pairs = [pair(1.0, i) for i in range(9)] + [pair(5.0, 99, scope="CPU (EPYC) · llm-infer")]
    mine = cal.scoped(pairs, SCOPE)
    assert len(mine) == 9 and all(p["scope"] == SCOPE for p in mine)
    assert len(cal.scoped(pairs, SCOPE, exclude=("p3", "baseline"))) == 8
    assert cal.calibrate(mine)["high"] == pytest.approx(1.0)


def test_ratios_per_block_and_component():
    p = {"estimate": 100.0, "actual": 150.0,
         "estimate_parts": {"prep": 20.0, "runs": 80.0, "retries": 0.0},
         "actual_parts": {"prep": 30.0, "runs": 100.0, "retries": 20.0}}
    assert cal.ratios(p) == {"block": 1.5, "prep": 1.5, "runs": 1.25, "retries": None}


def test_a_pair_without_a_ratio_is_left_out_and_named():
    out = cal.calibrate([pair(1.0, i) for i in range(9)] + [pair(0.0, 9)])
    assert out["n"] == 9 and out["left_out"][0].startswith("p9 baseline")


def test_the_record_replays_what_was_shown_and_names_the_worst_miss():
    past = [1.0, 1.05, 0.95, 1.02, 0.98, 1.04, 0.97, 1.01, 0.99, 1.0]
    pairs = [pair(x, i, interval=(0.9, 1.1)) for i, x in enumerate(past)]
    pairs.append(pair(2.0, 10, interval=(0.9, 1.1), contended=["T7"],
                      estimate_parts={"runs": 3000.0, "prep": 600.0},
                      actual_parts={"runs": 6600.0, "prep": 600.0}))
    rec = cal.record(pairs)
    # the first 9 are judged against their own intervals, the 10th and 11th calibrated
    assert [r["calibrated"] for r in rec["rows"]] == [False] * 9 + [True, True]
    assert rec["n"] == 11 and rec["held"] == 10
    assert rec["median_error"] == pytest.approx(0.02)
    assert rec["worst"]["name"] == "p10 baseline"
    assert rec["worst"]["cause"] == "contention on T7; slower runs (+1 GPU-h)"


def test_the_cause_says_when_contention_was_not_measured():
    p = pair(0.5, 1, estimate_parts={"runs": 3000.0, "retries": 600.0},
             actual_parts={"runs": 1800.0, "retries": 0.0}, unmeasured=["T3"])
    assert cal.cause(p) == "faster runs (-0.333 GPU-h); contention not measured on T3"


def test_a_slurm_actual_of_the_same_jobs_asked_again_counts_once():
    from bot.plans import review
    manual = [{"id": 1, "slurm": ["811", "812"], "hours": 2.0},
              {"id": 2, "slurm": None, "hours": 1.0},
              {"id": 3, "slurm": ["811", "812"], "hours": 2.1},
              {"id": 4, "slurm": None, "hours": 1.0}]
    assert [m["id"] for m in review.latest_per_source(manual)] == [2, 3, 4]


def test_the_benchs_pairs_plain_names_and_a_flag_are_taken_as_they_are():
    pairs = [{"estimate": 10.0, "actual": 10.0 * r, "scope": "bench", "name": f"round {i + 1}",
              "contended": i == 9} for i, r in enumerate([1.0, 1.1, 0.9, 1.05, 0.95, 1.2,
                                                          0.85, 1.0, 1.1, 1.9])]
    out = cal.calibrate(pairs)
    assert out["calibrated"] and out["low"] < 1 < out["high"]
    assert out["used"][0] == "round 1"
    rec = cal.record(pairs)
    assert rec["worst"]["name"] == "round 10"
    assert rec["worst"]["cause"] == "contention (flagged); components not recorded"
