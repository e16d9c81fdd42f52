"""Input as people type it (issue #19): look-alike characters, case, units and
money through the real /trial and /plan handlers, one GPU name table, and the
bf16 note on "fits on". In-process on a real SQLite store; no worker process."""
import datetime as dt
import re

import pytest

from bot import commands
from bot.app.runtime import context
from bot.fits import depth, depthview, gpus
from bot.plans import money
from bot.store import Store
from bot.trials import command as trial_command
from bot.trials import routing
from bot.words import normalize
from worker.spec import parse as spec_parse

TODAY = dt.date(2026, 12, 1)
NBSP, NNBSP, IDEO = "\u00a0", "\u202f", "\u3000"


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "i.db")), admins=frozenset({"U1"}))


def plan(ctx, text):
    return commands.plan(ctx, text, "U1", "C1", TODAY)["text"]


def trial(ctx, text):
    return commands.trial(ctx, text, "U1", "C1")


def facts(ctx, name="adkv"):
    return ctx.store.plan(name)["facts"]


# --- look-alike characters ---------------------------------------------------------

def test_normalize_folds_look_alikes_and_keeps_korean_and_apostrophes():
    assert normalize("set inputs=“batch 8, prompt 4096”") == 'set inputs="batch 8, prompt 4096"'
    assert normalize("note=‘a b’") == "note='a b'"
    assert normalize(f"batch=2{NBSP}gen=8{NNBSP}prompt=4{IDEO}x") == "batch=2 gen=8 prompt=4 x"
    assert normalize("batch＝４") == "batch=4"
    assert normalize("a\u200bb") == "ab"
    korean = "note=\"프롬프트 길이는? ㅋㅋ ㅠㅠ 한국어\""
    assert normalize(korean) == korean
    assert normalize("note=don’t") == "note=don’t"  # an apostrophe opens no quote


def test_smart_quotes_in_plan_values_are_quotes(ctx):
    plan(ctx, "new adkv")
    out = plan(ctx, "adkv set inputs=“batch 8, prompt 4096” scope=‘table 2 only’")
    assert ":x:" not in out
    assert facts(ctx)["inputs"] == "batch 8, prompt 4096"
    assert facts(ctx)["scope"] == "table 2 only"
    plan(ctx, "adkv set baseline=“어텐션 기준선 (논문 표 3)”")
    assert facts(ctx)["baseline"] == "어텐션 기준선 (논문 표 3)"  # Korean survives NFKC
    from test_planner import report
    from test_plans import finish
    t = finish(ctx, report())
    out = plan(ctx, f"adkv block baseline runs=2 trial={t} note=“which set? 어느 세트?”")
    assert "block added" in out, out
    assert ctx.store.blocks("adkv")[0]["note"] == "which set? 어느 세트?"


def test_nbsp_and_full_width_reach_the_trial_as_ascii(ctx):
    reply, job = trial(ctx, f"llm-infer batch＝２{NBSP}gen=８ dtype=BF16")
    assert job is not None, reply["text"]
    assert job["spec"]["params"]["batch"] == 2 and job["spec"]["params"]["gen"] == 8
    assert job["spec"]["params"]["dtype"] == "bf16"  # canonical, though typed BF16
    assert job["words"] == "llm-infer batch=2 gen=8 dtype=bf16"  # the normalised words
    assert "４" not in reply["text"] and "＝" not in reply["text"]


# --- case ---------------------------------------------------------------------------

def test_keywords_and_choices_in_any_case(ctx):
    reply, job = trial(ctx, "LLM-Infer dtype=BF16 device=CPU")
    assert job and job["spec"]["params"]["dtype"] == "bf16"
    assert "`llm-infer dtype=bf16 device=cpu`" in reply["text"]  # echoed canonical
    status, _ = trial(ctx, f"STATUS t{job['id']}")
    assert f"T{job['id']}" in status["text"] and ":x:" not in status["text"]
    assert trial_command.parse_trial("List Mine").which == "mine"
    reply, _ = trial(ctx, "llm-infer dtype=bf17")
    assert "dtype must be one of fp32, bf16, fp16" in reply["text"]

    assert "started" in plan(ctx, "NEW ADKV platform=CUDA")
    assert facts(ctx)["platform"] == "cuda"
    shown = plan(ctx, "ADKV Show")
    assert "Plan adkv" in shown and ":x:" not in shown
    from bot.commands import PLAN_TABLE
    from bot.plans.command import parse_plan
    assert parse_plan("adkv Block BASELINE runs=2 trial=t5", TODAY).args["kind"] == "baseline"
    deleted = parse_plan("ADKV ACTUAL Baseline Delete", TODAY)
    assert (deleted.plan, deleted.args) == ("adkv", {"block": "baseline", "delete": True,
                                                     "ids": None})
    assert parse_plan("digest NOW", TODAY, PLAN_TABLE).action == "digest-now"


def test_free_text_keeps_its_case(ctx):
    plan(ctx, "new adkv")
    plan(ctx, 'adkv set paper="ADKV: Adaptive KV (arXiv 2405.01234v2)"')
    assert facts(ctx)["paper"] == "ADKV: Adaptive KV (arXiv 2405.01234v2)"


# --- units --------------------------------------------------------------------------

@pytest.mark.parametrize("raw,hours", [("2", 2.0), ("2h", 2.0), ("1.5hr", 1.5), ("90m", 1.5),
                                       ("90min", 1.5)])
def test_hours_take_a_unit_everywhere(ctx, raw, hours):
    from bot.plans import parse
    from bot.plans.command import parse_plan
    assert parse.hours(raw, "hours") == hours
    cmd = parse_plan(f"adkv actual baseline hours={raw} prep={raw}", TODAY)
    assert cmd.args["hours"] == hours and cmd.args["parts"]["prep"] == hours
    assert parse_plan(f"adkv set handoff={raw}", TODAY).args["facts"]["handoff"] == hours


def test_absurd_hours_are_refused_naming_the_limit(ctx):
    from bot.plans import parse
    from bot.plans.command import parse_plan
    with pytest.raises(parse.PlanError, match="more than 1,000,000, the most one figure in hours"):
        parse_plan("adkv actual baseline hours=1000000000", TODAY)
    with pytest.raises(parse.PlanError, match="not `days`; 2days is 48 h, so write hours=48h"):
        parse_plan("adkv actual baseline hours=2days", TODAY)


# --- money --------------------------------------------------------------------------

@pytest.mark.parametrize("raw,value,currency", [
    ("$2.49", 2.49, "USD"), ("2,49", 2.49, ""), ("₩3500", 3500, "KRW"), ("3500 KRW", 3500, "KRW"),
    ("€2.10", 2.10, "EUR"), ("KRW 3,500", 3500, "KRW"), ("3,500원", 3500, "KRW"),
    ("1,234,567.5", 1234567.5, ""), ("1.234,56", 1234.56, ""), ("₩3.500", 3500, "KRW"),
    ("2.490", 2.49, ""), ("chf 2.10", 2.10, "CHF")])
def test_one_money_reader(raw, value, currency):
    assert money.parse(raw, "rate") == (pytest.approx(value), currency)


@pytest.mark.parametrize("raw,why", [
    ("2,490", "could be 2,490 (a thousands comma) or 2.490 (a decimal comma)"),
    ("$2,490", "could be 2,490"), ("¥350", "write JPY or CNY"), ("3500 XYZ", "not a currency"),
    ("$3 KRW", "at most one currency"), ("nan", "finite")])
def test_money_that_cannot_be_read_is_refused_with_the_cause(raw, why):
    with pytest.raises(money.MoneyError, match=re.escape(why)):
        money.parse(raw, "rate")


def test_prices_as_people_write_them_through_the_handler(ctx):
    for text, shown in [("price H100 2,49/h", "$") , ("price H100 ₩3500/h", "₩3500"),
                        ("price H100 KRW 3,500/h", "₩3500"), ("price H100 3500 KRW/h", "₩3500"),
                        ("price H100 €2.10/h", "€2.1")]:
        # confirm: each replaces the last in another currency (prices.needs_confirm)
        out = plan(ctx, f"{text} source=quote date=2026-11-30 confirm")
        assert "Recorded" in out, out
        if shown != "$":
            assert shown in out, out
    rows = list(ctx.store.db["prices"].rows)
    assert [p["currency"] for p in rows] == ["", "KRW", "KRW", "KRW", "EUR"]
    assert [p["value"] for p in rows] == [2.49, 3500, 3500, 3500, 2.1]
    assert all(p["item"] == "H100-80GB" for p in rows)


@pytest.mark.parametrize("text,why", [
    ("price H100 99999999999999/h", "a rent above 1,000,000 per GPU-hour in any currency"),
    ("price H100 $20000/h", "a rent above 1,000 per GPU-hour in USD"),
    ("price H100 ₩2000000/h", "a rent above 1,000,000 per GPU-hour in KRW"),
    ("price H100 buy=$5000000", "a purchase price above 1,000,000 per GPU in USD"),
    ("price H100 power=70kW", "the most one GPU may draw"),
    ("price electricity 50000/kWh", "electricity above 10,000 per kWh in any currency"),
    ("price electricity $50/kWh", "electricity above 10 per kWh in USD"),
    ("price H100 2,490/h", "could be 2,490"),
])
def test_absurd_or_ambiguous_prices_are_refused_and_nothing_is_stored(ctx, text, why):
    out = plan(ctx, f"{text} source=quote date=2026-11-30")
    assert why in out, out
    assert ctx.store.prices() == []


def test_mixed_currencies_stay_refused_naming_both():
    from bot.plans import advice
    from test_planner import TODAY as PLANNER_TODAY
    from test_planner import facts as planner_facts
    p = {k: {"item": "H100-80GB", "kind": k, "value": v, "unit": "u", "currency": c,
             "source": "s", "date": "2026-11-30"}
         for k, v, c in (("rent", 2.5, "USD"), ("buy", 30000, "$"), ("power", 0.7, ""),
                         ("electricity", 150, "KRW"))}
    p["resale"] = None
    missing = advice.advise(planner_facts(prices=p), PLANNER_TODAY)["missing"]
    assert "the prices in one currency" in missing[0] and "given in KRW, USD" in missing[0]
    same = dict(p, electricity=dict(p["electricity"], currency="USD", value=0.2))
    # "$" stored before codes were kept is USD: one currency, no refusal
    assert advice.advise(planner_facts(prices=same), PLANNER_TODAY)["rule"] == 3


# --- one GPU name table ----------------------------------------------------------

def test_set_gpu_stores_the_table_name_and_its_price_applies(ctx):
    plan(ctx, "new adkv")
    plan(ctx, "adkv set gpu=h100-80gb")
    assert facts(ctx)["gpu"] == "H100-80GB"
    plan(ctx, "adkv set gpu=nvidia-h100-sxm")
    assert facts(ctx)["gpu"] == "H100-80GB"
    plan(ctx, "price h100 $2.49/h source=quote date=2026-11-30")
    from bot.plans import prices
    assert prices.find(ctx.store.prices(), facts(ctx)["gpu"], "rent")["value"] == 2.49
    plan(ctx, "adkv set gpu=CPU")
    assert facts(ctx)["gpu"] == "cpu"


def test_an_ambiguous_gpu_answers_the_same_in_plan_and_fit(ctx):
    plan(ctx, "new adkv")
    said = plan(ctx, "adkv set gpu=A100")
    fit, _ = trial(ctx, "fit S1 gpu=A100")
    for out in (said, fit["text"]):
        assert "`A100` is ambiguous" in out and "A100-40GB (40 GB), A100-80GB (80 GB)" in out
    assert "gpu" not in facts(ctx)
    # routing needs only the kind: any A100 worker
    assert routing.take(["gpu=A100"])[1] == {"gpu": "A100"}


def test_a_typo_gets_the_same_did_you_mean_everywhere(ctx):
    plan(ctx, "new adkv")
    outs = [plan(ctx, "adkv set gpu=H10O"), plan(ctx, "price H10O 2/h source=q date=2026-11-30"),
            trial(ctx, "fit S1 gpu=H10O")[0]["text"], trial(ctx, "llm-infer gpu=H10O")[0]["text"]]
    for out in outs:
        assert "`H10O` is not a GPU I know; did you mean H100-80GB?" in out, out
    assert ctx.store.prices() == [] and ctx.store.jobs() == []


UNLISTED = ("`RTX-A6000` is not in the datasheet table, so it is kept as written: trials go "
            "to workers whose reported GPU name has its words, and its memory is unknown, so "
            "no \"fits on\" or largest batch is worked out for it")


def test_a_gpu_the_table_lacks_is_kept_as_written_in_a_plan_a_price_and_a_trial(ctx):
    said = plan(ctx, "new adkv gpu=RTX-A6000")
    assert facts(ctx)["gpu"] == "RTX-A6000" and UNLISTED in said and "did you mean" not in said
    said = plan(ctx, "adkv set gpu=RTX-A6000")
    assert facts(ctx)["gpu"] == "RTX-A6000" and UNLISTED in said and "did you mean" not in said
    said = plan(ctx, "price RTX-A6000 0.79/h source=quote date=2026-11-30")
    assert "Recorded P1" in said and UNLISTED in said
    from bot.plans import prices
    assert prices.find(ctx.store.prices(), facts(ctx)["gpu"], "rent")["value"] == 0.79
    ctx.store.upsert_worker("h100-box", {"gpus": ["NVIDIA H100 80GB HBM3"], "device": "cuda"})
    out = trial(ctx, "llm-infer gpu=RTX-A6000")[0]["text"]  # no worker has one
    assert "No worker matches `gpu=RTX-A6000`" in out and UNLISTED in out, out
    assert "did you mean" not in out and ctx.store.jobs() == []
    ctx.store.upsert_worker("a6000-box", {"gpus": ["NVIDIA RTX A6000"], "device": "cuda"})
    assert trial(ctx, "llm-infer gpu=RTX-A6000")[1]["status"] == "queued"
    said = plan(ctx, "adkv set gpu=H100")  # a table name says nothing of the table
    assert "datasheet table" not in said


@pytest.mark.parametrize("name", ["RTX-A6000", "A6000", "H800", "H20", "L40", "A40", "A30",
                                  "B100", "MI300A", "RTX-3090", "A1000"])
def test_a_real_part_the_table_lacks_is_not_taken_for_a_typo(name):
    with pytest.raises(gpus.GpuNameError) as exc:
        gpus.named(name)
    assert exc.value.why == "unknown" and "did you mean" not in str(exc.value)


@pytest.mark.parametrize("typo, name", [("H10O", "H100-80GB"), ("HI00", "H100-80GB"),
                                        ("H010", "H100-80GB"), ("h1000", "H100-80GB"),
                                        ("L40SS", "L40S"), ("RTX-4O9O", "RTX-4090")])
def test_a_slip_of_a_table_name_gets_did_you_mean(typo, name):
    with pytest.raises(gpus.GpuNameError, match=f"did you mean {name}\\?"):
        gpus.named(typo)


def test_reported_names_resolve_through_the_table_whole_words_kept():
    def env(name, memory=None):
        return {"env": {"gpu_count": 1, "gpu_name": name, "gpu_memory": memory}}
    assert gpus.matches_gpu(env("NVIDIA H100 PCIe"), "H100-80GB")
    assert gpus.matches_gpu(env("NVIDIA H100 80GB HBM3"), "h100")
    assert not gpus.matches_gpu(env("NVIDIA H100 NVL"), "H100-80GB")
    assert not gpus.matches_gpu(env("NVIDIA A10"), "A100")  # A10 is not A100
    assert not gpus.matches_gpu(env("NVIDIA L4"), "L40S")
    assert gpus.matches_gpu(env("NVIDIA A100-SXM4-80GB"), "A100")
    assert not gpus.matches_gpu(env("NVIDIA A100-SXM4-80GB"), "A100-40GB")
    assert gpus.matches_gpu(env("NVIDIA A100-PCIE", 85 * 10**9), "A100-80GB")
    assert gpus.matches_gpu(env("NVIDIA RTX A6000"), "RTX A6000")  # not in the table: words
    h100 = {"gpus": ["NVIDIA H100 PCIe"]}
    assert routing.matches(h100, routing.take(["gpu=h100-sxm"])[1])


# --- bf16 and "fits on" ----------------------------------------------------------

def test_every_gpu_says_whether_it_has_bf16_and_why():
    assert all(g.bf16 is not None and g.bf16_source for g in gpus.TABLE.values())
    assert [n for n, g in gpus.TABLE.items() if not g.bf16] == ["V100-16GB", "V100-32GB", "T4"]


def test_a_bf16_model_is_not_shown_fitting_a_gpu_without_bf16():
    p = spec_parse(["llm-infer", "batch=1", "prompt=128", "gen=8"]).params
    fp16 = depth.fits_on(dict(p, dtype="fp16"), {})
    bf16 = depth.fits_on(dict(p, dtype="bf16"), {})
    row = {g["gpu"]: g for g in bf16["gpus"]}
    assert {g["gpu"]: g["fits"] for g in fp16["gpus"]}["T4"]
    assert not row["T4"]["fits"] and "Turing" in row["T4"]["no_dtype"]
    assert row["H100-80GB"]["fits"] and row["H100-80GB"]["no_dtype"] is None
    text = depthview.fits_text(bf16)
    head = text.splitlines()[0]
    assert "T4" not in head.split("—")[0] and "V100-16GB" not in head.split("—")[0]
    note = next(line for line in text.splitlines() if "Not counted as fitting" in line)
    assert all(n in note for n in ("V100-16GB", "V100-32GB", "T4")) and "H100" not in note
    assert "(no bf16)" in text
    assert "bf16" not in depthview.fits_text(fp16)


def test_a_sweep_echoes_canonical_words_and_hf_attn_reads_any_case():
    cmd = trial_command.parse_trial("SWEEP LLM-infer batch=1,2 dtype=BF16")
    assert cmd.words == ("llm-infer batch=1 dtype=bf16", "llm-infer batch=2 dtype=bf16")
    hf = trial_command.parse_trial("hf-infer model=llama-3-8b layers=1 attn=SDPA")
    assert hf.spec.params["attn"] == "sdpa"


def test_fit_on_a_gpu_without_bf16_says_so_for_a_bf16_sweep():
    from bot.fits import batchview
    from bot.fits.sweep import fit_sweep
    from test_scaling import cuda, llm_report

    def answer(dtype, gpu):
        rs = [cuda(llm_report(f"T{b}", b, dtype=dtype,
                              memory={"process_used_peak": 10**9 + 2 * 10**8 * b}))
              for b in (1, 2, 4)]
        jobs = [{"trial": r["trial"], "status": "done"} for r in rs]
        return "\n".join(batchview.answer_parts(1, jobs, fit_sweep(rs), {}, gpus.lookup(gpu)))
    assert "Not counted as fitting T4: a bf16 model needs bf16" in answer("bf16", "T4")
    assert "bf16" not in answer("fp16", "T4") and "Not counted" not in answer("bf16", "L4")
