"""A figure that is not a number never prints as one: a report stored before
the bot refused NaN, Infinity and negative sizes (issue #29) renders its bad
figures as "not measured" wherever it is shown, and does not break the card,
the threaded report, `/trial status`, the chart or `/plan digest now`."""
import json
import re

import pytest

from bot.app.runtime import context
from bot.store import Store
from bot.store.jobs import stored_json
from bot.trials import card, chart, views
from test_digest import say
from test_planner import report as planner_report
from test_plans import finish
from test_refusals import good, put
from worker import units
from worker.i18n import using

NAN, INF = float("nan"), float("inf")
# what must never be shown: a NaN, an infinity, a size or time below zero
SHOWN_BAD = re.compile(r"(?i:\b(nan|inf|infinity)\b)"
                       r"|(?<![\w.-])-\d[\d.,]* (B|KiB|MiB|GiB|s|ms|µs|ns)\b")


def rich() -> dict:
    """Every part the renderers show: an inference report with a training block,
    a full-depth arithmetic and a busy machine."""
    r = good({"batch": 1, "prompt": 128, "gen": 32, "malloc": "auto"})
    r.update(trial="T7", worker="w1", training={
        "params": 98496, "precision": "fp32", "checkpointing": "none", "zero": 0, "world": 1,
        "steps": 4, "loss_first": 5.7, "loss_final": 5.4, "losses": [5.7, 5.6, 5.5, 5.4],
        "optimizer_state_theory_per_rank": 787968, "theory": "AdamW: 8 bytes/param",
        "ranks": [{"rank": 0, "optimizer_state_bytes": 787968, "shard_params": 98496,
                   "host_rss_start": 2**28, "host_rss_peak": 2**29, "peak_allocated": None}]},
        full_depth={"preset": "llama-2-7b", "layers": 32, "trial_layers": 1, "batch": 2,
                    "params": 6738415616, "dtype": "bf16", "weight_bytes": 13476831232,
                    "kv_cache_bytes": 5242880, "kv_formula": "2·32·32·128·(8+2)·1·2",
                    "published_params": 6740000000, "published_text": "6.74B",
                    "relative_error": -0.000235})
    r["contention"]["summary"] = None
    return r


def leaves(doc, path=()):
    """(path, value) of every number in `doc`."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from leaves(v, path + (i,))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, doc


def rendered(r: dict) -> str:
    """Everything a trial shows of its report, as text."""
    job = {"id": 7, "trial": "T7", "channel": "C1", "words": "llm-infer", "user": "U1",
           "status": "done", "worker": "w1", "started_msg": 1, "report": r}
    tries = [{"n": a.get("attempt"), "worker": "w1", "status": a["status"],
              "error_class": a["error_class"], "message": a["message"],
              "seconds": a["seconds"], "next": a["next"]} for a in r["attempts"]]
    return json.dumps([views.report(job, r), card.final(job, r), views.status(job, tries),
                       views.job_list([job])], ensure_ascii=False)


NUMBERS = sorted({path for path, _ in leaves(rich())
                  if path[0] not in ("timeline", "started", "finished")})  # the chart's own


@pytest.mark.parametrize("bad", [NAN, INF, -INF, -5.0 * 2**30],
                         ids=["nan", "inf", "-inf", "negative"])
def test_a_bad_figure_anywhere_in_a_stored_report_renders_as_not_measured(bad):
    """Each number of a report in turn made bad, stored as the bot stored it
    before #29 and read back (a NaN or infinity reads as null): the messages
    still render, and show none of it."""
    assert len(NUMBERS) > 80
    for path in NUMBERS:
        if bad < 0 and path[-1] in ("relative_error", "logits_head"):
            continue  # signed by nature: a relative error, a logit
        r = stored_json(json.dumps(put(rich(), path, bad)))
        text = rendered(r)
        found = SHOWN_BAD.search(text)
        assert found is None, (path, found and text[max(0, found.start() - 80):found.end()])


def test_the_bad_figures_of_the_operators_reports_read_not_measured():
    r = rich()
    r["memory"].update(host_rss_peak=-5 * 10**9, peak_allocated=INF, peak_reserved=NAN)
    r.update(seconds=-100.0)
    r["throughput"]["value"] = NAN
    text = rendered(r)
    assert "host RSS peak: not measured (child tree" in text
    assert "GPU peak allocated / reserved: not measured / not measured (torch allocator)" in text
    assert "T7 llm-infer ok on w1 in not measured" in text
    assert "throughput: not measured\\n" in text
    with using("ko"):
        assert "측정하지 않음" in rendered(r)


def test_units_print_a_measured_figure_below_zero_as_not_measured():
    assert units.size(-5 * 2**30, measured=True) == "not measured"
    assert units.duration(-100, measured=True) == "not measured"
    for bad in (NAN, INF, -INF, 10**400):
        assert units.size(bad) == units.duration(bad) == "not measured"
        assert units.number(bad, ".1f") == "not measured"
    # a difference keeps its sign: a margin a config misses a GPU by
    assert units.size(-2 * 2**30) == "-2 GiB" and units.duration(-1.5) == "-1.5 s"
    assert units.size(None) == units.number(None, ".0%") == "n/a"
    assert units.number(0.54, ".0%") == "54%"


def test_figures_never_print_nan_or_inf():
    from decimal import Decimal

    from bot import figures
    for bad in (NAN, INF, Decimal("NaN"), Decimal("Infinity")):
        assert figures.number(bad) == figures.signed(bad) == "not measured"
        assert figures.interval(1.0, bad) == "not measured" and figures.change(bad, 1.0) == ""
    assert figures.gpu_hours(-0.5) == "not measured" and figures.gpu_hours(0.5) == "0.500"
    assert figures.signed(-0.5) == "-0.500"


def test_a_timeline_with_bad_rows_still_draws():
    r = rich()
    t = r["started"]
    r["timeline"]["sampled"]["rows"] = [[t, 1e9, None, None], [None, 2e9, None, None],
                                        [t + 1, None, None, None], [t + 2, -5e9, None, None],
                                        [t + 3, 1.5e9, None, None]]
    r["phases"].append({"name": "odd", "start": None, "end": t + 2, "seconds": None})
    assert chart.png(r)[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_stored_nan_reads_back_as_null():
    assert stored_json('{"a": NaN, "b": [Infinity, -Infinity, 1.5]}') == {
        "a": None, "b": [None, None, 1.5]}


def stored_before_the_fix(ctx, trial: str, report: dict) -> None:
    """Overwrite a finished trial's report as the bot stored it before #29: with
    NaN and Infinity literals (Python's json.dumps writes them by default)."""
    with ctx.store.tx():
        ctx.store.db.execute("update jobs set report = ? where id = ?",
                             [json.dumps(report), int(trial[1:])])


def test_a_nan_stored_before_the_fix_does_not_break_the_digest_or_status(tmp_path):
    ctx = context(Store(str(tmp_path / "d.db")), admins=frozenset({"U1"}))
    ctx.store.upsert_worker("w1", {"gpus": ["NVIDIA H100 80GB HBM3"]})
    finish(ctx, planner_report())
    bad = finish(ctx, planner_report())
    r = planner_report()
    r.update(seconds=NAN)
    r["memory"]["host_rss_peak"] = NAN
    r["latency"]["p90"] = INF
    r["phases"][0]["seconds"] = NAN
    stored_before_the_fix(ctx, bad, r)
    # the row is what broke it: SQLite's json_extract refuses it
    import sqlite3
    with pytest.raises(sqlite3.OperationalError, match="malformed JSON"):
        ctx.store.db.execute("select json_extract(report, '$.status') from jobs").fetchall()
    out = say(ctx, "digest now")
    assert "Posting the budget digest" in out and "Something went wrong" not in out
    posted = [m for m in ctx.store.unsent() if m["kind"] == "digest"][-1]["text"]
    assert "*Trials*: 2 ended (2 ok, 0 failed)" in posted
    status = views.status(ctx.store.job(int(bad[1:])))["text"]
    assert "host RSS peak: n/a" in status and "setup n/a" in status  # as not measurable
    assert not SHOWN_BAD.search(status)


@pytest.mark.parametrize("where", ["latency.mean", "phases.0.seconds", "seconds"])
def test_a_nan_stored_before_the_fix_does_not_break_a_plan(tmp_path, where):
    """A trial in a plan's block whose stored report holds a NaN (it reads back
    as null): show, review, export and advise answer, saying the figure was not
    measured, instead of "Something went wrong"."""
    from test_plans import say as plan_say
    ctx = context(Store(str(tmp_path / "p.db")), admins=frozenset({"U1"}))
    ctx.store.upsert_worker("w1", {"gpus": ["NVIDIA H100 80GB HBM3"]})
    good_trial = finish(ctx, planner_report())
    bad = finish(ctx, planner_report())
    r = planner_report()
    node, *path = where.split(".")
    target = r
    for key in [node, *path][:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    last = [node, *path][-1]
    target[int(last) if last.isdigit() else last] = NAN
    assert "started" in plan_say(ctx, "new repro gpu=H100")
    plan_say(ctx, f"repro block baseline runs=20 trial={good_trial}")
    assert "scale block added" in plan_say(ctx, f"repro block scale runs=20 trial={bad}")
    stored_before_the_fix(ctx, bad, r)  # the block rests on a row stored before #29
    for command in ("repro show", "repro review", "repro export", "repro advise"):
        out = plan_say(ctx, command)
        assert "Something went wrong" not in out, (command, out)
        assert not SHOWN_BAD.search(out), (command, out)
    out = plan_say(ctx, "repro show")
    assert f"{bad}'s report holds no measured value for" in out, out
    out = plan_say(ctx, f"repro block verify runs=20 trial={bad}")
    assert f"{bad}'s report holds no measured value for" in out and "run it again" in out
