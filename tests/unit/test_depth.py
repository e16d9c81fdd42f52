"""Partial-depth trials (issue 9): the one-trial prediction, the depth sweep's
fit, the fits-on list, the decode model estimate, and their paths through
/trial, /trial fit and /plan."""
import dataclasses
import datetime as dt
import json
import math

import pytest

from bot import commands
from bot.app.runtime import context
from bot.fits import depth, gpus
from bot.store import Store
from bot.trials import command as trial_command
from bot.trials import views
from worker import arithmetic, catalog, launcher, stats
from worker import report as reports
from worker import spec as specs
from worker.launcher import passes

LLAMA = ["llm-infer", "preset=llama-3-8b", "batch=8", "prompt=4096", "gen=256", "dtype=bf16"]
GIB = 2**30


def params(*words):
    given = {w.split("=")[0] for w in words}
    return specs.parse([w for w in LLAMA if w.split("=")[0] not in given] + list(words)).params


def gpu_report(layers=2, allocated=None, rest=3 * GIB, trial="T1", **extra):
    """A CUDA trial's report whose peak allocated is the arithmetic plus `rest`."""
    p = params(f"layers={layers}", *[f"{k}={v}" for k, v in extra.items()])
    r = reports.new_report("llm-infer", p)
    a = depth.arithmetic_at(p)
    peak = allocated if allocated is not None else a["weights"] + a["kv"] + rest
    r.update(status="ok", trial=trial, env={"device": "cuda", "gpu_count": 1,
                                            "gpu_name": "NVIDIA H200", "gpu_memory": 141 * 10**9,
                                            "torch": "2.13.0", "cpu": "x", "host": "h"},
             latency={**stats.summary([0.5 * layers + 1.0] * 5), "unit": "s"},
             decode_per_token={**stats.summary([0.01 * layers + 0.002] * 5), "unit": "s"})
    run = 5 * (0.5 * layers + 1.0)
    r["phases"] = [{"name": n, "seconds": x} for n, x in
                   (("setup", 1.0), ("weights", 2.0), ("data", 0.5), ("warmup", 1.0), ("run", run))]
    r["seconds"] = 4.5 + run
    r["memory"].update(peak_allocated=peak, peak_reserved=peak + GIB)
    return r


def test_one_trial_predicts_the_full_depth_from_the_arithmetic_per_layer():
    r = gpu_report(layers=2)
    pred = depth.from_trial(r)
    per = depth.layer_bytes(r["params"])
    full = depth.full_params(r["params"])
    a = depth.arithmetic_at(full)
    # What the KV arithmetic must be: 2·layers·kv_heads·head_dim·tokens·batch·bytes.
    assert per["kv"] == 2 * 1 * 8 * 128 * (4096 + 256) * 8 * 2
    assert pred["layers"] == 32 and pred["trial_layers"] == 2
    got = pred["memory"]["peak_allocated"]["predicted"]
    assert got == r["memory"]["peak_allocated"] + 30 * per["total"]
    assert got == pytest.approx(a["weights"] + a["kv"] + 3 * GIB, abs=4)
    assert "not checked by a depth sweep" in pred["what"]
    fits = pred["fits"]
    assert fits["method"] == "peak_reserved" and fits["batch"] == 8
    by = {g["gpu"]: g for g in fits["gpus"]}
    assert not by["L4"]["fits"] and 1 <= by["L4"]["largest_batch"] < 8   # a smaller batch does
    assert not by["T4"]["fits"] and by["T4"]["largest_batch"] == 0       # 16 GB of weights
    assert by["H100-80GB"]["fits"] and by["H100-80GB"]["margin"] > 0


def test_the_largest_batch_is_the_last_that_fits_under_the_stated_bound():
    weights, kv, rest, b0 = 16e9, 0.5e9, 2e9, 8

    def peak(b):
        return weights + b * kv + rest * max(1, b / b0)
    for capacity in (17e9, 19e9, 21e9, 30e9, 80e9, 141e9):
        b = depth.largest_batch(int(capacity), weights, kv, rest, b0)
        if b:
            assert peak(b) <= capacity < peak(b + 1)
        else:
            assert peak(1) > capacity


def test_a_cpu_trial_answers_fits_from_the_arithmetic_and_says_it_is_a_lower_bound():
    r = gpu_report(layers=1)
    r["memory"].update(peak_allocated=None, peak_reserved=None, host_rss_peak=5 * GIB,
                       host_rss_peak_kernel=5 * GIB + 2**20)
    pred = depth.from_trial(r)
    assert set(pred["memory"]) == {"host_rss_peak", "host_rss_peak_kernel"}
    assert pred["fits"]["method"] is None and "lower bound" in pred["fits"]["basis"]
    assert pred["fits"]["rest"] == 0
    # A child that ran alone reports the kernel's figure as its peak: one line, not two.
    r["memory"]["host_rss_peak"] = r["memory"]["host_rss_peak_kernel"]
    assert set(depth.from_trial(r)["memory"]) == {"host_rss_peak"}


def test_no_prediction_without_a_preset_or_for_a_failed_trial():
    plain = reports.new_report("llm-infer", specs.parse(["llm-infer"]).params)
    plain["status"] = "ok"
    assert depth.from_trial(plain) is None
    failed = gpu_report()
    failed["status"] = "failed"
    assert depth.from_trial(failed) is None
    assert depth.from_trial(None) is None


def test_the_decode_estimate_is_bytes_over_bandwidth_and_labelled_a_model():
    p = depth.full_params(params("layers=2"))
    d = depth.decode_estimate(p)
    w = arithmetic.weight_params(p)
    expect = ((w["total"] - w["embedding"] + 8 * 4096) * 2
              + arithmetic.kv_bytes_per_token(p) * (4096 + 128) * 8)
    assert d["bytes_per_step"] == pytest.approx(expect)
    by = {g["gpu"]: g for g in d["gpus"]}
    assert by["H200"]["seconds"] == [pytest.approx(expect / 4.8e12)]
    assert by["H100-80GB"]["bandwidth_gbs"] == [3350, 2000]
    assert len(by["H100-80GB"]["seconds"]) == 2           # SXM5 and PCIe differ
    assert "A10G" in d["no_bandwidth"] and "A10G" not in by
    assert "model estimate, not measured" in d["what"]
    text = views.report_blocks(dict(gpu_report(), status="ok"))
    body = json.dumps(text)
    assert "model estimate, not measured" in body and "Fits on" in body
    assert "llama-3-8b at full depth (32 layers; this trial ran 2)" in body


def test_the_datasheet_bandwidths_are_the_printed_figures():
    got = {g.name: g.bandwidth_gbs for g in gpus.TABLE.values()}
    assert got == {"H100-80GB": (2000, 3350), "H100-NVL": (3900,), "H200": (4800,),
                   "A100-40GB": (1555,), "A100-80GB": (1935, 2039), "L40S": (864,),
                   "L4": (300,), "A10": (600,), "A10G": (), "RTX-4090": (),
                   "V100-16GB": (900,), "V100-32GB": (900,), "T4": (320,), "B200": (8000,),
                   "MI300X": (5300,), "MI250X": (3200,)}
    assert all(g.source for g in gpus.TABLE.values())


# --- the depth sweep -------------------------------------------------------------

def test_a_depth_fit_recovers_fixed_and_per_layer_parts_and_checks_the_deepest():
    rs = [gpu_report(layers=n, trial=f"T{n}") for n in (1, 2, 4)]
    fit = depth.fit_depth(rs)
    assert fit["error"] is None and fit["preset"] == "llama-3-8b"
    model = fit["memory"]["peak_allocated"]
    per = depth.layer_bytes(rs[0]["params"])["total"]
    assert depth.slope(model) == pytest.approx(per, rel=1e-9)
    assert model["held_out"]["trial"] == "T4"
    assert abs(model["held_out"]["relative_error"]) < 1e-9
    assert depth.slope(fit["time"]) == pytest.approx(0.5)
    pred = depth.from_sweep(fit)
    assert pred["layers"] == 32
    assert pred["memory"]["peak_allocated"]["value"] == pytest.approx(
        depth.from_trial(rs[1])["memory"]["peak_allocated"]["predicted"], rel=1e-9)
    assert pred["time"]["value"] == pytest.approx(17.0)
    with pytest.raises(ValueError, match="32 layers"):
        depth.from_sweep(fit, 40)


def test_a_depth_fit_refuses_trials_that_differ_in_more_than_layers():
    rs = [gpu_report(layers=1), gpu_report(layers=2, batch=4)]
    fit = depth.fit_depth(rs)
    assert "batch" in fit["error"] and "layers alone" in fit["error"]


def test_a_depth_sweep_is_parsed_with_auto_host_memory_and_alone():
    cmd = trial_command.parse_trial("sweep llm-infer preset=llama-3-8b layers=1,2,4 batch=2")
    assert [s.params["layers"] for s in cmd.specs] == [1, 2, 4]
    # auto: on a CPU the worker splits each into a live memory and a glibc time pass
    assert {s.params["malloc"] for s in cmd.specs} == {"auto"}
    assert all(passes.split(s) for s in trial_command.parse_trial(
        "sweep llm-infer preset=llama-3-8b layers=1,2 device=cpu").specs)
    for malloc in ("glibc", "live"):
        kept = trial_command.parse_trial(f"sweep llm-infer layers=1,2 malloc={malloc}")
        assert {s.params["malloc"] for s in kept.specs} == {malloc}
    with pytest.raises(specs.SpecError, match="varies layers alone"):
        trial_command.parse_trial("sweep llm-infer layers=1,2 batch=1,2")
    with pytest.raises(specs.SpecError, match="llama-3-8b has 32 layers"):
        trial_command.parse_trial("sweep llm-infer preset=llama-3-8b layers=1,64")


def test_malloc_auto_stays_auto_for_a_partial_preset_and_splits_on_a_cpu():
    assert params("layers=2")["malloc"] == "auto"
    # The worker splits it into passes (tests/test_passes.py): host RSS from a
    # live memory pass, time from a glibc pass that pays no page faults.
    assert passes.split(specs.parse([*LLAMA, "layers=2", "device=cpu"]))
    assert specs.parse(["llm-infer"]).params["malloc"] == "auto"
    assert params("malloc=glibc")["malloc"] == "glibc"
    assert params("malloc=live")["malloc"] == "live"


# --- through the bot -------------------------------------------------------------

@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "d.db")), admins=frozenset({"U1"}))


def run_depth_sweep(ctx, text="sweep llm-infer preset=llama-3-8b layers=1,2,4 batch=8 "
                                "prompt=4096 gen=256 dtype=bf16"):
    commands.trial(ctx, text, "U1", "C1")
    for _ in range(3):
        job = ctx.queue.lease("w1", 0)
        n = job["spec"]["params"]["layers"]
        r = gpu_report(layers=n, trial=job["trial"])
        r["params"] = job["spec"]["params"]
        ctx.queue.finish(job["id"], "w1", job["lease"], r)


def test_a_depth_sweep_posts_its_fit_and_answers_layers_and_a_gpu(ctx):
    run_depth_sweep(ctx)
    (msg,) = [m for m in ctx.store.unsent(100) if m["kind"] == "sweep"]
    assert "*Depth sweep S1*" in msg["text"] and "3 ok, 0 failed" in msg["text"]
    assert "held out T3 at 4 layers: predicted 7.11 GiB, measured 7.11 GiB" in msg["text"]
    assert "Predicted at 32 layers" in msg["text"] and "model estimate, not measured" in msg["text"]
    assert len(msg["blocks"]) <= 50 and all(len(json.dumps(b)) < 3200 for b in msg["blocks"])
    answer = commands.trial(ctx, "fit S1 layers=16 gpu=H100", "U1", "C1")[0]["text"]
    assert "Predicted at 16 layers" in answer and "H100-80GB" in answer
    assert "L4" not in answer.split("Fits on")[1].split("Decode")[0]
    exact = commands.trial(ctx, "fit S1 layers=32 gpu=79.6GiB", "U1", "C1")[0]["text"]
    assert "79.6GiB GPU" in exact and "largest batch" in exact
    bad = commands.trial(ctx, "fit S1 batch=32", "U1", "C1")[0]["text"]
    assert bad.startswith(":x: `batch=32`") and "depth sweep" in bad
    deep = commands.trial(ctx, "fit S1 layers=33", "U1", "C1")[0]["text"]
    assert "32 layers" in deep


def test_plan_blocks_from_partial_depth_are_marked_until_a_full_depth_trial(ctx):
    run_depth_sweep(ctx)
    def say(text):
        return commands.plan(ctx, text, "U1", "C1", dt.date(2026, 12, 1))["text"]
    say("new repro gpu=H200")  # the sweep's own GPU: its times are target times
    out = say("repro block scale runs=100 sweep=S1 layers=32")
    assert "PREDICTED FROM A PARTIAL-DEPTH TRIAL" in out and "layers 1, 2, 4" in out
    assert "100 runs × 17 s" in out
    out = say("repro block baseline runs=10 trial=T2")
    assert "PREDICTED FROM A PARTIAL-DEPTH TRIAL (T2: 2 of 32 layers" in out
    k = depth.time_factor(ctx.store.job(2)["report"]["params"])["factor"]
    assert 5 < k < 10 and f"scaled ×{k:.3g}" in out
    assert "no interval: a model-scaled time" in out
    assert "(partial depth)" in say("repro show")
    before = ctx.store.db["outbox"].count
    say("repro export")
    csv_text, md, _ = [r["content"] for r in list(ctx.store.db["outbox"].rows)[before:]
                       if r["kind"] == "export"]
    assert "predicted from a partial-depth trial (T2: 2 of 32 layers" in csv_text
    assert "| baseline (partial depth) |" in md and "- predicted from a partial-depth" in md
    # A full-depth trial replaces the prediction.
    job = ctx.queue.submit(specs.parse([*LLAMA, "layers=32"]), "llm-infer", "U1", "C1")
    leased = ctx.store.lease_next("w1", 60)
    ctx.queue.finish(job["id"], "w1", leased["lease"], gpu_report(layers=32, trial=job["trial"]))
    out = say(f"repro block baseline runs=10 trial={job['trial']}")
    assert "PARTIAL-DEPTH" not in out and "replaced" in out
    assert math.isfinite(float(out.split("— ")[1].split(" GPU-h")[0].replace(",", "")))
    assert "has 32 layers" in say("repro block scale runs=1 sweep=S1 layers=64")


# --- what the review found --------------------------------------------------------

def test_a_plan_block_from_a_recipe_sweep_still_estimates(ctx):
    from test_sweep import RECIPE
    specs_ = [specs.parse(["recipe", "paper-infer", f"batch={b}"], {"paper-infer": RECIPE})
              for b in (1, 2, 4)]
    jobs = ctx.queue.submit_sweep(specs_, ["recipe paper-infer"] * 3, "U1", "C1")
    for job, s in zip(jobs, specs_):
        leased = ctx.store.lease_next("w1", 60)
        b = s.params["batch"]
        r = reports.new_report("recipe", s.params)
        r.update(trial=job["trial"], status="ok", recipe="paper-infer", env={"device": "cpu"},
                 seconds=1 + 0.5 * b + 0.01 * (b == 2),
                 phases=[{"name": "launch", "seconds": 1.0},
                         {"name": "run", "seconds": 0.5 * b + 0.01 * (b == 2)}])
        r["memory"]["host_rss_peak"] = 2**27 + 2**18 * b
        ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    commands.plan(ctx, "new repro gpu=H100", "U1", "C1", dt.date(2026, 12, 1))
    out = commands.plan(ctx, "repro block scale runs=10 sweep=S1 batch=16", "U1", "C1",
                       dt.date(2026, 12, 1))["text"]
    assert "scale block added" in out and "PARTIAL-DEPTH" not in out


def test_layers_lists_are_a_depth_sweep_of_llm_infer_only():
    from test_sweep import RECIPE
    deep = dataclasses.replace(RECIPE, params=(*RECIPE.params,
                                               catalog._int("layers", 2, 1, 64, "depth")))
    cmd = trial_command.parse_trial("sweep recipe paper-infer layers=1,2,4", {"paper-infer": deep})
    assert all("malloc" not in s.params for s in cmd.specs)   # a recipe's own parameter
    with pytest.raises(specs.SpecError, match="llm-infer and hf-infer run"):
        trial_command.parse_trial("sweep llm-train layers=1,2")
    auto = trial_command.parse_trial("sweep llm-infer layers=1,2 malloc=auto")
    assert {s.params["malloc"] for s in auto.specs} == {"auto"}


def test_a_cuda_trial_extrapolates_gpu_memory_only():
    r = gpu_report(layers=2)
    r["memory"].update(host_rss_peak=3 * GIB)
    pred = depth.from_trial(r)
    assert pred["memory"]["host_rss_peak"]["predicted"] is None
    assert pred["memory"]["peak_allocated"]["predicted"] > r["memory"]["peak_allocated"]
    assert "not extrapolated" in views.report(
        {"channel": "C1", "trial": "T1", "started_msg": None}, r)["text"]


def test_a_depth_sweep_with_one_ok_depth_is_still_a_depth_sweep(ctx):
    commands.trial(ctx, "sweep llm-infer preset=llama-3-8b layers=1,2 batch=8 prompt=4096 "
                         "gen=256 dtype=bf16", "U1", "C1")
    job = ctx.queue.lease("w1", 0)
    r = gpu_report(layers=1, trial=job["trial"])
    r["params"] = job["spec"]["params"]
    ctx.queue.finish(job["id"], "w1", job["lease"], r)
    job = ctx.queue.lease("w1", 0)
    failed = reports.fail(reports.new_report("llm-infer", job["spec"]["params"]), "oom",
                          "CUDA out of memory", "weights")
    ctx.queue.finish(job["id"], "w1", job["lease"], failed)
    (msg,) = [m for m in ctx.store.unsent(100) if m["kind"] == "sweep"]
    assert "*Depth sweep S1*" in msg["text"] and "T2 (layers=2): oom" in msg["text"]
    assert "1 distinct depth succeeded" in msg["text"]


def test_a_depth_sweep_block_names_its_depth(ctx):
    run_depth_sweep(ctx)
    commands.plan(ctx, "new repro gpu=H100", "U1", "C1", dt.date(2026, 12, 1))
    out = commands.plan(ctx, "repro block verify runs=10 sweep=S1 gen=256", "U1", "C1",
                       dt.date(2026, 12, 1))["text"]
    assert "is a depth sweep: give the depth" in out and "layers=32" in out
    assert ctx.store.blocks("repro") == []


def test_a_partial_depth_trial_is_not_peak_memory_measured_for_advice(ctx):
    from bot.plans import advice
    r = gpu_report(layers=2)
    plan = {"facts": {"gpu": "H200", "pattern": "steady"}, "locked": {"at": "x"}}
    fx = advice.facts_of(plan, [r], [], 10.0, 0.1)
    assert not fx["peak_on_target"] and fx["partial"] == ["T1"]
    full = gpu_report(layers=32, trial="T2")
    assert advice.facts_of(plan, [r, full], [], 10.0, 0.1)["peak_on_target"]


def test_reports_from_before_malloc_compare_as_glibc():
    from bot.plans import estimate
    old = gpu_report(layers=2)
    old["params"] = {k: v for k, v in old["params"].items() if k != "malloc"}
    new = gpu_report(layers=2, malloc="glibc")
    assert estimate.differences(estimate.config(old), estimate.config(new)) == []
    assert estimate.differences(estimate.config(old), estimate.config(gpu_report(layers=2))) \
        == []  # a partial-depth auto trial is timed under glibc too
    assert estimate.differences(estimate.config(old),
                                estimate.config(gpu_report(layers=2, malloc="live"))) \
        == ["malloc glibc → live"]


def test_the_live_child_gets_the_pinned_threshold_and_glibc_does_not():
    live = specs.parse(["llm-infer", "malloc=live"])
    glibc = specs.parse(["llm-infer", "malloc=glibc"])
    assert launcher.builtin_env(live)["MALLOC_MMAP_THRESHOLD_"] == "65536"
    assert "MALLOC_MMAP_THRESHOLD_" not in launcher.builtin_env(glibc)


def test_the_decode_bytes_read_one_embedding_row_per_sequence_not_the_table():
    p = depth.full_params(params("layers=2"))
    w = arithmetic.weight_params(p)
    assert depth.decode_bytes({**p, "gen": 0, "prompt": 0}) == \
        (w["total"] - w["embedding"] + 8 * 4096) * 2


def test_a_depth_sweeps_fits_rest_on_the_intervals_upper_end():
    rs = [gpu_report(layers=n, trial=f"T{n}", rest=3 * GIB + n * n * 2**20) for n in (1, 2, 4)]
    pred = depth.from_sweep(depth.fit_depth(rs))
    upper = pred["memory"]["peak_reserved"]["interval"][1]
    assert pred["fits"]["peak"] == upper > pred["memory"]["peak_reserved"]["value"]
    assert "upper end of the fit's 90% prediction interval" in pred["fits"]["basis"]


def test_a_depth_fit_timed_under_live_on_a_cpu_says_so_and_how_to_rerun():
    from bot.fits import depthview
    rs = []
    for i, layers in enumerate((1, 2, 4)):
        r = gpu_report(layers=layers, trial=f"T{i + 1}", malloc="live")
        r["env"].update(device="cpu", gpu_count=0, gpu_name=None)
        r["latency"] = {"mean": 0.5 * layers, "p50": 0.5 * layers, "count": 3}
        rs.append(r)
    fit = depth.fit_depth(rs)
    assert fit["allocators"]["time"] == ["malloc=live"]
    (note,) = [n for n in fit["notes"] if "page faults" in n]
    assert note.startswith("T1, T2, T3 timed on the CPU under malloc=live")
    assert "re-run the sweep with malloc=auto" in note
    text = "\n".join(depthview.sweep_parts(1, [{"trial": r["trial"], "status": "done"}
                                               for r in rs], fit))
    assert "Host RSS measured under malloc=live; time under malloc=live" in text
    assert f":warning: {note}" in text
    on_gpu = depth.fit_depth([gpu_report(layers=n, trial=f"T{n}", malloc="live")
                              for n in (1, 2)])
    assert not any("page faults" in n for n in on_gpu["notes"])
