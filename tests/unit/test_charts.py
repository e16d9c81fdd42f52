"""The charts, drawn for real (matplotlib, Agg) and read back from the figure:
label boxes from the renderer, the peak's annotation, the units on the axes,
where the points and the prediction sit. In-process; no worker runs."""
import dataclasses
import datetime as dt
import itertools

import pytest

from bot import access, commands
from bot.app.runtime import context
from bot.delivery import refusals
from bot.digest import build as digest
from bot.digest import chart as digest_chart
from bot.fits import chart as sweep_chart
from bot.fits import ols
from bot.fits.sweep import fit_sweep
from bot.store import Store
from bot.trials import chart as memory_chart
from test_sweep import ok_report

PNG = b"\x89PNG\r\n\x1a\n"
MiB = 2**20


def timeline_report(phases, world=1):
    """A trial sampled every 10 ms for 3 s, host RSS rising to 300 MiB at 2.0 s."""
    rows = [[100 + i / 100, int((100 + min(i, 200)) * MiB), None, 200 * MiB]
            for i in range(300)]
    r = {"trial": "T1", "workload": "llm-infer", "started": 100.0,
         "timeline": {"sampled": {"columns": ["t", "host_rss", "device_used", "process_used"],
                                  "rows": rows},
                      "allocator": {"columns": ["t", "allocated", "reserved"],
                                    "rows": [[100 + i / 10, 50 * MiB, 64 * MiB]
                                             for i in range(30)]}},
         "phases": [{"name": n, "start": 100 + a, "end": 100 + b} for n, a, b in phases],
         "memory": {"host_rss_peak": 300 * MiB}}
    if world > 1:
        r["training"] = {"world": world, "ranks": [
            {"rank": k, "host_rss_peak": (150 + k) * MiB} for k in range(world)]}
    return r


SHORT = [("setup", 0, 0.5), ("weights", 0.5, 0.52), ("data", 0.53, 0.55),
         ("prefill", 0.6, 1.0), ("decode", 1.0, 3.0)]


def texts(fig, gid):
    return [t for ax in [fig, *fig.axes] for t in ax.texts if t.get_gid() == gid]


def test_short_phases_labels_do_not_overlap_gaps_are_hatched_and_the_peak_is_marked():
    fig = memory_chart.figure(timeline_report(SHORT))
    renderer = fig.canvas.get_renderer()
    labels = texts(fig, "phase-label")
    assert sorted(t.get_text() for t in labels) == sorted(n for n, _, _ in SHORT)
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    # weights and data sit 0.03 s apart: one of them moved down a row
    rows = {t.get_text(): t.get_position()[1] for t in labels}
    assert rows["weights"] != rows["data"]
    ax = fig.axes[0]
    hatched = [p for p in ax.patches if p.get_hatch() == "///"]
    assert len(hatched) == 2  # 0.52–0.53 and 0.55–0.6: the only gaps
    assert "between phases" in [t.get_text() for t in ax.get_legend().get_texts()]
    (peak,) = texts(fig, "peak")
    assert peak.get_text().startswith("peak 300 MiB, host RSS, child tree, at 2.00 s")
    assert peak.xy == pytest.approx((2.0, 300 / 1024))
    assert memory_chart.png(timeline_report(SHORT))[:8] == PNG


def test_phases_too_short_for_any_row_go_to_the_key():
    many = [(f"p{i}", i * 0.002, i * 0.002 + 0.001) for i in range(12)] + [("run", 0.1, 3)]
    fig = memory_chart.figure(timeline_report(many))
    renderer = fig.canvas.get_renderer()
    labels = texts(fig, "phase-label")
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    (key,) = texts(fig, "phase-key")
    shown = {t.get_text() for t in labels}
    keyed = key.get_text().removeprefix("Phases too short to label: ").split("; ")
    assert len(shown) >= 5 and len(shown) + len(keyed) == len(many)
    assert {k.split()[0] for k in keyed} == {f"p{i}" for i in range(12)} - shown
    assert "p8 1 ms from 0.016 s" in keyed  # 0.000999… s: not "1e+03 µs"


def test_a_multi_rank_trial_says_its_series_are_summed_and_shows_each_ranks_peak():
    fig = memory_chart.figure(timeline_report(SHORT, world=2))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "host RSS, child tree (sum of 2 ranks)" in legend
    assert "torch allocated (CUDA allocator) (rank 0 only)" in legend
    assert "rank 0 peak 150 MiB (per rank, as in the table)" in legend
    assert "rank 1 peak 151 MiB (per rank, as in the table)" in legend
    ranks = [line for line in fig.axes[0].lines if line.get_gid() == "rank-peak"]
    assert [line.get_ydata()[0] for line in ranks] == pytest.approx([150 / 1024, 151 / 1024])
    (note,) = texts(fig, "ranks-note")
    assert "add up all 2 ranks' processes" in note.get_text()


def digest_figure(plans):
    start = dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)
    m = digest.measure([], [], start, dt.timezone.utc)
    return digest_chart.figure(m, plans, "#c digest")


def plan(name, gpu, rows):
    return {"name": name, "gpu": gpu,
            "rows": [{"kind": k, "estimate": e, "actual": a} for k, e, a in rows]}


def test_digest_labels_every_block_and_names_a_cpu_plans_hours():
    fig = digest_figure([plan("big", "H100", [("train", 40.0, 52.5), ("compare", 0.0857, 0.09)])])
    right = fig.axes[1]
    values = {t.get_text() for t in right.texts}
    assert {"40", "52.5", "0.0857", "0.09"} <= values  # the small block is still read
    assert right.get_xlabel() == "GPU-hours"
    cpu = digest_figure([plan("repro", "cpu", [("baseline", 0.02, 0.03)])]).axes[1]
    assert cpu.get_xlabel() == "CPU hours" and "GPU" not in cpu.get_title() + str(
        [t.get_text() for t in cpu.get_yticklabels()])
    mixed = digest_figure([plan("repro", "CPU", [("baseline", 0.02, 0.03)]),
                           plan("big", "H100", [("train", 4.0, 5.0)])]).axes[1]
    assert "CPU hours for a gpu=cpu plan" in mixed.get_xlabel()
    assert "repro/baseline (CPU)" in [t.get_text() for t in mixed.get_yticklabels()]


@pytest.fixture(autouse=True)
def closed_figures():
    """The figures a test read are closed after it (pyplot keeps every one open)."""
    yield
    from matplotlib import pyplot as plt
    plt.close("all")


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "s.db")))


def finished_sweep(ctx, words, rss, seconds=None):
    """The sweep run and fitted; `seconds`: each config's mean latency (else 10 ms per batch)."""
    commands.trial(ctx, words, "U1", "C1")
    while job := ctx.queue.lease("w1", 0):
        report = ok_report(job, rss(job["spec"]["params"]))
        if seconds:
            report["latency"] = {"mean": seconds(job["spec"]["params"])}
        ctx.queue.finish(job["id"], "w1", job["lease"], report)
    return fit_sweep([j["report"] for j in ctx.store.sweep_jobs(1)])


def offsets(ax, gid):
    (points,) = [c for c in ax.collections if c.get_gid() == gid]
    return [tuple(p) for p in points.get_offsets()]


def test_a_batch_sweep_chart_has_its_points_the_held_out_one_and_the_prediction(ctx):
    noisy = {1: 1.0, 2: 1.03, 4: 0.98, 8: 1.01}
    fit = finished_sweep(ctx, "sweep llm-infer batch=1,2,4,8 gen=4",
                         lambda p: int((300 + 4 * p["batch"] * noisy[p["batch"]]) * MiB))
    fig = sweep_chart.figure(fit, 1, {"batch": 16})
    memory, time = fig.axes
    assert memory.get_xlabel() == "batch" and memory.get_ylabel() == "MiB"
    assert [x for x, _ in offsets(memory, "measured")] == [1, 2, 4, 8]
    assert offsets(memory, "measured")[1][1] == pytest.approx(300 + 8 * 1.03, rel=1e-6)
    held = fit["memory"]["host_rss_peak"]["held_out"]
    assert offsets(memory, "held-out") == [pytest.approx((8, held["measured"] / MiB))]
    value, se, dof = ols.predict_model(fit["memory"]["host_rss_peak"], 16, 68)
    band = ols.band(fit["memory"]["host_rss_peak"], 16, 68)
    low, high = band.low, band.high  # the residuals' interval and the form's error beside it
    residuals = ols.interval(value, se, dof)
    assert band.form > 0 and low < residuals[0] and high > residuals[1]
    (star,) = [line for line in memory.lines if line.get_gid() == "prediction"]
    assert list(star.get_xdata()) == [16] and star.get_ydata()[0] == pytest.approx(value / MiB)
    (bar,) = [c for c in memory.containers if hasattr(c, "has_yerr") and c.has_yerr]
    ((_, (y0, y1)),) = [seg.T for seg in bar.lines[2][0].get_segments()]
    assert (y0, y1) == pytest.approx((low / MiB, high / MiB))
    assert [line.get_gid() for line in time.lines].count("fit-extrapolated") == 1
    assert time.get_title() == "time per request (malloc=auto)" and time.get_ylabel() == "ms"
    assert sweep_chart.png(fit, 1)[:8] == PNG


def test_the_sweep_chart_follows_its_fit_and_comes_with_a_fit_answer(ctx):
    finished_sweep(ctx, "sweep llm-infer batch=1,2,4 gen=4",
                   lambda p: (300 + p["batch"]) * MiB)
    kinds = [m["kind"] for m in ctx.store.unsent(100) if m["kind"].startswith("sweep")]
    assert kinds == ["sweep", "sweep-chart"]
    drawn = ctx.store.unsent(100)[-1]
    assert drawn["file"] == "S1-fit.png" and drawn["content"][:8] == PNG
    refused = refusals.notice("channel_not_found", "C1", "T3", drawn["kind"])
    assert refused.startswith(":warning: T3's sweep chart could not be posted in <#C1>")
    answer = commands.trial(ctx, "fit S1 batch=16", "U1", "C1")[0]
    assert "The chart (S1-fit-batch16.png) is being uploaded to this channel." in answer["text"]
    asked = ctx.store.unsent(100)[-1]
    assert asked["file"] == "S1-fit-batch16.png" and asked["requester"] == "U1"
    assert "prediction at batch=16" in asked["text"] and asked["via"] is None
    # an admin asking from another channel: the chart goes to them alone
    ctx = dataclasses.replace(ctx, policy=access.operator("U1"))
    elsewhere = commands.trial(ctx, "fit S1 batch=12", "U1", "C2")[0]["text"]
    assert "comes to you in a direct message, since S1 belongs to another channel" in elsewhere
    private = ctx.store.unsent(100)[-1]
    assert private["via"] == "dm" and private["channel"] == "C2" and private["requester"] == "U1"
    count = len(ctx.store.unsent(100))
    gpu = commands.trial(ctx, "fit S1 gpu=H100", "U1", "C1")[0]["text"]
    assert len(ctx.store.unsent(100)) == count and "uploaded" not in gpu  # no config, no new chart
    bad = commands.trial(ctx, "fit S1 batch=8 prompt=4096", "U1", "C1")[0]["text"]
    assert "cannot say" in bad  # the chart draws what it can, and says what it cannot
    (note,) = texts(sweep_chart.figure(fit_sweep([j["report"] for j in
                                                  ctx.store.sweep_jobs(1)]), 1,
                                       {"batch": 8, "colour": 2, "hidden": 7}), "no-prediction")
    assert "hidden" in note.get_text()


def test_a_depth_sweep_chart_plots_against_layers(ctx):
    fit = finished_sweep(ctx, "sweep llm-infer layers=1,2,4 gen=4",
                         lambda p: (200 + 10 * p["layers"]) * MiB)
    assert fit["kind"] == "depth"
    fig = sweep_chart.figure(fit, 1, {"layers": 8})
    memory = fig.axes[0]
    assert memory.get_xlabel() == "layers"
    assert [x for x, _ in offsets(memory, "measured")] == [1, 2, 4]
    (star,) = [line for line in memory.lines if line.get_gid() == "prediction"]
    assert list(star.get_xdata()) == [8]
    assert star.get_ydata()[0] == pytest.approx(280, rel=1e-6)
    assert offsets(memory, "held-out")[0][0] == 4
    time = fig.axes[1]  # every depth took 10 ms here: a flat line, drawn from zero
    assert time.get_ylim() == pytest.approx((0, 12.5)) and time.get_ylabel() == "ms"


def test_a_batch_and_length_sweep_draws_a_line_per_length_and_one_at_the_asked_length(ctx):
    fit = finished_sweep(ctx, "sweep llm-infer batch=1,2,4 prompt=32,64 gen=4",
                         lambda p: int((300 + 0.05 * p["batch"] * p["prompt"]) * MiB))
    memory = sweep_chart.figure(fit, 1, {"batch": 8, "prompt": 128}).axes[0]
    lines = [line.get_label() for line in memory.lines if line.get_gid() == "fit-line"]
    assert lines == ["fit at length 36", "fit at length 68", "fit at length 132"]
    legend = [t.get_text() for t in memory.get_legend().get_texts()]
    assert legend.count("extrapolated (dashed)") == 1
