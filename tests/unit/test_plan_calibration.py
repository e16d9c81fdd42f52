"""Calibration from recorded actuals, through `/plan` on a real SQLite store:
pairs recorded, corrected and deleted; scopes kept apart; hidden plans kept out."""
import re

import pytest

from bot import commands
from bot.app.runtime import context
from bot.plans import calibration as cal
from bot.plans import service
from bot.store import Store
from test_planner import report
from test_plans import TODAY, finish, say

# The estimate of `block baseline runs=10` on report(): prep 95 s + runs 20 s + data 120 s.
EST_H = 235 / 3600
SCOPE = "1× NVIDIA H100 80GB HBM3 · llm-infer"
RATIOS = [0.9, 1.1, 1.25, 0.95, 1.0, 1.3, 1.05, 0.85, 1.15, 1.2]


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "c.db")), admins=frozenset({"U1"}))


def past_blocks(ctx, ratios, t, channel="C1", gpu=True):
    """One plan per past block, each with a manual actual of ratio × its estimate."""
    for i, r in enumerate(ratios):
        name = f"past{i}" + ("" if gpu else "-cpu")
        commands.plan(ctx, f"new {name} gpu={'H100' if gpu else 'cpu'}", "U1", channel,
                            TODAY)
        commands.plan(ctx, f"{name} block baseline runs=10 trial={t}", "U1", channel, TODAY)
        commands.plan(ctx, f"{name} actual baseline hours={r * EST_H:.6f}", "U1", channel,
                            TODAY)


def expected(ratios):
    return cal.calibrate([{"estimate": EST_H * 3600, "actual": round(r * EST_H, 6) * 3600}
                          for r in ratios], scope=SCOPE)


def multipliers(text):
    m = re.search(r"within ×([0-9.]+)–×([0-9.]+) of their estimate", text)
    return (float(m.group(1)), float(m.group(2))) if m else None


def test_show_is_uncalibrated_below_the_minimum_and_calibrated_from_it(ctx):
    t = finish(ctx, report())
    say(ctx, "new target gpu=H100")
    say(ctx, f"target block baseline runs=10 trial={t}")
    out = say(ctx, "target show")
    assert f"uncalibrated: 0 of the 9 pairs needed ({SCOPE})" in out
    assert "uncalibrated (0/9)" in out and "n/a: not every block calibrated" in out
    past_blocks(ctx, RATIOS[:8], t)
    assert "uncalibrated: 8 of the 9 pairs needed" in say(ctx, "target show")
    past_blocks(ctx, RATIOS[:9], t)  # the 9th plan is new; the first 8 record again
    out = say(ctx, "target show")
    # one pair per block, however many actuals it has: 9, not 17
    assert f"calibrated on 9 past blocks ({SCOPE})" in out


def test_a_corrected_actual_replaces_and_a_deleted_one_leaves_the_calibration(ctx):
    t = finish(ctx, report())
    past_blocks(ctx, RATIOS[:9], t)
    say(ctx, "new target gpu=H100")
    say(ctx, f"target block baseline runs=10 trial={t}")
    want = expected(RATIOS[:9])
    out = say(ctx, "target show")
    assert multipliers(out) == (round(want["low"], 2), round(want["high"], 2))
    # the calibrated GPU-hours shown are the estimate shown × the multipliers
    shown = service.estimates(ctx, ctx.store.plan("target"))[0][1]["hours"]
    assert f"{float(shown) * want['low']:.4f}–{float(shown) * want['high']:.4f}" in out

    fixed = say(ctx, f"past1 actual baseline correct hours={3.0 * EST_H:.6f}")
    assert "Corrected baseline actual #" in fixed and "hours " in fixed
    assert ctx.store.db["actuals"].count == 9
    want = expected([3.0 if i == 1 else r for i, r in enumerate(RATIOS[:9])])
    assert multipliers(say(ctx, "target show")) == (round(want["low"], 2), round(want["high"], 2))

    assert "Deleted 1 recorded baseline actual(s)" in say(ctx, "past1 actual baseline delete")
    assert "uncalibrated: 8 of the 9 pairs needed" in say(ctx, "target show")
    assert "no recorded baseline actual to delete" in say(ctx, "past1 actual baseline delete")


def test_another_gpu_kind_is_not_mixed_in_and_hidden_plans_do_not_leak(ctx):
    t = finish(ctx, report())
    cpu = finish(ctx, report(gpu=None))
    past_blocks(ctx, RATIOS[:9], cpu, gpu=False)  # 9 CPU blocks: another scope
    past_blocks(ctx, RATIOS[:9], t, channel="CPRIVATE")  # 9 GPU blocks, in another channel
    commands.plan(ctx, "new target gpu=H100", "U2", "C1", TODAY)
    commands.plan(ctx, f"target block baseline runs=10 trial={t}", "U2", "C1", TODAY)
    as_u2 = commands.plan(ctx, "target show", "U2", "C1", TODAY)["text"]
    assert f"uncalibrated: 0 of the 9 pairs needed ({SCOPE})" in as_u2
    record = commands.plan(ctx, "calibration", "U2", "C1", TODAY)["text"]
    assert "CPU (EPYC) · llm-infer" in record and SCOPE not in record
    assert "past0 baseline" not in as_u2
    admin = say(ctx, "target show")  # an admin sees every channel's plans
    assert f"calibrated on 9 past blocks ({SCOPE})" in admin
    assert "past0-cpu" not in admin


def test_review_says_whether_each_actual_fell_inside_the_interval_shown(ctx):
    t = finish(ctx, report())
    past_blocks(ctx, RATIOS[:9], t)
    say(ctx, "new target gpu=H100")
    say(ctx, f"target block baseline runs=10 trial={t}")
    say(ctx, f"target block compare runs=10 trial={t}")
    say(ctx, f"target actual baseline hours={1.0 * EST_H:.6f}")
    say(ctx, f"target actual compare hours={5.0 * EST_H:.6f}")
    out = say(ctx, "target review")
    lines = out.splitlines()
    base = lines[lines.index(next(x for x in lines if x.startswith("• *baseline*"))) + 1]
    comp = lines[lines.index(next(x for x in lines if x.startswith("• *compare*"))) + 1]
    assert base.strip().startswith("inside the calibrated 90% interval ×")
    assert comp.strip().startswith("OUTSIDE the calibrated 90% interval ×")
    # past0 is calibrated on the 8 other past blocks and target's 2: itself left out
    assert "the calibrated 90% interval" in say(ctx, "past0 review")
    # a block of a scope with no pairs (the CPU) is judged by its own interval
    say(ctx, "new lone")
    say(ctx, f"lone block verify runs=10 trial={finish(ctx, report(gpu=None))}")
    say(ctx, f"lone actual verify hours={EST_H:.6f}")
    assert "    inside its uncalibrated 90% interval (0.0648–0.0657 GPU-h)" in say(
        ctx, "lone review")


def test_plan_calibration_keeps_the_teams_score(ctx):
    assert "No actuals recorded yet in every channel's plans" in say(ctx, "calibration")
    t = finish(ctx, report())
    past_blocks(ctx, RATIOS, t)
    slow = finish(ctx, report(mean=40.0, count=10), tags=("past9", "baseline"))
    out = say(ctx, "calibration")
    assert f"*{SCOPE}*: 10 past blocks;" in out
    # the first 9 were judged by their own narrow intervals (one trial's consecutive
    # repeats: only ratio 1.0 fell inside), the 10th by the calibration of the 9 before
    assert "1 of 10 intervals held the actual; median absolute error 12%" in out
    assert "worst miss: past9 baseline, actual ×3.82 its estimate (OUTSIDE interval)" in out
    assert "cause: slower runs (+0.184 GPU-h)" in out
    assert f"contention not measured on {t}, {slow}" in out
    assert "now: calibrated on 10 past blocks" in out
    assert "median absolute error" in out


@pytest.mark.parametrize("text, says", [
    ("calibration now", "`/plan calibration` takes nothing more"),
    ("new calibration", "`calibration` needs more words here"),
    ("repro actual baseline delete hours=2", "takes nothing more"),
    ("repro actual baseline correct slurm=811", "`correct` with `slurm=`"),
])
def test_bad_calibration_input_is_answered(ctx, text, says):
    say(ctx, "new repro")
    out = say(ctx, text)
    assert out.startswith(":x:") and says in out


def test_a_contended_trial_is_named_as_the_cause_and_exports_carry_the_calibration(ctx):
    t = finish(ctx, report())
    past_blocks(ctx, RATIOS[:9], t)
    busy = dict(report(mean=20.0, count=10), contention={
        "flagged": True, "summary": "busy machine: other processes used 61% of the CPU during "
        "the run phase", "cpus": 2, "threshold": {}, "phases": {}, "gpu": None, "method": {}})
    say(ctx, "new target gpu=H100")
    say(ctx, f"target block baseline runs=10 trial={t}")
    noisy = finish(ctx, busy, tags=("target", "baseline"))
    out = say(ctx, "calibration")
    assert "worst miss: target baseline" in out
    assert f"cause: contention on {noisy}; slower runs" in out
    say(ctx, "target export")
    rows = list(ctx.store.db["outbox"].rows)[-3:]  # csv, md, json
    csv_text, md = rows[0]["content"], rows[1]["content"]
    assert "calibrated_low,calibrated_high,calibration," in csv_text.splitlines()[0]
    assert "calibrated on 9 past blocks" in csv_text and "calibrated 90%" in md


def test_a_slurm_actual_asked_twice_counts_once_and_can_be_deleted(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t}")

    def from_slurm(hours):
        req = ctx.store.add_slurm_actual({"plan": "repro", "block": "baseline",
                                          "jobs": ["811"], "user": "U1", "channel": "C1"})
        req = ctx.store.lease_slurm_actual("hpc", 60, 2)
        assert ctx.store.finish_slurm_actual(
            req, "done", {}, "ok", {"plan": "repro", "block": "baseline", "hours": hours,
                                    "parts": {}, "runs": None, "user": "U1",
                                    "note": "Slurm accounting: jobs 811"}, [])
    from_slurm(0.5)
    from_slurm(0.6)  # the same job asked for again: the latest counts, once
    row = service.review_rows(ctx, ctx.store.plan("repro"),
                              service.estimates(ctx, ctx.store.plan("repro")))[0]
    assert row["actual"] == pytest.approx(0.6)
    assert "Deleted 2 recorded baseline actual(s)" in say(ctx, "repro actual baseline delete")
    assert "no actual yet" in say(ctx, "repro review")
    assert [r["actual"] for r in ctx.store.db["slurm_actuals"].rows] == [None, None]


def test_an_actual_on_another_device_is_shown_apart_and_never_enters_calibration(ctx):
    """Issue #31: a CPU trial's estimate against H100 hours typed as actuals was
    compared (+48,444%) and put into the CPU group of `/plan calibration`."""
    cpu = finish(ctx, report(gpu=None))
    for i in range(9):
        say(ctx, f"new h{i} gpu=H100")
        say(ctx, f"h{i} block baseline runs=10 trial={cpu}")
        say(ctx, f"h{i} actual baseline hours={30 * EST_H:.6f}")
    out = say(ctx, "h0 review")
    assert "%" not in out and "inside" not in out and "OUTSIDE" not in out
    assert ("kept apart, actual 1.96 GPU-h on H100-80GB from manual #1, not compared: the "
            f"estimate is a time on CPU (EPYC) (from {cpu})") in out
    assert service.calibration_pairs(ctx, "U1", "C1") == []
    calib = say(ctx, "calibration")
    assert "CPU (EPYC)" not in calib and "No actuals recorded" not in calib
    assert calib.startswith("No actual on the same device as its estimate yet")
    assert ("Kept out: 9 block(s) whose actual is on another device than the trials their "
            "estimate rests on (h0 baseline, h1 baseline,") in calib
    # With no target, a tagged trial on another device than the estimate's is kept apart.
    say(ctx, "new free")
    say(ctx, f"free block baseline runs=10 trial={cpu}")
    gpu = finish(ctx, report(), tags=("free", "baseline"))
    out = say(ctx, "free review")
    assert (f"kept apart, {gpu}: another device: ran on 1× NVIDIA H100 80GB HBM3, the "
            "estimate's trials on CPU (EPYC)") in out
    assert service.calibration_pairs(ctx, "U1", "C1") == []
    # The same device: compared, and a pair.
    same = finish(ctx, report(gpu=None), tags=("free", "baseline"))
    out = say(ctx, "free review")
    assert f"from {same}" in out and "inside its uncalibrated 90% interval" in out
    assert [p["scope"] for p in service.calibration_pairs(ctx, "U1", "C1")] == [
        "CPU (EPYC) · llm-infer"]


def test_a_handoff_adds_its_hours_once_and_keeps_the_intervals_width(ctx):
    """Issue #31: handoff=30min narrowed the review's interval (0.00155–0.00463
    became 0.00308–0.00310) as if it were a multiplier, flipping the verdict."""
    t = finish(ctx, report())
    say(ctx, "new ho gpu=H100")
    say(ctx, f"ho block baseline runs=10 trial={t}")
    say(ctx, f"ho actual baseline hours={EST_H + 0.0003:.6f}")
    before = say(ctx, "ho review")
    assert "    inside its uncalibrated 90% interval (0.0648–0.0657 GPU-h)" in before
    say(ctx, "ho set handoff=30min")
    est = service.estimates(ctx, ctx.store.plan("ho"))[0][1]
    assert float(est["hours"]) == pytest.approx(EST_H + 0.5)  # added once
    assert "    inside its uncalibrated 90% interval (0.0648–0.0657 GPU-h)" in say(
        ctx, "ho review")  # idle left out on both sides: the same interval
    say(ctx, f"ho actual baseline correct hours={EST_H + 0.5003:.6f} idle=0.5")
    assert "    inside its uncalibrated 90% interval (0.565–0.566 GPU-h)" in say(ctx, "ho review")
    pair = service.calibration_pairs(ctx, "U1", "C1")[0]
    lo, hi = (m * pair["estimate"] / 3600 for m in pair["interval"])
    assert hi - lo == pytest.approx(float(est["interval"][1] - est["interval"][0]))
