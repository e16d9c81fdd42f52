"""`/plan` through its handler on a real SQLite store, with trials finished
through the queue as a worker finishes them."""
import datetime as dt

import pytest

from bot import commands
from bot.app.runtime import context
from bot.plans import service, views
from bot.store import Store
from bot.trials import command as trial_command
from bot.trials import tags
from test_planner import report
from worker.spec import parse

TODAY = dt.date(2026, 12, 1)


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "p.db")), admins=frozenset({"U1"}))


def finish(ctx, r, tags=None):
    """Queue a trial, lease it and report `r` as a worker would."""
    job = ctx.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1",
                       dict(zip(("plan", "block"), tags)) if tags else None)
    leased = ctx.store.lease_next("w1", 60)
    ctx.queue.finish(job["id"], "w1", leased["lease"], dict(r))
    return f"T{job['id']}"


def say(ctx, text):
    return commands.plan(ctx, text, "U1", "C1", TODAY)["text"]


def counts(ctx):
    db = ctx.store.db
    return {t: db[t].count for t in ("plans", "blocks", "prices", "actuals", "outbox")}


def test_a_plan_from_new_to_show(ctx):
    t = finish(ctx, report())
    assert "started" in say(ctx, "new repro gpu=H100 platform=cuda")
    out = say(ctx, f'repro block baseline runs=200 trial={t} note="which prompts?"')
    assert "baseline block added" in out and "prep" in out and ":warning:" not in out
    out = say(ctx, "repro show")
    assert "baseline" in out and "total" in out
    assert "cost unconfirmed: no confirmed price for H100" in out
    assert "which prompts?" in out and "Open checklist items" in out and "paper" in out


def test_show_gives_the_filled_checklist_as_the_record_beside_the_open_items(ctx):
    """Issue #33 item 6: the values a team records (paper, repo, inputs...) are
    shown by `show`, not only by the export; in Block Kit as fields, at most 10
    a section, each value cut to RECORD_SHOWN characters."""
    t = finish(ctx, report())
    say(ctx, 'new repro gpu=H100 platform=cuda paper="AdaKV, arXiv 2405.01234v2"')
    say(ctx, f"repro block baseline runs=20 trial={t}")
    say(ctx, 'repro set repo="github.com/x/adakv@abc123" inputs="batch 8, prompt 4096"')
    reply = commands.plan(ctx, "repro show", "U1", "C1", TODAY)
    out = reply["text"]
    record = ("*Record* (5 of 15 checklist items filled):\n• paper: AdaKV, arXiv 2405.01234v2\n"
              "• repo: github.com/x/adakv@abc123\n• inputs: batch 8, prompt 4096\n"
              "• gpu: H100-80GB\n• platform: cuda\n*Open checklist items*: baseline, configs, "
              "command, framework, model, access, licence, data, scope, excluded")
    assert record in out
    [kept] = [b for b in reply["blocks"] if b.get("fields")]
    assert kept["text"]["text"] == "*Record* (5 of 15 checklist items filled):"
    assert [f["text"] for f in kept["fields"]][:2] == [
        "*paper*\nAdaKV, arXiv 2405.01234v2", "*repo*\ngithub.com/x/adakv@abc123"]
    # every item filled, one of 500 characters: two sections of fields, the long value cut
    long = "x" * 300 + " " + "y" * 199
    say(ctx, "repro set " + " ".join(f'{k}="{k} value"' for k in (
        "baseline", "configs", "command", "framework", "model", "access", "licence", "data",
        "excluded")) + f' scope="{long}"')
    reply = commands.plan(ctx, "repro show", "U1", "C1", TODAY)
    assert "*Open checklist items*: none" in reply["text"]
    assert ("*Record* (15 of 15 checklist items filled; a value cut short here is whole in "
            "`/plan repro export`):") in reply["text"]
    assert "• scope: " + "x" * 300 not in reply["text"] and "• scope: …" not in reply["text"]
    sections = [b for b in reply["blocks"] if b.get("fields")]
    assert [len(b["fields"]) for b in sections] == [10, 5]
    texts = [f["text"] for b in sections for f in b["fields"]]
    assert all(len(x) <= views.RECORD_SHOWN + 20 for x in texts) and "*scope*\nx" in texts[11]
    assert all(len(b["text"]["text"]) <= 3000 for b in reply["blocks"] if b.get("text"))
    assert len(reply["blocks"]) <= 50


def test_a_plan_with_nothing_filled_says_how_to_record(ctx):
    say(ctx, "new bare")
    out = say(ctx, "bare show")
    assert "*Record*: no checklist item is filled yet (`/plan bare set paper=... repo=...`)" \
        in out and "*Open checklist items*: paper, baseline" in out


def test_cost_only_from_a_confirmed_price_and_stale_prices_are_flagged(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=100 trial={t}")
    assert "Recorded" in say(ctx, "price H100 $2.50/h source=https://x.example/q date=2026-11-30")
    out = say(ctx, "repro show")
    assert "cost at H100-80GB rent $2.5 per GPU-hour" in out and "unconfirmed" not in out
    # An older quote entered later does not replace it; once it is deleted, the old one applies.
    say(ctx, "price H100 2.50/h source=quote date=2026-09-01")
    assert "STALE" not in say(ctx, "repro show")
    say(ctx, "price delete P1")
    assert "STALE: 91 days old" in say(ctx, "repro show")


@pytest.mark.parametrize("text, says", [
    ("nope show", "There is no plan `nope`"),
    ("repro block warmup runs=3 trial=T1", "`warmup` is not a block kind"),
    ("repro block baseline runs=3 trial=T99", "There is no trial T99"),
    ("repro block baseline runs=0 trial=T1", "runs must be from 1"),
    ("repro block baseline runs=-2 trial=T1", "runs cannot be negative; it is a count from 1"),
    ("repro block baseline trial=T1", "needs runs=N"),
    ("repro block baseline runs=3", "give trial=T12"),
    ("repro block baseline runs=3 trial=T2", "T2 failed"),
    ("price H100 2.49/h date=2026-11-01", "needs source="),
    ("price H100 2.49/h source=quote", "needs date="),
    ("price H100 2.49/h source=quote date=2026-12-25", "is in the future"),
    ("price H100 abc/h source=quote date=2026-11-01", "rate must be a number"),
    ("price H100 2.49/h source=quote date=01/11/2026", "YYYY-MM-DD"),
    ("repro set platform=windows", "platform must be one of"),
    ("repro set colour=blue", "has no `colour`"),
    ("repro actual baseline hours=2", "has no baseline block"),
    ("repro frobnicate", "is not something a plan does"),
    ("new Bad!Name", "is not a plan name"),
    ("price H100 buy= source=quote date=2026-11-01", "buy must be a number"),
    ("price H100 nan/h source=quote date=2026-11-01", "must be a finite number"),
    ("price H100 2/h source=quote date=20261101", "YYYY-MM-DD"),
])
def test_bad_input_is_answered_and_stores_nothing(ctx, text, says):
    finish(ctx, report())
    failed = dict(report(), status="failed",
                  error={"class": "oom", "message": "CUDA out of memory", "phase": "run"})
    finish(ctx, failed)
    say(ctx, "new repro")
    before = counts(ctx)
    out = say(ctx, text)
    assert out.startswith(":x:") and says in out and "Nothing was stored" in out
    assert counts(ctx) == before


def test_a_trial_on_another_gpu_kind_is_accepted_with_a_warning(ctx):
    t = finish(ctx, report(gpu=None))
    say(ctx, "new repro gpu=H100")
    out = say(ctx, f"repro block baseline runs=10 trial={t}")
    assert "block added" in out and ":warning:" in out and "not the plan's target H100" in out
    assert ctx.store.db["blocks"].count == 1


def test_lock_fixes_inputs_and_marks_a_different_config_not_comparable(ctx):
    t1 = finish(ctx, report())
    t2 = finish(ctx, report(batch=8))
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t1}")
    assert "locked" in say(ctx, "repro lock")
    assert "is fixed while plan repro is locked" in say(ctx, "repro set inputs=4x512")
    out = say(ctx, f"repro block baseline runs=10 trial={t2}")
    assert "NOT COMPARABLE with the locked plan: batch 4 → 8" in out
    finish(ctx, report(batch=8), tags=("repro", "baseline"))
    assert "(baseline): done — NOT COMPARABLE with the locked plan: batch 4 → 8" in say(
        ctx, "repro show")
    assert "unlocked" in say(ctx, "repro unlock")
    assert "set inputs=4x512" in say(ctx, "repro set inputs=4x512")


def test_export_queues_csv_markdown_and_json_files(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    before = ctx.store.db["outbox"].count
    assert "Exporting" in say(ctx, "repro export")
    rows = list(ctx.store.db["outbox"].rows)[before:]
    assert [r["file"] for r in rows] == ["repro-plan.csv", "repro-plan.md", "repro-plan.json"]
    csv_text, md = rows[0]["content"], rows[1]["content"]
    assert csv_text.startswith("plan,block,runs") and "baseline" in csv_text
    assert md.startswith("# Plan repro") and "| baseline |" in md


def test_review_splits_the_difference_from_tagged_trials_and_manual_actuals(ctx):
    t = finish(ctx, report(mean=2.0, count=10))
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    say(ctx, f"repro block compare runs=10 trial={t}")
    # the real baseline: slower runs, as a tagged trial
    finish(ctx, report(mean=3.0, count=10), tags=("repro", "baseline"))
    say(ctx, "repro actual compare hours=0.5 prep=0.1 runs=10 note=\"from the cluster\"")
    out = say(ctx, "repro review")
    # 10 runs × 1 s more: 0.00278 h, to three significant digits
    assert "*baseline*" in out and "slower runs: +0.00278 GPU-h" in out
    assert "*compare*" in out and "from manual #1 (from the cluster)" in out
    assert "memory, same method" in out


def test_advise_names_the_rule_and_its_facts(ctx):
    t = finish(ctx, report(gpu=None))
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    out = say(ctx, "repro advise")
    assert "Rule 1 fired" in out and "CPU (EPYC)" in out
    say(ctx, "new other")
    assert "cannot be decided" in say(ctx, "other advise") and "set gpu=" in say(
        ctx, "other advise")


def test_trial_tags_are_taken_out_and_checked(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    words, tagged = tags.take(ctx, ["llm-infer", "batch=2", "plan=repro", "block=baseline"],
                              "U1", "C1")
    assert words == ["llm-infer", "batch=2"] and tagged == {"plan": "repro", "block": "baseline"}
    assert tags.take(ctx, ["llm-infer"], "U1", "C1") == (["llm-infer"], None)
    for bad, says in ((["plan=repro"], "both plan=NAME and block=KIND"),
                      (["plan=nope", "block=baseline"], "no plan `nope`"),
                      (["plan=Bad!", "block=baseline"], "`Bad!` is not a plan name"),
                      (["plan=new", "block=baseline"], "one of `/plan`'s own words"),
                      (["plan=repro", "block=verify"], "has no such block")):
        with pytest.raises(tags.TagError, match=says):
            tags.take(ctx, ["llm-infer", *bad], "U1", "C1")


def test_a_scale_block_rests_on_a_sweeps_time_fit(ctx):
    specs = [parse(["llm-infer", f"batch={b}"]) for b in (1, 2, 4)]
    jobs = ctx.queue.submit_sweep(specs, ["llm-infer"] * 3, "U1", "C1")
    for job, b in zip(jobs, (1, 2, 4)):
        leased = ctx.store.lease_next("w1", 60)
        r = report(mean=0.1 + 0.05 * b, sd=0.001, batch=b, prompt=64, gen=16)
        r["params"] = {**specs[0].params, **r["params"]}
        ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    say(ctx, "new repro gpu=H100")
    out = say(ctx, f"repro block scale runs=10 sweep=S{jobs[0]['id']} batch=16")
    assert "scale block added" in out
    assert "predicted for batch=16 (at the sweep's prompt=64, gen=16) by the time fit" in out
    assert "not measured at this config" in out
    est = service.estimates(ctx, ctx.store.plan("repro"))[0][1]
    assert est["per_run"] == pytest.approx(0.1 + 0.05 * 16, rel=1e-3)
    assert "cannot predict" in say(ctx, f"repro block verify runs=10 sweep=S{jobs[0]['id']} "
                                          "prompt=4096")


def test_a_scale_blocks_interval_holds_the_fitted_forms_error(ctx):
    """The block's per-run error is the one `/trial fit` shows: the points'
    spread and the form's leave-one-out error, not the residuals' alone."""
    from bot.fits import ols, scaling
    from bot.fits.sweep import fit_sweep, predict_seconds
    s = finish_sweep(ctx, [0.15, 0.20, 0.30, 0.50], contention={})  # curved: 2 terms miss it
    say(ctx, "new repro gpu=H100")
    block = {"sweep": s, "predict": {"batch": 16}}
    _, out = service._sweep_prediction(ctx, block)
    fit = fit_sweep([j["report"] for j in ctx.store.sweep_jobs(s)])
    params = {**ctx.store.sweep_jobs(s)[0]["report"]["params"], "batch": 16}
    band = scaling.band(fit, "time", params)
    _, residual_se, dof = predict_seconds(fit, params)
    assert band.form > 0 and out["dof"] == dof
    assert out["se"] * ols.t_quantile(dof) == pytest.approx(band.half)
    assert out["se"] > residual_se


BUSY = {"flagged": True, "summary": "busy machine: other processes used 61% of the CPU"}


def finish_sweep(ctx, times, contention=None, spread=None):
    """A batch=1,2,4,8 sweep finished with these mean times; contention and
    spread per trial index (None: the report has no such field)."""
    batches = (1, 2, 4, 8)[:len(times)]
    specs = [parse(["llm-infer", f"batch={b}"]) for b in batches]
    jobs = ctx.queue.submit_sweep(specs, ["llm-infer"] * len(specs), "U1", "C1")
    for i, (job, b, t) in enumerate(zip(jobs, batches, times)):
        leased = ctx.store.lease_next("w1", 60)
        r = report(mean=t, sd=0.001, batch=b, prompt=64, gen=16)
        r["params"] = {**specs[0].params, **r["params"]}
        if contention is not None:
            r["contention"] = contention.get(i, {"flagged": False, "summary": None})
        if spread and i in spread:
            r["stability"] = {"count": 10, "iqr_over_median": spread[i], "threshold": 0.05,
                              "stable": spread[i] < 0.05, "stopped_by": "time cap"}
        ctx.queue.finish(job["id"], "w1", leased["lease"], r)
    return jobs[0]["id"]


def test_a_block_on_a_noisy_sweep_is_refused_for_the_noise_not_the_distance(ctx):
    s = finish_sweep(ctx, [0.10, 0.20, 1.50, 0.42], contention={2: BUSY}, spread={2: 0.4})
    say(ctx, "new repro gpu=H100")
    out = say(ctx, f"repro block scale runs=10 sweep=S{s} batch=16")
    assert f"Sweep S{s}'s time fit is unusable: held-out error" in out
    assert f"noisy points: T{s + 2} UNSTABLE (IQR/median 40.0%), T{s + 2} contended" in out
    assert f"re-run T{s + 2} on a quiet machine" in out and "too far" not in out
    assert counts(ctx)["blocks"] == 0


def test_a_negative_prediction_far_out_is_refused_as_extrapolation(ctx):
    s = finish_sweep(ctx, [1.00, 0.99, 0.98, 0.96], contention={})
    say(ctx, "new repro gpu=H100")
    out = say(ctx, f"repro block scale runs=10 sweep=S{s} batch=4096")
    assert "unusable: predicts -" in out and "and a time is positive" in out
    assert "512× the largest measured batch 8" in out and "sweep closer: `batch=181,4096`" in out
    assert counts(ctx)["blocks"] == 0
    assert "scale block added" in say(ctx, f"repro block scale runs=10 sweep=S{s} batch=8")


def test_a_block_on_marked_sweep_points_carries_the_marks(ctx):
    s = finish_sweep(ctx, [0.15, 0.20, 0.30, 0.50], contention={}, spread={1: 0.2})
    say(ctx, "new repro gpu=H100")
    out = say(ctx, f"repro block scale runs=10 sweep=S{s} batch=16")
    assert "scale block added" in out
    assert f"rests on marked sweep points: T{s + 1} UNSTABLE (IQR/median 20.0%)" in out
    assert "contention not measured" not in out
    old = finish_sweep(ctx, [0.15, 0.20, 0.30])  # reports from before the probe
    out = say(ctx, f"repro block verify runs=10 sweep=S{old} batch=4")
    assert f"contention not measured for T{old}, T{old + 1}, T{old + 2}" in out


def test_prices_and_costs_add_up_and_names_are_one_gpu(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    for kind in ("baseline", "compare", "verify"):
        say(ctx, f"repro block {kind} runs=13 trial={t}")
    say(ctx, "price h100 1.00/h source=old date=2026-11-01")
    say(ctx, "price H100 2.49/h source=new date=2026-11-30")
    assert [p["value"] for p in ctx.store.prices()] == [2.49]  # one H100, the latest
    plan = ctx.store.plan("repro")
    ests = service.estimates(ctx, plan)
    from bot.plans import views as planview
    cells = planview.costs(plan, ests, ctx.store.prices(), TODAY)
    money = [float(c) for c in cells]
    # The total is the cost of the unrounded total hours, rounded to the cent once
    # (docs/commands.md, "Figures"): within half a cent per block of the column's sum.
    exact = sum(float(e["hours"]) for _, e, _ in ests) * 2.49
    assert money[-1] == pytest.approx(round(exact, 2))
    assert abs(money[-1] - sum(money[:-1])) <= 0.005 * len(ests) + 1e-9


def test_off_target_blocks_get_no_money_and_a_replaced_block_keeps_its_place(ctx):
    on, off = finish(ctx, report()), finish(ctx, report(gpu=None))
    say(ctx, "new repro gpu=H100 rental=single")
    say(ctx, f"repro block baseline runs=10 trial={on}")
    say(ctx, f"repro block compare runs=10 trial={off}")
    say(ctx, "price H100 2.49/h source=q date=2026-11-30")
    out = say(ctx, "repro show")
    assert "n/a: not measured on H100" in out and "H100-80GB blocks only" in out
    say(ctx, f"repro block baseline runs=20 trial={on}")  # replaced: still first, pays prep
    first = service.estimates(ctx, ctx.store.plan("repro"))[0][1]
    assert first["kind"] == "baseline" and first["components"][0]["seconds"] > 0


def test_an_off_target_blocks_time_never_enters_the_total_or_the_cost(ctx):
    """Issue #31: CPU seconds were shown as H100 GPU-hours. The CPU block's time
    is shown apart; the total, its interval and the cost are the H100 block's."""
    from bot.plans import export
    from bot.plans import views as planview
    on, off = finish(ctx, report()), finish(ctx, report(gpu=None, mean=3.0))
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={on}")
    added = say(ctx, f"repro block compare runs=10 trial={off}")
    assert "GPU-h" not in added.split("\n")[0]
    assert "measured on CPU (EPYC): not a time on H100-80GB" in added
    say(ctx, "price H100 2.49/h source=q date=2026-11-30")
    plan = ctx.store.plan("repro")
    ests = service.estimates(ctx, plan)
    base, comp = ests[0][1], ests[1][1]
    assert comp["off_target"] == "CPU (EPYC)" and base["off_target"] is None
    rows = planview.table_rows(plan, ests, ctx.store.prices(), TODAY)
    assert rows[2][:4] == ["compare", "10×1", "off target", "—"]
    total = rows[-1]
    assert total[2] == planview.hours_text(base["hours"])
    assert total[3] == rows[1][3]  # the interval is the on-target block's alone
    assert total[-1] == f"{rows[1][-1]}, H100-80GB blocks only"
    out = say(ctx, "repro show")
    assert "The total and its cost leave out compare" in out
    assert ("still missing: a short trial on H100-80GB, `/trial llm-infer batch=4 prompt=512 "
            "gpu=H100-80GB`, then `/plan repro block compare runs=10 trial=T..` with it") in out
    assert "compare (from T2 on CPU (EPYC)), measured on CPU (EPYC): not a time" in out
    d = export.data(plan, ests, service.review_rows(ctx, plan, ests), ctx.store.prices(), TODAY)
    assert d["total"]["gpu_hours"]["exact"] == pytest.approx(float(base["hours"]))
    advice = say(ctx, "repro advise")
    assert "Rule 1 fired" in advice and "`/trial llm-infer batch=4 prompt=512 gpu=H100-80GB`" in (
        advice)
    # Every block off the target: no total at all, rather than a CPU one.
    say(ctx, "repro block baseline delete")
    rows = planview.table_rows(plan, service.estimates(ctx, plan), ctx.store.prices(), TODAY)
    assert rows[-1][2] == "n/a: no block measured on H100-80GB"
    assert rows[-1][-1] == "n/a: no block measured on H100-80GB"


def test_a_busy_trial_is_warned_of_with_and_without_a_target(ctx):
    """Issue #31: the busy warning showed only once the plan had a target GPU."""
    busy = finish(ctx, dict(report(gpu=None), contention={
        "flagged": True, "summary": "busy machine: other processes used 61% of the CPU"}))
    for target in ("", " gpu=cpu", " gpu=H100"):
        name = f"p{len(target)}"
        say(ctx, f"new {name}{target}")
        say(ctx, f"{name} block baseline runs=10 trial={busy}")
        warnings = say(ctx, f"{name} show").split("*Warnings*:\n")[1]
        assert f"{busy} ran on a busy machine — busy machine: other processes" in warnings


def test_locking_twice_and_tagging_twice_are_refused(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    say(ctx, "repro lock")
    assert "unlock` first" in say(ctx, "repro lock")
    with pytest.raises(tags.TagError, match="given twice"):
        tags.take(ctx, ["llm-infer", "plan=repro", "plan=other", "block=baseline"],
                        "U1", "C1")


def test_a_retried_manual_actual_is_recorded_once(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    first = commands.plan(ctx, "repro actual baseline hours=2", "U1", "C1", TODAY,
                         request="trig-9")["text"]
    again = commands.plan(ctx, "repro actual baseline hours=2", "U1", "C1", TODAY,
                         request="trig-9")["text"]
    assert "Recorded" in first and "Already recorded" in again
    assert ctx.store.db["actuals"].count == 1
    commands.plan(ctx, "repro actual baseline hours=1", "U1", "C1", TODAY, request="trig-10")
    assert ctx.store.db["actuals"].count == 2  # a new command is a new actual


@pytest.mark.parametrize("text", [
    "secret", "secret show", "secret review", "secret export", "secret advise",
    "secret set paper=x", "secret block compare runs=1 trial=T1", "secret lock",
    "secret unlock", "secret actual baseline hours=1"])
def test_a_plan_is_reached_only_in_its_own_channel_or_by_an_admin(ctx, text):
    t = finish(ctx, report())
    say(ctx, "new secret gpu=H100 paper=private-notes")  # U1 (an admin) in C1
    say(ctx, f"secret block baseline runs=10 trial={t}")
    before = counts(ctx)
    out = commands.plan(ctx, text, "U2", "COTHER", TODAY)["text"]
    assert out.startswith(":lock: Plan `secret` belongs to another channel; ask there (or an "
                          "admin can ask anywhere)")
    assert "baseline" not in out and "private-notes" not in out
    assert counts(ctx) == before
    assert not commands.plan(ctx, text, "U2", "C1", TODAY)["text"].startswith(":lock:")
    assert not commands.plan(ctx, text, "U1", "COTHER", TODAY)["text"].startswith(":lock:")


def test_list_and_unknown_plan_answers_name_only_this_channels_plans(ctx):
    t = finish(ctx, report())
    commands.plan(ctx, "new secret", "U2", "CPRIVATE", TODAY)
    commands.plan(ctx, f"secret block baseline runs=10 trial={t}", "U1", "CPRIVATE", TODAY)
    commands.plan(ctx, "new ours", "U2", "C2", TODAY)

    def as_u2(text, channel="C2"):
        return commands.plan(ctx, text, "U2", channel, TODAY)["text"]
    assert "ours" in as_u2("list") and "secret" not in as_u2("list")
    assert "secret" in as_u2("list", "CPRIVATE") and "ours" not in as_u2("list", "CPRIVATE")
    assert "No plans in this channel" in as_u2("list", "CEMPTY")
    admin = commands.plan(ctx, "list", "U1", "CEMPTY", TODAY)["text"]
    assert "*secret* in <#CPRIVATE>" in admin and "*ours* in <#C2>" in admin
    missing = as_u2("nope show")
    assert "There is no plan `nope`" in missing and "ours" in missing and "secret" not in missing
    assert "exists already in another channel" in as_u2("new secret")
    for words, says in ((["plan=nope", "block=baseline"], "no plan `nope`"),
                        (["plan=secret", "block=baseline"], "belongs to another channel")):
        with pytest.raises(tags.TagError, match=says) as err:
            tags.take(ctx, ["llm-infer", *words], "U2", "C2")
        assert "secret`." not in err.value.message and "baseline" not in err.value.message
    assert tags.take(ctx, ["plan=secret", "block=baseline"], "U2", "CPRIVATE")[1]
    assert tags.take(ctx, ["plan=secret", "block=baseline"], "U1", "C2")[1]


def test_a_block_is_estimated_only_from_trials_of_its_own_channel(ctx):
    t = finish(ctx, report())  # a trial in C1 (perhaps a private channel)
    commands.plan(ctx, "new theirs", "U2", "C2", TODAY)
    out = commands.plan(ctx, f"theirs block baseline runs=10 trial={t}", "U2", "C2",
                       TODAY)["text"]
    assert out.startswith(f":lock: {t} belongs to another channel")
    assert "Nothing was changed" in out and ctx.store.blocks("theirs") == []
    assert "block added" in commands.plan(ctx, f"theirs block baseline runs=10 trial={t}",
                                         "U1", "C2", TODAY)["text"]  # an admin may


def cancel_running(ctx, tags=None, seconds=360.0):
    """A trial cancelled while it ran: its worker killed it after `seconds`."""
    from worker import report as reports
    job = ctx.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1",
                       dict(zip(("plan", "block"), tags)) if tags else None)
    leased = ctx.store.lease_next("w1", 60)
    assert "kills it at its next heartbeat" in trial_command.cancel(ctx, job["id"], "U1")
    killed = reports.fail(reports.new_report("llm-infer", {}), "cancelled", "killed", "run")
    killed.update(seconds=seconds, env=report()["env"], attempts=[{
        "attempt": 1, "status": "failed", "error_class": "cancelled", "seconds": seconds}])
    ctx.queue.finish(job["id"], "w1", leased["lease"], killed)
    assert ctx.store.job(job["id"])["status"] == "cancelled"
    return f"T{job['id']}"


def test_a_cancelled_trials_time_counts_as_retries_in_its_block(ctx):
    t = finish(ctx, report())
    say(ctx, "new repro gpu=H100")
    say(ctx, f"repro block baseline runs=10 trial={t}")
    ran = finish(ctx, report(), tags=("repro", "baseline"))
    cancelled = cancel_running(ctx, ("repro", "baseline"))
    never = ctx.queue.submit(parse(["llm-infer"]), "llm-infer", "U1", "C1",
                         {"plan": "repro", "block": "baseline"})
    trial_command.cancel(ctx, never["id"], "U1")  # before it started: it cost nothing
    out = say(ctx, "repro review")
    assert f"from {ran}, {cancelled}\n" in out
    assert "more retries: +0.100 GPU-h (failed attempts' and cancelled trials' time)" in out


def test_a_block_timed_under_malloc_live_on_a_cpu_warns_and_says_how_to_rerun(ctx):
    live = finish(ctx, report(gpu=None, malloc="live"))
    say(ctx, "new repro gpu=CPU")
    out = say(ctx, f"repro block baseline runs=10 trial={live}")
    assert "block added" in out
    assert f"{live} timed on the CPU under malloc=live: its times include page faults" in out
    assert "re-run with malloc=auto" in out
    assert "malloc=live" in say(ctx, "repro show")  # the plan keeps saying it
    # A two-pass auto trial's times are glibc's; on CUDA live moves host allocations only.
    split = report(gpu=None, malloc="auto")
    split["passes"] = [{"pass": "memory", "malloc": "live"}, {"pass": "time", "malloc": "glibc"}]
    for r in (split, report(malloc="live")):
        t = finish(ctx, r)
        assert "page faults" not in say(ctx, f"repro block baseline runs=10 trial={t}")


def test_each_command_routes_and_helps_from_its_table_and_the_digest_joins_from_above(ctx):
    """/plan's table knows no digest: bot/commands.py adds its entries; the help
    lines are the table's, so an action and its help cannot part."""
    from bot.digest import command as digest_command
    from bot.plans import command as plan_command
    full = say(ctx, "help")
    bare = plan_command.handle(ctx, "help", "U1", "C1", TODAY)["text"]
    digest_line = "• `/plan digest weekly mon 09:00 Asia/Seoul`"
    assert digest_line in full and digest_line not in bare
    refused = plan_command.handle(ctx, "digest now", "U1", "C1", TODAY)["text"]
    assert refused.startswith(":x:") and "Nothing was stored" in refused
    assert counts(ctx)["outbox"] == 0
    assert "Posting the budget digest" in say(ctx, "digest now")
    for entry in (*plan_command.TABLE, *digest_command.ENTRIES):
        assert all(line.split("`")[1] in full for line in entry.help if "`" in line)
    names = [e.name for e in commands.PLAN_TABLE]
    assert len(names) == len(set(names))
    trial_help = trial_command.help_text()
    assert trial_command.route_words(["llm-infer"])[0] is trial_command.RUN
    assert trial_command.route_words(["WORKERS"])[0].name == "workers"
    for entry in trial_command.TABLE:
        assert all(p.split("`")[1] in trial_help for p in entry.help)
