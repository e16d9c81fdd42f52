"""Recorded actuals keep their numbers and their fields (issue #33 item 3), in
process through `/plan` on a real SQLite store: a deleted number is never
handed out again (an existing file too, through its migration), `actual KIND
correct` changes only the fields it names, and the history shows each delete
and each correction, old → new."""
import datetime as dt
import sqlite3

import pytest

from bot import commands
from bot.app.runtime import context
from bot.store import Store, migrations
from test_planner import report
from test_plans import counts, finish

TODAY = dt.date(2026, 12, 1)


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "a.db")), admins=frozenset({"U1"}))


def say(ctx, text):
    return commands.plan(ctx, text, "U1", "C1", TODAY)["text"]


def a_plan(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block compare runs=20 trial={t}")
    say(ctx, f"repro block verify runs=20 trial={t}")


def test_a_deleted_actuals_number_is_not_handed_out_again(ctx):
    a_plan(ctx)
    for h in (1, 2, 3):
        say(ctx, f"repro actual compare hours={h}")
    assert "Deleted 1 recorded compare actual(s)" in say(ctx, "repro actual compare delete #3")
    out = say(ctx, "repro actual compare hours=0.5")
    assert "#4 0.5 GPU-h" in out and "#3" not in out
    say(ctx, "repro actual compare delete")  # all of them, the newest among them
    assert "#5 0.25 GPU-h" in say(ctx, "repro actual verify hours=0.25")
    assert [a["id"] for a in ctx.store.actuals("repro")] == [5]


def before_numbering() -> int:
    """The schema version just before the step that numbers actuals for good
    (the steps after it run again too)."""
    return migrations.BASELINE + next(n for n, (name, _steps) in enumerate(migrations.MIGRATIONS)
                                      if name == "actual numbers never reused")


def test_a_file_from_before_keeps_its_actuals_and_never_reuses_a_number_it_showed(tmp_path):
    """A file made before the step: actuals under a plain rowid, #3 recorded and
    deleted (its history names it). Opened by this trialbot, its rows stay and
    the next actual is #4, not #3 again."""
    path = str(tmp_path / "old.db")
    Store(path)
    conn = sqlite3.connect(path)
    conn.executescript(
        "drop table actuals; create table actuals (id integer primary key, plan text, block "
        "text, hours real, parts text, runs integer, note text, user text, recorded real);"
        "insert into actuals values (1, 'repro', 'compare', 1.0, '{}', 60, 'night', 'U1', 1.0),"
        " (2, 'repro', 'compare', 2.0, '{}', null, null, 'U1', 2.0);"
        "insert into plan_history (plan, what, action, old, new, user, at) values "
        "('repro', 'actual compare #3', 'add', null, '{\"hours\": 3}', 'U1', 3.0),"
        "('repro', 'actual compare', 'delete', '[{\"id\": 3, \"hours\": 3}]', null, 'U1', 4.0);"
        f"pragma user_version = {before_numbering()};")
    conn.close()
    ctx = context(Store(path), admins=frozenset({"U1"}))
    assert [(a["id"], a["runs"], a["note"]) for a in ctx.store.actuals("repro")] == [
        (1, 60, "night"), (2, None, None)]
    a_plan(ctx)
    assert "#4 0.5 GPU-h" in say(ctx, "repro actual compare hours=0.5")
    assert "autoincrement" in ctx.store.db.execute(
        "select sql from sqlite_master where name = 'actuals'").fetchone()[0].lower()


def test_a_correction_changes_only_the_fields_it_names(ctx):
    a_plan(ctx)
    say(ctx, 'repro actual verify hours=0.5 prep=0.1 runs=60 note="cluster jobs 811-830"')
    out = say(ctx, "repro actual verify correct hours=0.3")
    assert "Corrected verify actual #1 of *repro*: hours 0.5 → 0.3." in out
    assert "Kept: prep=0.1, runs=60, note=cluster jobs 811-830." in out
    assert "#1 0.3 GPU-h, 60 runs (manual: cluster jobs 811-830;" in out
    [a] = ctx.store.actuals("repro")
    assert (a["id"], a["hours"], a["parts"], a["runs"], a["note"]) == (
        1, 0.3, {"prep": 0.1}, 60, "cluster jobs 811-830")
    review = say(ctx, "repro review")
    assert "run count not recorded" not in review and "manual #1" in review
    out = say(ctx, "repro actual verify correct note= prep=")  # `key=` unsets one
    assert "prep 0.1 → (not set), note cluster jobs 811-830 → (not set)" in out
    [a] = ctx.store.actuals("repro")
    assert (a["parts"], a["runs"], a["note"]) == ({}, 60, None)


def test_a_correction_names_its_actual_and_refuses_what_it_cannot_do(ctx):
    a_plan(ctx)
    nothing = say(ctx, "repro actual verify correct hours=1")
    assert "has no recorded actual to correct" in nothing and "actual verify hours=H" in nothing
    say(ctx, "repro actual verify hours=1 runs=10")
    say(ctx, "repro actual verify hours=2 runs=20")
    before = counts(ctx), ctx.store.actuals("repro")
    for text, says in (
            ("repro actual verify correct hours=3", "has 2 recorded actuals (#1, #2); name "
             "the one to correct, e.g. `/plan repro actual verify correct #2 hours=H`"),
            ("repro actual verify correct #9 hours=3", "no recorded actual #9; its actuals: "
             "#1, #2"),
            ("repro actual verify correct #1 hours=1 runs=10", "#1 has those values already"),
            ("repro actual verify correct #1 prep=2", "add up to 2 h, more than hours=1"),
            ("repro actual verify correct #1", "needs the fields to change"),
            ("repro actual verify correct #1 hours=", "an actual keeps its hours"),
            ("repro actual verify correct #1 #2 runs=3", "one at a time"),
            ("repro actual verify correct #1 colour=red", "has no `colour`"),
            ("repro actual verify correct #1 runs=0", "runs must be from 1"),
            ("repro actual verify correct #1 hours=1000", "× the verify block's estimate"),
            ("repro actual verify correct #1 hours=1000", "add `confirm` if it really took "
             "that long: `/plan repro actual verify correct #1 hours=1000 confirm`")):
        assert says in say(ctx, text), text
    assert (counts(ctx), ctx.store.actuals("repro")) == before
    assert "hours 1 → 1000" in say(ctx, "repro actual verify correct #1 hours=1000 confirm")
    out = say(ctx, "repro actual verify correct #2 runs=25")
    assert "Corrected verify actual #2 of *repro*: runs 20 → 25." in out
    assert [(a["id"], a["hours"], a["runs"]) for a in ctx.store.actuals("repro")] == [
        (1, 1000.0, 10), (2, 2.0, 25)]


def test_a_slurm_actuals_hours_stay_slurms_but_its_runs_and_note_correct(ctx):
    a_plan(ctx)
    req = ctx.store.add_slurm_actual({"plan": "repro", "block": "verify", "jobs": ["811"],
                                      "runs": None, "note": None, "user": "U1", "channel": "C1"})
    req = ctx.store.lease_slurm_actual("hpc", 60, 2)
    assert ctx.store.finish_slurm_actual(
        req, "done", {}, "", {"plan": "repro", "block": "verify", "hours": 1.5, "parts": {},
                              "runs": None, "note": "Slurm accounting: jobs 811", "user": "U1"},
        [])
    refused = say(ctx, "repro actual verify correct hours=2")
    assert "was read from Slurm's accounting (jobs 811), so its hours are Slurm's" in refused
    assert "Corrected verify actual #1 of *repro*: runs (not set) → 40." in say(
        ctx, "repro actual verify correct runs=40")
    [a] = ctx.store.actuals("repro")
    assert (a["hours"], a["runs"], a["slurm"]) == (1.5, 40, ["811"])


def test_the_history_shows_each_delete_and_each_correction_old_to_new(ctx):
    a_plan(ctx)
    say(ctx, 'repro actual verify hours=0.5 runs=60 note="jobs 811-830"')
    say(ctx, "repro actual compare hours=1")
    say(ctx, "repro actual compare hours=2 retries=0.5")
    say(ctx, "repro actual verify correct hours=0.3 runs=61")
    say(ctx, "repro actual compare delete")
    lines = [x for x in say(ctx, "repro history").splitlines() if x.startswith("• ")]
    assert "<@U1> deleted actual compare #3: hours=2, retries=0.5" in lines[0]
    assert "<@U1> deleted actual compare #2: hours=1" in lines[1]
    assert "<@U1> corrected actual verify #1: hours 0.5 → 0.3, runs 60 → 61" in lines[2]
    assert "note" not in lines[2]  # what did not change is not listed as a change
    assert "added actual compare #3: hours=2, retries=0.5" in lines[3]
