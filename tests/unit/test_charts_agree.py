"""Charts that agree with their text (issue #33): no prediction drawn where the
fit's answer calls it unusable, nothing below zero, whole-number axes for whole
parameters, the memory timeline's pass and the report's own peak, series that
coincide still told apart, and no blank margin. Read back from the figure (and
one PNG's pixels) as test_charts.py does; in-process, no worker runs."""
import datetime as dt
import io
import re

import pytest
from PIL import Image

from bot import commands
from bot.app.runtime import context
from bot.digest import build as digest
from bot.digest import chart as digest_chart
from bot.fits import chart as sweep_chart
from bot.store import Store
from bot.trials import chart as memory_chart
from test_charts import SHORT, digest_figure, finished_sweep, plan, timeline_report
from worker.api import size
from worker.i18n import using

MiB = 2**20
# Times that fall with the batch: a straight line through them goes below zero
FALLING = {1: 0.40, 2: 0.22, 3: 0.05}


@pytest.fixture(autouse=True)
def closed_figures():
    """The figures a test read are closed after it (pyplot keeps every one open)."""
    yield
    from matplotlib import pyplot as plt
    plt.close("all")


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "s.db")))


def falling_sweep(ctx, times=FALLING):
    words = f"sweep llm-infer batch={','.join(map(str, times))} gen=4"
    return finished_sweep(ctx, words, lambda p: (300 + 4 * p["batch"]) * MiB,
                          lambda p: times[p["batch"]])


def gids(ax, gid):
    return [a for a in [*ax.lines, *ax.collections] if a.get_gid() == gid]


def legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_prediction_the_answer_calls_unusable_gets_no_star_and_says_why(ctx):
    fit = falling_sweep(ctx)
    answer = commands.trial(ctx, "fit S1 batch=5", "U1", "C1")[0]["text"]
    assert "time: *unusable: predicts -302 ms per run, and a time is positive" in answer
    memory, time = sweep_chart.figure(fit, 1, {"batch": 5}).axes
    assert gids(time, "prediction") == []
    (asked,) = gids(time, "not-predicted")
    assert list(asked.get_xdata()) == [5, 5]
    assert "no prediction drawn" in asked.get_label()
    assert "predicts -302 ms per run, and a time is positive" in asked.get_label()
    # memory at batch=5 is usable in the answer, and drawn with its figure
    assert "host_rss_peak: 320 MiB" in answer
    (star,) = gids(memory, "prediction")
    assert list(star.get_xdata()) == [5]
    assert any(label.startswith("predicted at batch=5: 320 MiB ± ") for label in legend(memory))


def test_a_fit_that_cannot_say_at_the_asked_batch_is_drawn_and_says_so(ctx):
    fit = finished_sweep(ctx, "sweep llm-infer batch=4 prompt=32,64,128 gen=4",
                         lambda p: int((300 + 0.05 * p["prompt"]) * MiB))
    answer = commands.trial(ctx, "fit S1 batch=8 prompt=64", "U1", "C1")[0]["text"]
    assert "host_rss_peak: cannot say — the sweep measured batch 4 only" in answer
    for ax in sweep_chart.figure(fit, 1, {"batch": 8, "prompt": 64}).axes:
        (asked,) = gids(ax, "not-predicted")
        assert gids(ax, "prediction") == []
        assert "no prediction drawn, as the sweep measured" in asked.get_label()


def test_nothing_is_drawn_below_zero_and_a_band_cut_there_says_so(ctx):
    fit = falling_sweep(ctx, {1: 0.40, 2: 0.31, 4: 0.12, 8: 0.13})
    time = sweep_chart.figure(fit, 1, {"batch": 64}).axes[1]
    assert fit["time"]["verdict"]["usable"] is False and gids(time, "prediction") == []
    assert time.get_ylim()[0] == 0
    for line in time.lines:
        ys = [y for y in line.get_ydata() if y == y]  # NaN: a gap, not drawn
        assert all(y >= 0 for y in ys), line.get_gid()
    (band,) = gids(time, "band")
    assert min(y for path in band.get_paths() for _, y in path.vertices) == 0
    assert "cut at 0: no time or size is below it" in legend(time)
    # the held-out point's refit predicted below zero: said, not drawn
    assert gids(time, "held-out-predicted") == []
    assert any("the refit without it predicts below 0" in t for t in legend(time))


def test_a_chart_in_a_korean_channel_keeps_the_fits_words_english(ctx):
    fit = falling_sweep(ctx)
    with using("ko"):
        time = sweep_chart.figure(fit, 1, {"batch": 5}).axes[1]
    (asked,) = gids(time, "not-predicted")
    assert "a time is positive" in asked.get_label()
    assert not re.search("[\uac00-\ud7a3]", asked.get_label())


def integer_ticks(ax):
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim()
    return [t for t in ax.get_xticks() if lo <= t <= hi]


def test_batch_and_layer_axes_tick_whole_numbers_only(ctx):
    fit = falling_sweep(ctx)
    for ax in sweep_chart.figure(fit, 1, {"batch": 5}).axes:
        ticks = integer_ticks(ax)
        assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_a_depth_chart_ticks_whole_layers(tmp_path):
    ctx = context(Store(str(tmp_path / "d.db")))
    fit = finished_sweep(ctx, "sweep llm-infer layers=1,2,3 gen=4",
                         lambda p: (200 + 10 * p["layers"]) * MiB)
    memory = sweep_chart.figure(fit, 1).axes[0]
    assert memory.get_xlabel() == "layers"
    ticks = integer_ticks(memory)
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_lines_that_coincide_stay_apart(ctx):
    # time does not depend on the prompt here: the three lengths' time lines coincide
    fit = finished_sweep(ctx, "sweep llm-infer batch=1,2,4 prompt=32,64 gen=4",
                         lambda p: int((300 + 0.05 * p["batch"] * p["prompt"]) * MiB))
    time = sweep_chart.figure(fit, 1, {"batch": 8, "prompt": 128}).axes[1]
    lines = gids(time, "fit-line")
    assert len(lines) == 3
    assert [a.get_ydata()[-1] for a in lines] == pytest.approx([lines[0].get_ydata()[-1]] * 3)
    # each wider than the next and under it: every colour shows along the one line
    widths = [a.get_linewidth() for a in lines]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    assert [a.get_zorder() for a in lines] == sorted(a.get_zorder() for a in lines)


def split_report():
    """A malloc=auto trial on a CPU: the timeline is the time pass's (host RSS to
    300 MiB), the reported host RSS peak the memory pass's 290 MiB."""
    r = timeline_report(SHORT)
    r["memory"] = {"host_rss_peak": 290 * MiB}
    r["passes"] = [{"pass": "memory", "malloc": "live", "status": "ok",
                    "supplied": ["host_rss_peak", "host_rss_peak_kernel"]},
                   {"pass": "time", "malloc": "glibc", "status": "ok",
                    "supplied": ["phases", "seconds"]}]
    return r


def test_the_memory_timeline_says_its_pass_and_writes_the_reports_own_peak():
    ax = memory_chart.figure(split_report()).axes[0]
    assert "the time pass (malloc=glibc)" in ax.get_title()
    assert "host RSS peak is the memory pass's (malloc=live)" in ax.get_title()
    (peak,) = [t for t in ax.texts if t.get_gid() == "peak"]
    assert peak.get_text().startswith(f"peak {size(290 * MiB)} as reported (host RSS, child "
                                      "tree, memory pass, malloc=live)")
    assert "this run's highest sample: 300 MiB at 2.00 s" in peak.get_text()
    (line,) = gids(ax, "reported-peak")
    assert line.get_ydata()[0] == pytest.approx(290 / 1024)
    one = memory_chart.figure(timeline_report(SHORT)).axes[0]
    assert "one pass" in one.get_title() and gids(one, "reported-peak") == []


def test_two_ranks_with_one_peak_both_show():
    r = timeline_report(SHORT, world=2)
    for rank in r["training"]["ranks"]:
        rank["host_rss_peak"] = 150 * MiB  # the same figure: the same height
    fig = memory_chart.figure(r)
    fig.canvas.draw()
    a, b = gids(fig.axes[0], "rank-peak")
    assert (a.get_linestyle(), a.get_marker()) != (b.get_linestyle(), b.get_marker())
    ax = fig.axes[0]
    marks = [ax.get_yaxis_transform().transform((line.get_xdata()[1], line.get_ydata()[1]))
             for line in (a, b)]
    assert abs(marks[0][0] - marks[1][0]) > 10  # pixels apart on the one line
    assert {"rank 0 peak 150 MiB (per rank, as in the table)",
            "rank 1 peak 150 MiB (per rank, as in the table)"} <= set(legend(ax))


def blank_margins(png: bytes) -> list[int]:
    """Pixels of white on the left, top, right and bottom of a PNG."""
    image = Image.open(io.BytesIO(png)).convert("L")
    box = image.point(lambda v: 255 if v < 250 else 0).getbbox()
    return [box[0], box[1], image.width - box[2], image.height - box[3]]


def test_every_chart_kind_is_saved_without_a_blank_margin(ctx):
    fit = falling_sweep(ctx)
    week = digest.measure([], [], dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc),
                          dt.timezone.utc)
    figures = {"fit": sweep_chart.png(fit, 1, {"batch": 5}),
               "timeline": memory_chart.png(split_report()),
               "digest": digest_chart.png(week, [plan("big", "H100", [("train", 4.0, 5.0)])],
                                          "#c digest")}
    for kind, png in figures.items():
        assert max(blank_margins(png)) <= 15, (kind, blank_margins(png))


def test_the_digests_panels_sit_close_to_their_labels():
    fig = digest_figure([plan("big", "H100", [("train", 40.0, 52.5)])])
    renderer = fig.canvas.get_renderer()
    left, right = fig.axes
    labels = [t.get_window_extent(renderer).x0 for t in right.get_yticklabels()]
    assert min(labels) - left.get_window_extent(renderer).x1 < 60
    assert fig.get_tightbbox(renderer).height * fig.dpi >= 0.95 * fig.bbox.height


def test_an_empty_week_says_it_has_no_hours():
    fig = digest_figure([])
    left, right = fig.axes
    assert [t.get_text() for t in left.texts if t.get_gid() == "no-hours"] == [
        "no hours this week"]
    assert right.get_xlabel() == "hours"  # no plan: neither GPU nor CPU hours claimed
