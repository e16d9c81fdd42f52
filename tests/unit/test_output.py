"""Output that agrees with itself (issue 19): each figure rounded on its own,
the same figure in show, review, export and the digest, and replies that
answer what was asked. In-process, on a real SQLite store."""
import datetime as dt
import json
import os

import pytest

from bot import commands, figures
from bot.app.runtime import context
from bot.blocks import chunks, clip, reply
from bot.digest import build as digest_build
from bot.fits import depth, depthview
from bot.plans import service
from bot.store import Store
from test_depth import gpu_report, run_depth_sweep
from test_planner import report
from test_plans import finish
from worker import arithmetic, summary
from worker.units import size

UTC = dt.timezone.utc
TODAY = dt.date(2026, 12, 1)


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "o.db")), admins=frozenset({"U1"}))


def say(ctx, text, now=None):
    now = now or dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    return commands.plan(ctx, text, "U1", "C1", now.date(), now)["text"]


def exported(ctx, name):
    before = ctx.store.db["outbox"].count
    assert "Exporting" in say(ctx, f"{name} export")
    rows = [r for r in list(ctx.store.db["outbox"].rows)[before:] if r["kind"] == "export"]
    return {r["file"].rsplit(".", 1)[1]: r["content"] for r in rows}


# --- figures --------------------------------------------------------------------

@pytest.mark.parametrize("x, shown", [
    (0.0857, "0.0857"), (0.08575001, "0.0858"), (2.5, "2.50"), (123.45, "123"),
    (12345.6, "12,346"), (0.09996, "0.100"), (0, "0"), (None, "n/a"),
    (0.0000012, "0.00000120"), (7.529e-8, "7.53e-8")])
def test_each_figure_is_rounded_to_three_significant_digits(x, shown):
    assert figures.number(x) == shown


def test_an_interval_keeps_its_ends_apart_and_a_change_agrees_with_the_figures():
    assert figures.interval(0.4998, 0.5002) == "0.4998–0.5002"   # not "0.500–0.500"
    assert figures.interval(1, 2) == "1.00–2.00"
    assert figures.interval(0.5, 0.5) == "0.500–0.500"
    # (0.259 − 0.0857) / 0.0857 = +202%, from the figures as shown
    assert figures.change(0.0857, 0.259) == "+202%"
    assert figures.change(0.0653, 0.0681) == "+4.3%"
    assert figures.change(0, 1) == "" and figures.signed(-0.00278) == "-0.00278"


# --- one figure for one thing ---------------------------------------------------

def test_a_tiny_block_beside_a_big_one_prints_alike_in_show_review_export_and_digest(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100 platform=cuda")
    say(ctx, f"repro block baseline runs=20000 trial={t}")   # ~11 GPU-h
    say(ctx, f"repro block compare runs=10 trial={t}")       # 235 s = 0.0653 GPU-h
    say(ctx, "repro actual compare hours=0.2 runs=10")
    ests = service.estimates(ctx, ctx.store.plan("repro"))
    tiny = figures.gpu_hours(ests[1][1]["hours"])
    total = figures.gpu_hours(sum(e["hours"] for _, e, _ in ests))
    assert tiny == "0.0653" and total == "11.2"   # the small block does not vanish as 0.00

    show = say(ctx, "repro show")
    rows = {line.split()[0]: line.split() for line in show.split("```")[1].splitlines()}
    assert rows["compare"][2] == tiny and rows["total"][1] == total   # total has no runs

    review = say(ctx, "repro review")
    change = figures.change(ests[1][1]["hours"], 0.2)
    assert f"estimated {tiny}, actual 0.200 GPU-h ({change})" in review

    files = exported(ctx, "repro")
    csv_rows = [r.split(",") for r in files["csv"].splitlines()]
    assert [r[6] for r in csv_rows if r[1] == "compare" and r[5] == "total"] == [tiny]
    assert [r[6] for r in csv_rows if r[1] == "total"] == [total]
    assert f"| compare | 10×1 | {tiny} |" in files["md"]
    assert f"| total |  | {total} |" in files["md"]
    data = json.loads(files["json"])
    assert data["blocks"][1]["estimate"]["gpu_hours"]["shown"] == tiny
    assert data["total"]["gpu_hours"]["shown"] == total

    plan = ctx.store.plan("repro")
    summary_ = digest_build.plan_summary(plan, ests, service.review_rows(ctx, plan, ests),
                                         ["", "", "unconfirmed"])
    line = digest_build.plan_line(summary_)
    assert f"estimate {total} GPU-h" in line and f"against {tiny} estimated ({change})" in line


def test_the_total_is_the_sum_of_the_unrounded_parts_rounded_once(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    for kind in ("baseline", "compare", "verify"):
        say(ctx, f"repro block {kind} runs=13 trial={t}")
    ests = service.estimates(ctx, ctx.store.plan("repro"))
    exact = sum(float(c["hours"]) for _, e, _ in ests for c in e["components"])
    show = say(ctx, "repro show")
    rows = {line.split()[0]: line.split() for line in show.split("```")[1].splitlines()}
    assert rows["baseline"][2] == figures.gpu_hours(ests[0][1]["hours"])
    assert rows["total"][1] == figures.number(exact)
    # the parts as shown need not add up to the last digit; the exact parts do
    assert sum(float(e["hours"]) for _, e, _ in ests) == pytest.approx(exact)


# --- the listed inconsistencies -------------------------------------------------

def test_the_kv_line_gives_the_per_sequence_figure_fits_on_shows():
    r = gpu_report(layers=2)
    fd = arithmetic.full_depth(r["params"])
    per_sequence = size(fd["kv_cache_bytes"] / fd["batch"])
    assert fd["batch"] == 8 and per_sequence == "544 MiB"
    assert f"= 4.25 GiB ({per_sequence} per sequence × batch 8)" in summary.full_depth(fd)
    fits = depthview.fits_text(depth.from_trial(dict(r, full_depth=fd))["fits"])
    assert f"KV cache {per_sequence} per sequence" in fits


@pytest.mark.parametrize("typed, echoed", [
    ("3w", "period=3 weeks (21 days)"), ("10d", "period=10 days"),
    ("3mo", "period=3 months (91.3 days)"), ("1y", "period=1 year (365 days)")])
def test_period_is_echoed_with_its_unit(ctx, typed, echoed):
    say(ctx, "new repro")
    assert f"set {echoed}." in say(ctx, f"repro set period={typed}")


def test_new_suggests_only_what_is_still_missing(ctx):
    out = say(ctx, "new repro gpu=H100")
    assert "started with gpu=H100-80GB." in out
    assert "Next: `/plan repro set platform=cuda paper=...`" in out and "set gpu=" not in out
    done = say(ctx, 'new other gpu=H100 platform=cuda paper="arXiv 1"')
    assert "Next: `/plan other block baseline runs=N trial=T12`." in done and " set " not in done


def test_review_of_a_plan_with_no_blocks_says_what_to_add(ctx):
    say(ctx, "new empty")
    out = say(ctx, "empty review")
    assert "No blocks yet, so there is nothing to review" in out
    assert "`/plan empty block baseline runs=N trial=T12`" in out


def test_show_names_a_warning_once_with_the_blocks_it_applies_to(ctx):
    t = finish(ctx, report(gpu=None))
    say(ctx, "new repro")   # no target GPU
    for kind in ("baseline", "compare", "scale", "verify"):
        say(ctx, f"repro block {kind} runs=10 trial={t}")
    warnings = say(ctx, "repro show").split("*Warnings*:\n")[1].splitlines()
    assert warnings == ["• baseline, compare, scale, verify: no target GPU is set "
                        "(`set gpu=H100`), so nobody checked that this block's trials ran on "
                        "it; each block's hours are on its trials' own device, named on its line"]


def test_a_long_note_is_cut_at_a_word_with_a_pointer_to_the_export_which_has_it_whole(ctx):
    note = " ".join(f"word{i}" for i in range(900))   # 5,800 characters
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f'repro block baseline runs=10 trial={t} note="{note}"')
    payload = commands.plan(ctx, "repro show", "U1", "C1", TODAY)
    assert all(len(b["text"]["text"]) <= 3000 for b in payload["blocks"] if "text" in b)
    shown = payload["text"].split("*Open variables*:\n• baseline: ")[1].split("\n")[0]
    cut, pointer = shown.split("… (the whole note")
    assert note.startswith(cut) and note[len(cut)] == " "   # at a word boundary
    assert f"{len(note):,} characters, is in `/plan repro export`" in pointer
    assert f"- open variable: {note}\n" in exported(ctx, "repro")["md"]


def test_a_line_longer_than_a_section_is_split_at_words_and_a_section_clipped_with_an_ellipsis():
    text = " ".join(["abcdefghij"] * 600)   # 6,599 characters, one line
    parts = chunks(text)
    assert len(parts) == 3 and " ".join(parts) == text and all(len(p) <= 2900 for p in parts)
    assert all(len(b["text"]["text"]) <= 3000 for b in reply(text)["blocks"])
    cut = clip(text)
    assert len(cut) <= 3000 and cut.endswith("abcdefghij…")


def test_a_depth_fit_answers_the_depth_asked_and_points_to_the_whole_sweep(ctx):
    run_depth_sweep(ctx)
    answer = commands.trial(ctx, "fit S1 layers=16", "U1", "C1")[0]["text"]
    assert "Depth sweep S1* (preset llama-3-8b) at layers=16" in answer
    assert "Predicted at 16 layers" in answer and "Fits on" in answer
    assert "Measured points" not in answer and "Peak memory —" not in answer
    assert "`/trial fit S1`" in answer
    whole = commands.trial(ctx, "fit S1", "U1", "C1")[0]["text"]
    assert "Measured points" in whole


def test_a_sweeps_queue_reply_suggests_the_fit_question_it_takes(ctx):
    text = commands.trial(ctx, "sweep llm-infer preset=llama-3-8b layers=1,2 batch=2",
                                "U1", "C1")[0]["text"]
    assert "`/trial fit S1 layers=N gpu=H100`" in text and "batch=N" not in text
    text = commands.trial(ctx, "sweep llm-infer batch=1,2", "U1", "C1")[0]["text"]
    assert "`/trial fit S3 batch=N gpu=H100`" in text


# --- export complete ------------------------------------------------------------

def test_the_export_holds_actuals_review_lock_settings_and_prices(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100 platform=cuda")
    say(ctx, "repro set period=6w rental=single")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    say(ctx, "repro lock")
    tagged = finish(ctx, report(mean=3.0), tags=("repro", "baseline"))
    say(ctx, 'repro actual baseline hours=0.1 runs=10 note="cluster job 811"')
    say(ctx, "price H100 2.49/h source=https://x.example/q date=2026-11-30")
    files = exported(ctx, "repro")
    d = json.loads(files["json"])
    b = d["blocks"][0]
    assert b["estimate"]["components"][0]["source"] and b["trials"] == [t]
    assert b["actual"]["sources"] == [tagged, "manual #1 (cluster job 811)"]
    assert b["actual"]["why"] and b["actual"]["held"].startswith(("inside", "OUTSIDE"))
    assert d["lock"]["baseline"]["trials"] == [t] and d["lock"]["at"] == "2026-12-01"
    assert d["settings"] == {"rental": "single", "period": "6 weeks (42 days)"}
    assert d["checklist"]["gpu"] == "H100-80GB" and d["checklist"]["paper"] is None
    assert d["prices"]["used"]["value"] == 2.49 and d["prices"]["used"]["source"]
    md = files["md"]
    for heading in ("## Review: estimate against actual", "## Lock", "## Checklist",
                    "## Settings", "## Prices used"):
        assert heading in md
    assert f"from {tagged}, manual #1 (cluster job 811)" in md and "Locked on 2026-12-01" in md
    assert "H100-80GB rent 2.49 per GPU-hour (P1, source: https://x.example/q" in md
    assert "set fact period: (not set) → 6 weeks (42 days)" in md   # its history, worded alike
    assert [r["action"] for r in d["history"]][-1] == "new"
    header = files["csv"].splitlines()[0]
    assert header.endswith("actual_gpu_hours,actual_sources")
    assert f"{tagged}; manual #1 (cluster job 811)" in files["csv"]


# --- worker and files -----------------------------------------------------------


def test_gitignore_covers_the_files_beside_the_database():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, ".gitignore")) as f:
        assert "trialbot-files/" in f.read().split()
