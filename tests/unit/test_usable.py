"""A fit's usability verdict (bot/fits/usable.py) on hand-built sweep reports
whose fault is known: noisy points, extrapolation, too few points, the model's
shape; and the marks (UNSTABLE, contended) the points carry into the fit."""
import json

import pytest

from bot.fits import batchview, depth, depthview, scaling, usable
from bot.fits.sweep import fit_sweep, judge_seconds, predict_seconds
from test_scaling import llm_report

MiB = 2**20
QUIET = {"flagged": False, "summary": None}
BUSY = {"flagged": True, "summary": "busy machine: other processes used 61% of the CPU "
                                    "during the run phase"}


def timed(trial, batch, seconds, contention=QUIET, spread=0.01, **kw):
    """An llm-infer report at `batch` taking `seconds` a request; its
    stability and contention as a worker with the probe reports them."""
    r = llm_report(trial, batch, seconds=seconds, **kw)
    r["stability"] = {"count": 5, "iqr_over_median": spread, "threshold": 0.05,
                      "stable": spread < 0.05, "stopped_by": "stable", "seconds": 1.0}
    if contention is not None:
        r["contention"] = contention
    return r


def sweep(times, marks=None, batches=(1, 2, 4, 8)):
    """A time sweep; marks: {trial: (contention, spread)}."""
    marks = marks or {}
    return fit_sweep([timed(f"T{i + 1}", b, t, *marks.get(f"T{i + 1}", (QUIET, 0.01)))
                      for i, (b, t) in enumerate(zip(batches, times))])


def test_marks_read_unstable_and_contention_and_say_not_measured():
    r = llm_report("T1", 1, seconds=1.0)
    assert usable.marks(r) == {"unstable": None, "spread": None, "contended": None,
                               "contention": None}
    r["stability"] = {"count": 5, "iqr_over_median": 14.6, "threshold": None, "stable": None}
    r["contention"] = BUSY
    m = usable.marks(r)  # an old fixed count is judged by the worker's bound here too
    assert m["unstable"] is True and m["contended"] is True and "61%" in m["contention"]
    r["stability"] = {"count": 9, "iqr_over_median": 0.02, "threshold": 0.05, "stable": True}
    r["contention"] = QUIET
    assert usable.marks(r)["unstable"] is False and usable.marks(r)["contended"] is False


def test_a_held_out_error_from_a_busy_point_is_noise_and_names_the_trial():
    # T3 ran while the machine was busy: the line through it misses batch 8 by +700%.
    fit = sweep([0.10, 0.20, 1.50, 0.42], {"T3": (BUSY, 0.4)})
    v = fit["time"]["verdict"]
    assert not v["usable"] and v["cause"] == "noise"
    assert "over the 25% bound" in v["problem"] and "held-out error +" in v["problem"]
    assert "T3 UNSTABLE (IQR/median 40.0%)" in v["why"] and "T3 contended (busy machine" in v["why"]
    assert v["instead"].startswith("re-run T3 on a quiet machine")
    text = "\n\n".join(batchview.fit_parts(1, [{"trial": "T1", "status": "done", "channel": "C"},
                                                {"trial": "T4", "status": "done"}], fit))
    assert ":no_entry: *unusable: held-out error" in text and "not to use" in text
    # the predictions at 2× and 4× are marked too, never shown bare
    assert "• time: *unusable, as its fit above (noise)*" in text
    json.dumps(fit, allow_nan=False)


def test_a_negative_time_far_from_the_points_is_extrapolation_not_noise():
    # Quiet points, a slight downward trend: fine where measured, negative at batch 4096.
    fit = sweep([1.00, 0.99, 0.98, 0.96])
    assert fit["time"]["verdict"]["usable"]
    value, _, _ = predict_seconds(fit, {"batch": 4096})
    assert value < 0
    v = judge_seconds(fit, {"batch": 4096}, value)
    assert not v["usable"] and v["cause"] == "extrapolation"
    assert "and a time is positive" in v["problem"]
    assert "batch=4096 is 512× the largest measured batch 8" in v["why"]
    assert "leverage" in v["why"] and v["instead"] == "sweep closer: `batch=181,4096`"
    inside = judge_seconds(fit, {"batch": 6}, predict_seconds(fit, {"batch": 6})[0])
    assert inside["usable"]


def test_a_negative_time_from_marked_points_is_noise_even_when_far():
    fit = sweep([1.00, 0.99, 0.98, 0.96], {"T2": (BUSY, 0.01)})
    value = predict_seconds(fit, {"batch": 4096})[0]
    v = judge_seconds(fit, {"batch": 4096}, value)
    assert v["cause"] == "noise" and "T2 contended" in v["why"] and "far from the points" in v[
        "why"]


def test_memory_below_the_smallest_peak_is_impossible_but_noise_inside_is_not():
    rs = [llm_report(f"T{i}", b, memory={"host_rss_peak": m * MiB})
          for i, (b, m) in enumerate(zip((1, 2, 4, 8), (100.0, 99.95, 99.9, 99.8)), 1)]
    fit = fit_sweep(rs)
    model = fit["memory"]["host_rss_peak"]
    assert model["verdict"]["usable"]
    for batch, ok in ((2, True), (8, True), (1024, False)):
        value = scaling.predict_memory(fit, "host_rss_peak", {"batch": batch})[0]
        v = usable.verdict(model, fit["points"], (batch, 80, value), "batch")
        assert v["usable"] is ok, (batch, v)
    assert "below every measured peak (the least 99.8 MiB)" in v["problem"]
    assert "memory does not shrink" in v["problem"]
    assert v["cause"] == "extrapolation"


def test_three_points_that_miss_are_too_few_not_noise():
    fit = sweep([0.10, 0.20, 0.90], batches=(1, 2, 4))
    v = fit["time"]["verdict"]
    assert not v["usable"] and v["cause"] == "too few points"
    assert "refits 2 terms on 2 configs" in v["why"] and v["instead"] == "add points: `batch=3,6`"


def test_quiet_points_off_the_trend_are_the_models_shape():
    fit = sweep([0.01 * b * b for b in (1, 2, 4, 8, 16)], batches=(1, 2, 4, 8, 16))
    v = fit["time"]["verdict"]
    assert not v["usable"] and v["cause"] == "shape"
    assert "no point is marked UNSTABLE or contended" in v["why"]
    assert v["instead"] == "sweep closer: `batch=11,16`"


def test_old_reports_say_contention_was_not_measured():
    fit = sweep([0.10, 0.20, 1.50, 0.42], {f"T{i}": (None, 0.01) for i in (1, 2, 3, 4)})
    v = fit["time"]["verdict"]
    assert v["cause"] == "shape" and "contention not measured" in v["why"]
    assert v["unmeasured"] == ["T1", "T2", "T3", "T4"]
    assert usable.marks_text(v) == "contention not measured for T1, T2, T3, T4"


def test_two_points_are_usable_but_unchecked_and_one_config_is_too_few():
    fit = sweep([0.1, 0.2], batches=(1, 2))
    v = fit["time"]["verdict"]
    assert v["usable"] and not v["checked"]
    assert usable.text(v).startswith("unchecked: 2 configs for 2 terms") and "batch=" in v[
        "instead"]
    v = usable.verdict({"target": "seconds", "error": "1 distinct config measured"}, [])
    assert not v["usable"] and v["cause"] == "too few points"


def test_a_clean_sweep_is_usable_with_no_reason():
    fit = sweep([0.1 + 0.05 * b for b in (1, 2, 4, 8)])
    v = fit["time"]["verdict"]
    assert v["usable"] and v["checked"] and usable.text(v) == "" and not v["marked"]


def test_a_depth_fit_with_a_busy_deepest_point_is_unusable_and_says_so():
    def at(trial, layers, seconds, contention):
        r = timed(trial, 8, seconds, contention, layers=layers, preset="llama-3-8b",
                  hidden=4096, prompt=64, gen=16)
        r["memory"]["host_rss_peak"] = (500 + 200 * layers) * MiB
        return r
    reports = [at("T1", 1, 0.1, QUIET), at("T2", 2, 0.2, QUIET), at("T3", 4, 1.9, BUSY)]
    assert depth.is_depth_sweep(reports)
    fit = depth.fit_depth(reports)
    v = fit["time"]["verdict"]
    assert not v["usable"] and v["cause"] == "noise" and "T3 contended" in v["why"]
    assert fit["memory"]["host_rss_peak"]["verdict"]["usable"]
    jobs = [{"trial": "T1", "status": "done"}, {"trial": "T3", "status": "done"}]
    text = "\n".join(depthview.sweep_parts(1, jobs, fit))
    assert "*Time per request*: :no_entry: *unusable: held-out error" in text
    assert "time per request: " in text and "— *unusable:" in text
    with pytest.raises(ValueError):  # a depth question needs layers=
        judge_seconds(fit, {}, 1.0)


def test_an_unusable_gpu_memory_fit_answers_no_largest_batch():
    from test_scaling import cuda
    GIB = 2**30
    rs = [cuda(llm_report(f"T{i}", b, memory={"process_used_peak": m * GIB}))
          for i, (b, m) in enumerate(zip((1, 2, 4, 8), (10, 12, 30, 14)), 1)]
    fit = fit_sweep(rs)
    v = fit["memory"]["process_used_peak"]["verdict"]
    assert not v["usable"] and v["cause"] == "shape" and not v["marked"]  # memory: no noise marks
    ans = scaling.largest_batch(fit, 80 * 10**9)
    assert not ans["ok"] and ans["reason"].startswith("the process_used_peak fit is unusable:")
