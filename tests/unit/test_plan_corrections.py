"""Correcting a plan (issue 19, "Plans you can correct"), in-process through
`/plan` and `/trial` on a real SQLite store: facts unset, blocks corrected
and deleted, actuals with their running total, prices by confirmation date,
the history of every change, and tagged trials kept apart when they ran off
the target GPU or off the lock."""
import datetime as dt
import re

import pytest

from bot import commands
from bot.app.runtime import context
from bot.plans import service
from bot.store import Store
from test_planner import report
from test_plans import counts, finish

TODAY = dt.date(2026, 12, 1)
CPU_BOX = {"gpus": [], "gpu_memory": [], "device": "cpu", "cpus": 4}


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "c.db")), admins=frozenset({"U1"}))


def say(ctx, text, user="U1"):
    return commands.plan(ctx, text, user, "C1", TODAY)["text"]


def plan_with_block(ctx, gpu="H100", **block):
    t = finish(ctx, report())
    say(ctx, f"new repro gpu={gpu}")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    return t


def test_actuals_show_their_running_total_and_one_is_deleted_by_number(ctx):
    plan_with_block(ctx)
    first = say(ctx, "repro actual baseline hours=1")
    assert "The baseline block now has 1 recorded actual(s), 1 GPU-h in all" in first
    assert "#1 1 GPU-h (manual; by <@U1>" in first
    out = say(ctx, 'repro actual baseline hours=2 note="night run"')
    assert "2 recorded actual(s), 3 GPU-h in all" in out
    assert "#1 1 GPU-h (manual; by <@U1> on" in out and "#2 2 GPU-h (manual: night run;" in out
    tagged = finish(ctx, report(), tags=("repro", "baseline"))
    assert f"tagged trials ({tagged}) add their measured time" in say(
        ctx, "repro actual baseline hours=0.5")
    before = counts(ctx)
    refused = say(ctx, "repro actual baseline delete #99")
    assert "has no recorded actual #99; its actuals: #1, #2, #3" in refused
    assert counts(ctx) == before
    out = say(ctx, "repro actual baseline delete #1")
    assert "Deleted 1 recorded baseline actual(s)" in out and "2.5 GPU-h in all" in out
    assert [a["id"] for a in ctx.store.actuals("repro")] == [2, 3]
    review = say(ctx, "repro review")
    assert "manual #2 (night run), manual #3" in review and "manual #1" not in review


def test_a_checklist_item_is_unset_with_key_equals_nothing_and_the_lock_still_guards(ctx):
    plan_with_block(ctx)
    assert "set paper=arXiv 2405.01234v2" in say(ctx, 'repro set paper="arXiv 2405.01234v2"')
    out = say(ctx, "repro set paper=")
    assert "unset paper (was arXiv 2405.01234v2)" in out and "Open checklist items: paper" in out
    assert "paper" not in ctx.store.plan("repro")["facts"]
    assert "has no paper set, so there is nothing to unset" in say(ctx, "repro set paper=")
    say(ctx, "repro set inputs=4x512")
    say(ctx, "repro lock")
    before = counts(ctx)
    out = say(ctx, "repro set inputs=")
    assert out.startswith(":x:") and "`inputs` is fixed while plan repro is locked (since " \
        "2026-12-01); `/plan repro unlock` first" in out
    assert ctx.store.plan("repro")["facts"]["inputs"] == "4x512" and counts(ctx) == before
    assert "set scope=table 2 (was" not in say(ctx, 'repro set scope="table 2"')  # not locked
    assert "(was table 2)" in say(ctx, 'repro set scope="table 3"')


def test_a_block_is_corrected_field_by_field_and_deleted_unless_locked(ctx):
    t = plan_with_block(ctx)
    hours = service.estimates(ctx, ctx.store.plan("repro"))[0][1]["hours"]
    out = say(ctx, 'repro block baseline correct runs=30 note="prompts from set B"')
    assert "Corrected the baseline block of *repro*: runs 10 → 30, note (not set) → prompts " \
        "from set B" in out and "baseline block replaced" in out
    block = ctx.store.block("repro", "baseline")
    assert block["runs"] == 30 and block["trials"] == [int(t[1:])]
    assert service.estimates(ctx, ctx.store.plan("repro"))[0][1]["hours"] > hours
    before = counts(ctx)
    for text, says in (("repro block compare correct runs=3", "has no compare block to correct"),
                       ("repro block baseline correct runs=0", "runs must be from 1"),
                       ("repro block baseline correct", "needs the fields to change"),
                       ("repro block baseline correct colour=red", "has no `colour`"),
                       ("repro block baseline delete now", "takes nothing more")):
        assert says in say(ctx, text)
    assert counts(ctx) == before and ctx.store.block("repro", "baseline")["runs"] == 30
    say(ctx, f"repro block compare runs=5 trial={t}")
    say(ctx, "repro lock")
    refused = say(ctx, "repro block baseline delete")
    assert "The baseline block is fixed while plan repro is locked (since 2026-12-01); " \
        "`/plan repro unlock` first" in refused and ctx.store.block("repro", "baseline")
    say(ctx, "repro unlock")
    say(ctx, "repro actual compare hours=1")
    out = say(ctx, "repro block compare delete")
    assert "the compare block is deleted" in out and "Its 1 recorded actual(s)" in out
    assert [b["kind"] for b in ctx.store.blocks("repro")] == ["baseline"]


def test_the_price_confirmed_latest_applies_not_the_one_entered_last(ctx):
    plan_with_block(ctx)
    say(ctx, "price H100 2.00/h source=quote-a date=2026-11-30")
    say(ctx, "price H100 9.00/h source=quote-b date=2026-11-01 confirm")  # older, later
    show = say(ctx, "repro show")
    assert ("cost at H100-80GB rent 2 per GPU-hour (P1, source: quote-a, confirmed 2026-11-30)"
            in show)
    listed = say(ctx, "prices all")
    assert "P1 ✓ H100-80GB rent 2 per GPU-hour" in listed
    assert "P2 H100-80GB rent 9 per GPU-hour" in listed
    # rule 3's break-even cites the rate it used
    say(ctx, "price H100 buy=30000 source=q date=2026-11-20")
    say(ctx, "price H100 power=0.7kW source=q date=2026-11-20")
    say(ctx, "price electricity 0.12/kWh source=q date=2026-11-20")
    say(ctx, "repro set pattern=steady period=6mo utilization=0.6 needs_cuda=no")
    say(ctx, "repro lock")
    advice = say(ctx, "repro advise")
    assert "H100-80GB rent 2 per GPU-hour (P1, source: quote-a, confirmed 2026-11-30)" in advice
    say(ctx, "repro actual baseline hours=3")
    review = say(ctx, "repro review")  # 0.0653 and 3 GPU-h × 2 per GPU-hour
    assert "estimated 0.0653, actual 3.00 GPU-h" in review
    assert "cost at P1: estimated 0.13, actual 6.00" in review
    assert "Costs at H100-80GB rent 2 per GPU-hour (P1, source: quote-a, confirmed 2026-11-30)." \
        in review
    # a correction of the date reorders; a delete leaves the other figure
    out = say(ctx, "price correct P2 date=2026-12-01")
    assert "P2 corrected: H100-80GB rent 9 per GPU-hour (P2, source: quote-b, confirmed " \
        "2026-12-01)" in out and "applies now: P2" in out
    out = say(ctx, "price delete P2")
    assert "P2 deleted" in out and "applies now: P1, H100-80GB rent 2 per GPU-hour" in out
    before = counts(ctx)
    for text, says in (("price correct P1 buy=5", "a correction keeps its kind"),
                       ("price correct P1 2.5/h date=2027-01-01", "is in the future"),
                       ("price delete P77", "There is no price P77"),
                       ("price correct P1 source=quote-a", "has those values already"),
                       ("price correct X1 2/h", "is not a price id")):
        assert says in say(ctx, text)
    assert ":lock:" in say(ctx, "price delete P1", user="U2")  # prices are an admin's
    assert counts(ctx) == before and ctx.store.price(1)["value"] == 2.0


def test_every_change_is_in_the_history_newest_first_and_in_the_export(ctx):
    plan_with_block(ctx)
    say(ctx, "repro set paper=v1")
    say(ctx, "repro set paper=v2")
    say(ctx, "repro actual baseline hours=2")
    say(ctx, "price H100 2.49/h source=q date=2026-11-30")
    say(ctx, "price A100 1.00/h source=q date=2026-11-30")  # a price this plan does not read
    out = say(ctx, "repro history")
    lines = [x for x in out.splitlines() if x.startswith("• ")]
    assert "<@U1> added price P1 (shared price list): item=H100" in lines[0]
    assert "added actual baseline #1: hours=2" in lines[1]
    assert "set fact paper: v1 → v2" in lines[2] and "set fact paper: (not set) → v1" in lines[3]
    assert "added block baseline: runs=10" in lines[4] and "started plan" in lines[5]
    assert "A100" not in out
    for n in range(25):
        say(ctx, f"repro set scope=s{n}")
    out = say(ctx, "repro history")
    assert out.count("\n• ") == 20 and "… 11 older" in out and "s24" in out.splitlines()[1]
    say(ctx, "repro export")
    md = [r for r in ctx.store.db["outbox"].rows if r["file"] == "repro-plan.md"][0]["content"]
    assert "## History" in md and md.count("set fact scope") == 25 and "started plan" in md
    assert "cost at H100-80GB rent 2.49 per GPU-hour (P1, source: q, confirmed 2026-11-30)" in md


def test_a_tagged_trial_runs_anywhere_with_gpu_any_and_is_kept_apart_as_off_target(ctx):
    ctx.store.upsert_worker("cpu-box", CPU_BOX)
    plan_with_block(ctx)
    say(ctx, "repro block compare runs=10 trial=T1")

    def trial(text):
        return commands.trial(ctx, text, "U1", "C1")

    out, job = trial("llm-infer plan=repro block=compare")
    assert job is None and "No worker matches `gpu=H100-80GB` (the plan's target GPU" in out["text"]
    assert "`gpu=any` to run on any worker" in out["text"]
    for bad in ("gpu=cpu", "gpu=", "gpu=any gpu=H100"):
        out, job = trial(f"llm-infer plan=repro block=compare {bad}")
        assert job is None and ("`gpu=any` runs on any worker" in out["text"]
                                or "given twice" in out["text"]), bad
    out, job = trial("llm-infer plan=repro block=compare gpu=any")
    assert job and f"Queued as *{job['trial']}*" in out["text"]
    assert "gpu=any: this trial may run on any worker, off plan repro's target H100" in out["text"]
    assert "left out of its actual and its cost" in out["text"]
    leased = ctx.store.lease_next("cpu-box", 60)
    ctx.queue.finish(job["id"], "cpu-box", leased["lease"], report(gpu=None))
    review = say(ctx, "repro review")
    assert "• compare: no comparable actual yet" in review
    assert (f"kept apart, {job['trial']}: off target: ran on CPU (EPYC), not H100-80GB "
            "(queued with gpu=any)") in review
    show = say(ctx, "repro show")
    assert f"{job['trial']} (compare): done — off target: ran on CPU (EPYC)" in show
    assert "kept out of the actual" in show


def test_a_trial_off_the_lock_is_warned_of_when_queued_and_kept_out_of_the_actual(ctx):
    plan_with_block(ctx)  # the block's trial ran at batch=4 prompt=512
    say(ctx, "repro lock")
    out, job = commands.trial(ctx, "llm-infer batch=2 prompt=512 plan=repro block=baseline",
                                    "U1", "C1")
    assert job and "Not comparable with plan repro's lock of 2026-12-01 (batch 4 → 2)" in out[
        "text"] and "Run it at the locked config to count it" in out["text"]
    out, same = commands.trial(ctx, "llm-infer batch=4 prompt=512 plan=repro "
                                     "block=baseline", "U1", "C1")
    assert same and "Not comparable" not in out["text"]
    for j, r in ((job, report(batch=2, mean=9.0)), (same, report(mean=2.0))):
        leased = ctx.store.lease_next("w1", 60)
        assert leased["id"] == j["id"]
        ctx.queue.finish(j["id"], "w1", leased["lease"], r)
    review = say(ctx, "repro review")
    assert f"from {same['trial']}\n" in review  # the batch-2 trial is not pooled in
    assert (f"kept apart, {job['trial']}: not comparable with the locked plan: batch 4 → 2"
            in review)
    row = service.review_rows(ctx, ctx.store.plan("repro"),
                              service.estimates(ctx, ctx.store.plan("repro")))[0]
    assert row["sources"] == [same["trial"]]


def test_an_actual_a_thousand_times_its_estimate_is_refused_until_confirmed(ctx):
    plan_with_block(ctx)
    shown = say(ctx, "repro show")
    estimate = float(re.search(r"^baseline\s+\S+\s+(\S+)\s", shown, re.M).group(1))
    big = f"{estimate * 5000:.4g}"
    out = say(ctx, f"repro actual baseline hours={big}")
    assert ":x:" in out and "× the baseline block's estimate" in out
    assert f"`/plan repro actual baseline hours={big} confirm`" in out
    assert not ctx.store.actuals("repro")
    assert "Recorded for *repro* baseline" in say(ctx, f"repro actual baseline hours={big} "
                                                       "confirm")
    assert [a["hours"] for a in ctx.store.actuals("repro")] == [float(big)]
    small = f"{estimate * 50:.4g}"  # far off, but plausible: recorded as given
    assert "Recorded" in say(ctx, f"repro actual baseline hours={small}")
