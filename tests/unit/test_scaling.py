"""The scaling fit and the GPU table: pure functions on synthetic trial reports
whose true model is known."""
import json
import math

import pytest

from bot.fits import gpus, ols, scaling
from bot.fits.sweep import fit_sweep, predict_seconds
from worker import arithmetic
from worker import report as reports
from worker.spec import parse

MiB = 2**20


def llm_report(trial, batch, prompt=64, gen=16, memory=None, seconds=None, status="ok",
               error_class=None, **params):
    p = parse(["llm-infer", f"batch={batch}", f"prompt={prompt}", f"gen={gen}",
               *(f"{k}={v}" for k, v in params.items())]).params
    r = reports.new_report("llm-infer", p)
    r.update(trial=trial, worker="w1", status=status, env={"device": "cpu", "gpu_count": 0})
    if status == "failed":
        reports.fail(r, error_class or "crash", "Traceback ...\nRuntimeError: boom", "run")
    r["memory"].update(memory or {})
    if seconds is not None:
        r["latency"] = {"mean": seconds, "p50": seconds, "p90": seconds, "count": 5}
    return r


def cuda(r, name="NVIDIA H200", total=150_000_000_000):
    r["env"] = {"device": "cuda", "gpu_count": 1, "gpu_name": name, "gpu_memory": total}
    return r


def test_exact_recovery_of_a_known_linear_model():
    W, k = 300 * MiB, 40_000                # bytes; bytes per token
    t0, t1, t2 = 0.010, 0.002, 3e-6         # s; s per sequence; s per token
    rs = [llm_report(f"T{i}", b, prompt=p, gen=16,
                     memory={"host_rss_peak": W + k * b * (p + 16)},
                     seconds=t0 + t1 * b + t2 * b * (p + 16))
          for i, (b, p) in enumerate([(b, p) for b in (1, 2, 4) for p in (64, 128, 256)])]
    fit = fit_sweep(rs)
    assert fit["error"] is None and fit["variables"] == {"batch": "batch",
                                                         "length": ["prompt", "gen"]}
    mem = fit["memory"]["host_rss_peak"]
    assert mem["features"] == ["1", "b*s"]   # the default; richer ones are not needed
    assert mem["coef"] == pytest.approx([W, k], rel=1e-9)
    assert mem["held_out"]["relative_error"] == pytest.approx(0, abs=1e-9)
    assert mem["dof"] == 9 - 2 and mem["residual_sd"] == pytest.approx(0, abs=1e-3)
    tm = fit["time"]
    assert tm["features"] == ["1", "b", "b*s"]
    assert tm["coef"] == pytest.approx([t0, t1, t2], rel=1e-9)
    value, se, dof = predict_seconds(fit, {"batch": 16, "prompt": 512, "gen": 16})
    assert value == pytest.approx(t0 + t1 * 16 + t2 * 16 * 528, rel=1e-9) and dof == 6
    value, se, dof = scaling.predict_memory(fit, "host_rss_peak", {"batch": 16, "prompt": 512})
    assert value == pytest.approx(W + k * 16 * 528, rel=1e-9) and dof == 7
    json.dumps(fit, allow_nan=False)       # what the planner and the store keep


def test_quadratic_length_term_only_when_the_data_shows_it():
    def sweep(q):
        return fit_sweep([
            llm_report(f"T{i}", b, prompt=p, gen=16,
                       memory={"host_rss_peak": 200 * MiB + 30_000 * b * (p + 16)
                               + q * b * (p + 16) ** 2})
            for i, (b, p) in enumerate([(b, p) for b in (1, 2, 4) for p in (128, 512, 2048)])])
    assert sweep(0)["memory"]["host_rss_peak"]["features"] == ["1", "b*s"]
    fit = sweep(50)                        # attention scores that grow with s²
    model = fit["memory"]["host_rss_peak"]
    assert model["features"] == ["1", "b*s", "b*s^2"] and "leave-one-out" in model["why"]
    assert model["coef"][2] == pytest.approx(50, rel=1e-6)


def test_held_out_error_is_the_largest_config_predicted_from_the_others():
    rs = [llm_report("T1", 1, memory={"host_rss_peak": 100 * MiB}, seconds=1.0),
          llm_report("T2", 2, memory={"host_rss_peak": 110 * MiB}, seconds=2.0),
          llm_report("T3", 4, memory={"host_rss_peak": 140 * MiB}, seconds=4.0)]
    mem = fit_sweep(rs)["memory"]["host_rss_peak"]
    held = mem["held_out"]
    assert held["trial"] == "T3" and held["b"] == 4
    assert held["predicted"] == pytest.approx(130 * MiB)   # the line through T1 and T2
    assert held["relative_error"] == pytest.approx(130 / 140 - 1)
    assert mem["dof"] == 1 and mem["loo"]["count"] == 3


def test_two_points_are_a_line_with_no_check_and_one_point_is_refused():
    two = fit_sweep([llm_report("T1", 1, memory={"host_rss_peak": 100 * MiB}),
                             llm_report("T2", 2, memory={"host_rss_peak": 110 * MiB})])
    mem = two["memory"]["host_rss_peak"]
    assert mem["dof"] == 0 and mem["residual_sd"] is None and mem["held_out"] is None
    assert "needs 3 distinct configs" in mem["held_out_why"]
    value, se, dof = scaling.predict_memory(two, "host_rss_peak", {"batch": 4})
    assert value == pytest.approx(130 * MiB) and math.isnan(se) and dof == 0
    assert ols.interval(value, se, dof) is None
    one = fit_sweep([llm_report("T1", 1, memory={"host_rss_peak": 100 * MiB}),
                             llm_report("T2", 2, status="failed", error_class="crash")])
    assert "at least 2 configs" in one["error"]
    with pytest.raises(ValueError, match="at least 2 configs"):
        scaling.predict_memory(one, "host_rss_peak", {"batch": 4})


def test_host_rss_never_answers_what_fits_a_gpu():
    fit = fit_sweep([llm_report(f"T{b}", b, memory={"host_rss_peak": (300 + 20 * b) * MiB})
                             for b in (1, 2, 4)])
    ans = scaling.largest_batch(fit, gpus.lookup("H100").bytes)
    assert not ans["ok"] and ans["batch"] is None
    assert "host RSS" in ans["reason"] and "CUDA worker" in ans["reason"]
    assert not scaling.largest_batch(fit, 10**11, method="host_rss_peak")["ok"]
    assert scaling.gpu_method(fit) is None


def test_largest_batch_and_margin_from_nvml_and_the_allocator_caveat():
    rs = [cuda(llm_report(f"T{b}", b, memory={"process_used_peak": 10**9 + 2 * 10**8 * b,
                                              "peak_reserved": 5 * 10**8 + 2 * 10**8 * b,
                                              "host_rss_peak": 900 * MiB}))
          for b in (1, 2, 4)]
    fit = fit_sweep(rs)
    assert set(fit["memory"]) == {"process_used_peak", "peak_reserved", "host_rss_peak"}
    assert fit["measured_gpu"] == {"name": "NVIDIA H200", "memory": 150_000_000_000}
    ans = scaling.largest_batch(fit, int(10.1e9))
    assert ans["ok"] and ans["method"] == "process_used_peak" and ans["caveat"] is None
    assert ans["batch"] == 45                          # 1e9 + 2e8·45 = 10.0e9 ≤ 10.1e9 < 10.2e9
    assert ans["margin_bytes"] == pytest.approx(0.1e9, rel=1e-6)
    assert ans["margin_fraction"] == pytest.approx(0.1 / 10.1, rel=1e-6)
    assert ans["batch_upper"] == 45 and ans["extrapolation"] == pytest.approx(45 / 4)
    reserved = scaling.largest_batch(fit, int(10.15e9), method="peak_reserved")
    assert reserved["batch"] == 48 and "CUDA context" in reserved["caveat"]
    tiny = scaling.largest_batch(fit, 10**9)
    assert not tiny["ok"] and "even batch 1" in tiny["reason"]


def test_noisy_points_make_the_conservative_batch_smaller():
    noise = {1: 3e7, 2: -4e7, 4: 3e7, 8: -1e7}
    fit = fit_sweep([cuda(llm_report(f"T{b}", b, memory={
        "peak_allocated": 10**9 + 2 * 10**8 * b + noise[b]})) for b in noise])
    ans = scaling.largest_batch(fit, 20 * 10**9, method="peak_allocated")
    assert ans["ok"] and ans["batch_upper"] < ans["batch"]
    assert "allocator's cache" in ans["caveat"]


def test_methods_are_fitted_apart_never_mixed():
    rs = [cuda(llm_report("T1", 1, memory={"peak_allocated": 1000, "host_rss_peak": 5000})),
          cuda(llm_report("T2", 2, memory={"peak_allocated": 1100, "host_rss_peak": 7000})),
          cuda(llm_report("T3", 4, memory={"peak_allocated": 1300}))]  # RSS not measured
    fit = fit_sweep(rs)
    assert fit["memory"]["peak_allocated"]["coef"] == pytest.approx([900, 100])
    rss = fit["memory"]["host_rss_peak"]
    assert rss["coef"] == pytest.approx([3000, 2000]) and rss["n"] == 2 and rss["missing"] == 1


def test_failed_trials_are_excluded_and_the_oom_boundary_is_said():
    rs = [llm_report(f"T{i}", b, memory={"host_rss_peak": (300 + 20 * b) * MiB}, seconds=0.1 * b)
          for i, b in ((1, 1), (2, 2), (3, 4))]
    rs.append(llm_report("T4", 8, status="failed", error_class="oom"))
    retried = llm_report("T5", 8, memory={"host_rss_peak": 460 * MiB}, seconds=0.8)
    retried["requested"] = dict(retried["params"], batch=16)
    retried["attempts"] = [{"attempt": 1, "status": "failed", "error_class": "oom",
                            "changed": {}}, {"attempt": 2, "status": "ok", "error_class": None,
                                             "changed": {"batch": 8}}]
    fit = fit_sweep(rs + [retried])
    assert [p["trial"] for p in fit["points"]] == ["T1", "T2", "T3", "T5"]
    assert fit["points"][-1]["retried"]
    assert fit["failed"] == [{"trial": "T4", "params": {"batch": 8, "prompt": 64, "gen": 16},
                              "error_class": "oom", "message": "RuntimeError: boom"}]
    assert fit["oom"] == {"largest_ok_batch": 8, "smallest_oom_batch": 8,
                          "oom_batches": [8, 16]}


def test_a_question_outside_what_the_sweep_measured_is_refused():
    fit = fit_sweep([llm_report(f"T{b}", b, memory={"host_rss_peak": (300 + 20 * b) * MiB})
                             for b in (1, 2, 4)])
    with pytest.raises(ValueError, match="hidden=256"):
        scaling.predict_memory(fit, "host_rss_peak", {"batch": 8, "hidden": 512})
    with pytest.raises(ValueError, match="length 80 only"):   # prompt+gen = 64+16
        scaling.predict_memory(fit, "host_rss_peak", {"batch": 8, "prompt": 1024})
    with pytest.raises(ValueError, match="no peak_allocated fit"):
        scaling.predict_memory(fit, "peak_allocated", {"batch": 8})
    assert scaling.predict_memory(fit, "host_rss_peak", {"batch": 8, "repeats": 50})[0] > 0
    varied = fit_sweep([llm_report(f"T{b}", 1, prompt=b, memory={"host_rss_peak": b})
                                for b in (64, 128, 256)])
    with pytest.raises(ValueError, match="give prompt=N"):
        scaling.predict_memory(varied, "host_rss_peak", {})


def test_recipe_sweep_uses_batch_and_the_swept_length_and_run_phase_time():
    def recipe(trial, batch, seq):
        r = reports.new_report("recipe", {"batch": batch, "seq": seq, "batches": 3,
                                          "dtype": "fp32", "timeout": 600})
        r.update(trial=trial, status="ok", recipe="paper-infer", env={"device": "cpu"})
        r["memory"]["host_rss_peak"] = 100 * MiB + 1000 * batch * seq
        r["phases"] = [{"name": "launch", "seconds": 1.0}, {"name": "run", "seconds": 0.5 * batch}]
        return r
    fit = fit_sweep([recipe("T1", 1, 256), recipe("T2", 2, 256), recipe("T3", 4, 256)])
    assert fit["variables"] == {"batch": "batch", "length": ["seq"]}
    assert fit["recipe"] == "paper-infer"
    assert fit["memory"]["host_rss_peak"]["coef"] == pytest.approx([100 * MiB, 256_000])
    assert fit["time"]["coef"] == pytest.approx([0, 0.5], abs=1e-12)
    assert "run phase" in fit["time"]["what"]
    # With run units timed by the probe's hooks, the time is their mean latency.
    hooked = [recipe(f"T{b}", b, 256) for b in (1, 2, 4)]
    for r in hooked:
        r["latency"] = {"mean": 0.1 * r["params"]["batch"], "count": 4}
        r["units"] = {"unit": "generate call", "run": 4}
    fit = fit_sweep(hooked)
    assert fit["time"]["coef"] == pytest.approx([0, 0.1], abs=1e-12)
    assert "per generate call" in fit["time"]["what"]


def test_architecture_arithmetic_matches_the_decoder():
    from worker.workloads.decoder import Decoder
    p = parse(["llm-infer", "layers=3", "hidden=96", "heads=6", "kv_heads=2", "vocab=300",
               "batch=3", "prompt=40", "gen=10"]).params
    model = Decoder(p["vocab"], p["hidden"], p["layers"], p["heads"], p["kv_heads"],
                    4 * p["hidden"])
    assert arithmetic.weight_params(p)["total"] == sum(t.numel() for t in model.parameters())
    assert arithmetic.weight_bytes(p) == 4 * arithmetic.weight_params(p)["total"]
    cache = model.new_cache(3, 50)
    assert arithmetic.kv_cache_bytes(p) == sum(t.numel() * t.element_size()
                                            for pair in cache for t in pair)
    assert arithmetic.kv_bytes_per_token(dict(p, dtype="bf16")) == 2 * 3 * 2 * 16 * 2


def test_gpu_lookup_names_aliases_ambiguity_and_sizes():
    assert gpus.lookup("H100").name == "H100-80GB" == gpus.lookup("nvidia h100-sxm").name
    assert gpus.lookup("h200").bytes == 141 * 10**9
    assert gpus.lookup("A100 80GB").name == "A100-80GB"
    assert gpus.lookup("Tesla T4").datasheet_gb == 16
    with pytest.raises(ValueError) as err:
        gpus.lookup("A100")
    assert "ambiguous" in str(err.value) and "A100-40GB" in str(err.value) \
        and "A100-80GB" in str(err.value)
    with pytest.raises(ValueError, match="V100-16GB"):
        gpus.lookup("v100")
    with pytest.raises(ValueError) as err:
        gpus.lookup("Z9000")
    assert "H100-80GB" in str(err.value) and "L40S" in str(err.value)
    assert gpus.lookup("80GiB").bytes == 80 * 2**30
    assert gpus.lookup("81559MiB").bytes == 81559 * 2**20
    for g in gpus.TABLE.values():                       # facts with their sources, no prices
        assert g.source and g.bytes == int(g.datasheet_gb * 10**9)
        assert "$" not in g.describe() and "price" not in g.describe().lower()


def batch_sweep(truth, batches=(1, 2, 4), noise=None):
    """A CPU batch sweep whose host RSS and time follow `truth(b)` (MiB, and ms)."""
    noise = noise or {}
    return fit_sweep([llm_report(f"T{i}", b, memory={
        "host_rss_peak": int(truth(b) * (1 + noise.get(b, 0)) * MiB)},
        seconds=truth(b) * (1 + noise.get(b, 0)) / 1000) for i, b in enumerate(batches, 1)])


def test_a_curved_truth_fitted_by_a_line_gets_the_forms_error_in_its_interval():
    def curved(b):  # memory that grows a little faster than the batch
        return 300 + 10 * b + 0.2 * b * b
    fit = batch_sweep(curved, noise={1: 1e-4, 2: -1e-4, 4: 1e-4})
    model = fit["memory"]["host_rss_peak"]
    assert model["features"] == ["1", "b"] and model["form"]["points"] == 3
    truth = curved(16) * MiB
    value, se, dof = scaling.predict_memory(fit, "host_rss_peak", {"batch": 16})
    low, high = ols.interval(value, se, dof)
    assert not low <= truth <= high  # the residuals' spread alone misses it: 7% off
    band = scaling.band(fit, "host_rss_peak", {"batch": 16})
    assert band.low <= truth <= band.high and band.form > band.noise
    assert band.half < 0.15 * value  # wide enough to hold it, not everything
    # the time's the same truth in ms: held too
    t = scaling.band(fit, "time", {"batch": 16})
    assert t.low <= curved(16) / 1000 <= t.high


def test_a_straight_truth_keeps_a_narrow_interval():
    fit = batch_sweep(lambda b: 300 + 10 * b, noise={1: 1e-4, 2: -1e-4, 4: 1e-4})
    band = scaling.band(fit, "host_rss_peak", {"batch": 16})
    assert band.low <= 460 * MiB <= band.high
    # 0.01% noise reads as a slight curve (3 points cannot tell them apart): still narrow,
    # a fifth of what the curve above gets
    assert band.half < 0.015 * band.value
    curved = batch_sweep(lambda b: 300 + 10 * b + 0.2 * b * b,
                         noise={1: 1e-4, 2: -1e-4, 4: 1e-4})
    assert band.half < scaling.band(curved, "host_rss_peak", {"batch": 16}).half / 5
    exact = scaling.band(batch_sweep(lambda b: 300 + 10 * b), "host_rss_peak", {"batch": 16})
    assert exact.form == pytest.approx(0, abs=1e-3 * MiB)


def test_too_few_points_to_leave_one_out_give_no_interval_and_say_why():
    # two batches, each measured twice: residual dof 2, but no config to predict from others
    rs = [llm_report(f"T{i}", b, memory={"host_rss_peak": int((300 + 10 * b + i % 2) * MiB)})
          for i, b in enumerate((1, 1, 4, 4), 1)]
    fit = fit_sweep(rs)
    assert fit["memory"]["host_rss_peak"]["dof"] == 2
    band = scaling.band(fit, "host_rss_peak", {"batch": 16})
    assert band.half is None and band.low is None
    assert "leave-one-out needs 3" in band.why and "2 configs for a 2-term form" in band.why


def test_the_card_says_the_interval_holds_the_forms_error_and_its_points():
    from bot.fits import batchview
    fit = batch_sweep(lambda b: 300 + 10 * b + 0.2 * b * b, noise={1: 1e-4, 2: -1e-4, 4: 1e-4})
    jobs = [{"trial": f"T{i}", "status": "done", "channel": "C"} for i in (1, 2, 3)]
    text = "\n".join(batchview.fit_parts(1, jobs, fit))
    assert "(90% PI, dof 1: the points' spread ± " in text
    assert "the form's leave-one-out error ± " in text and "over 3 points, in quadrature)" in text
    assert "from leave-one-out (each config predicted from the others" in text
    two = fit_sweep([llm_report(f"T{b}", b, memory={"host_rss_peak": (300 + b) * MiB})
                     for b in (1, 2)])
    assert "(no interval: 2 points, 2 terms: dof 0)" in "\n".join(
        batchview.fit_parts(1, jobs[:2], two))
