"""Messages (issue #33, item 7): every numeric refusal names the rule it broke (the
sign, the range with its limits, the unit) and gives an example; a misspelt key or
sub-command gets "did you mean"; and every help reply's fallback text fits under
Slack's recommended 4,000 characters, the detail per topic. Through the real
/trial and /plan handlers on a SQLite store."""
import datetime as dt
import re

import pytest

from bot import commands
from bot.app.runtime import context
from bot.store import Store
from bot.trials import command as trial_command
from worker.spec import Param, Workload

TODAY = dt.date(2026, 12, 1)


@pytest.fixture
def ctx(tmp_path):
    ctx = context(Store(str(tmp_path / "m.db")), admins=frozenset({"U1"}))
    ctx.store.set_channel_lang("CKO", "ko", "U1")
    commands.plan(ctx, "new adkv", "U1", "C1", TODAY)
    return ctx


def plan(ctx, text, channel="C1"):
    return commands.plan(ctx, text, "U1", channel, TODAY)["text"]


def trial(ctx, text, channel="C1"):
    return commands.trial(ctx, text, "U1", channel)[0]["text"]


# --- numbers: the rule broken, and an example -----------------------------------------

def test_three_wrong_hours_get_three_rules_each_with_an_example(ctx):
    sign, unit, limit = (plan(ctx, f"adkv actual baseline hours={raw}")
                         for raw in ("-3", "1.5d", "1e9"))
    assert "`hours=-3`: hours cannot be negative, e.g. hours=2h" in sign
    assert ("`hours=1.5d`: hours takes hours (h) or minutes (m), not `d`; 1.5d is 36 h, so "
            "write hours=36h") in unit
    assert ("`hours=1e9`: 1,000,000,000 hours is more than 1,000,000, the most one figure in "
            "hours may be (114 GPU-years); check the digits and the unit, e.g. hours=1200h"
            ) in limit
    assert all(out.startswith(":x:") and "Nothing was stored" in out
               for out in (sign, unit, limit))
    assert ctx.store.actuals("adkv") == []


def test_a_period_in_words_is_answered_with_its_unit(ctx):
    for typed in ("period=6 months", 'period="6 months"', "period=6month"):
        out = plan(ctx, f"adkv set {typed}")
        assert "write the unit as mo: period=6mo" in out, out
    assert "`period=6`: period is a length with a unit d, w, mo or y" in plan(
        ctx, "adkv set period=6")
    assert "period cannot be negative, e.g. period=3mo" in plan(ctx, "adkv set period=-3mo")
    assert ctx.store.plan("adkv")["facts"].get("period") is None
    assert "period" in plan(ctx, "adkv set period=6mo") and \
        ctx.store.plan("adkv")["facts"]["period"] == pytest.approx(6 * 30.44)


@pytest.mark.parametrize("text, says", [
    ("adkv block baseline runs=-2 trial=T1",
     "`runs=-2`: runs cannot be negative; it is a count from 1 to 10,000,000, e.g. runs=10"),
    ("adkv block baseline runs=2.5 trial=T1",
     "`runs=2.5`: runs is a count, a whole number from 1 to 10,000,000 in digits, e.g. runs=10"),
    ("adkv set utilization=-0.5", "utilization cannot be negative, e.g. utilization=0.6"),
    ("adkv set utilization=150%", "a share is at most 1 (or 100%), e.g. utilization=0.6"),
    ("price H100 -2.49/h source=q date=2026-11-01", "rate cannot be negative, e.g. 2.49"),
    ("price H100 power=-1kW source=q date=2026-11-01",
     "power cannot be negative; it is a draw per GPU, e.g. power=0.7kW"),
])
def test_plan_numbers_name_the_rule_and_an_example(ctx, text, says):
    out = plan(ctx, text)
    assert says in out and out.startswith(":x:"), out


@pytest.mark.parametrize("text, says", [
    ("llm-infer batch=-2", "`batch=-2`: batch cannot be negative; it is from 1 to 4096, "
                           "e.g. batch=1"),
    ("llm-infer batch=1e9", "`batch=1e9`: batch must be from 1 to 4096, e.g. batch=1"),
    ("llm-infer batch=2.5", "batch must be a whole number written in digits, from 1 to 4096"),
    ("ladder llm-train batch=8 budget=-3GB", "`budget=-3GB`: budget cannot be negative, "
                                             "e.g. budget=24GB"),
    ("ladder llm-train batch=8 budget=24", "budget needs a unit (GB, GiB, MB, MiB, TB or TiB), "
                                           "e.g. budget=24GB"),
    ("llm-infer min_mem=80gigs", "`gigs` is not a unit of size; write GB, GiB"),
])
def test_trial_numbers_name_the_rule_and_an_example(ctx, text, says):
    out = trial(ctx, text)
    assert says in out and "Nothing was queued" in out, out
    assert ctx.store.jobs() == []


# --- did you mean -----------------------------------------------------------------------

def test_a_misspelt_key_is_answered_with_the_key_it_is_a_slip_of(ctx):
    out = trial(ctx, "llm-infer bacth=2")
    assert "`bacth=2`: llm-infer has no parameter `bacth`. Did you mean `batch=2`? It takes" in out
    assert "Did you mean `batch=1,2`?" in trial(ctx, "sweep llm-infer bacth=1,2")
    assert "Did you mean `batch=2`?" in plan(ctx, "adkv block baseline runs=2 bacth=2 trial=T1")
    assert "Did you mean `lang=ko`?" in plan(ctx, "settings lnag=ko")
    assert "Did you mean" not in trial(ctx, "llm-infer colour=red")  # nothing close: no guess
    assert "혹시 `batch=2`입니까?" in trial(ctx, "llm-infer bacth=2", "CKO")


@pytest.mark.parametrize("say, text, means", [
    (trial, "statsu T1", "`/trial status`"),
    (trial, "swep llm-infer batch=1,2", "`/trial sweep`"),
    (trial, "llm-inferr batch=2", "`/trial llm-infer`"),
    (trial, "list mien", "`/trial list mine`"),
    (trial, "help swep", "`/trial help sweep`"),
    (plan, "adkv shwo", "`/plan adkv show`"),
    (plan, "lsit", "`/plan list`"),
    (plan, "digest weekley mon 09:00 UTC", "`/plan digest weekly`"),
    (plan, "help prcies", "`/plan help prices`"),
])
def test_a_misspelt_sub_command_is_answered_with_the_one_it_is_a_slip_of(ctx, say, text, means):
    out = say(ctx, text)
    assert out.startswith(":x:") and f"Did you mean {means}?" in out, out
    assert ctx.store.jobs() == []


# --- help: under 4,000 characters, the detail per topic ---------------------------------

def _recipe(params: int) -> dict:
    """A recipe file's entry with many long-winded parameters, as a worker declares it."""
    many = [Param(f"knob_{i}", "int", 1, "a knob of the paper's script, described at length "
                  "as an admin might, " * 3, low=0, high=100) for i in range(params)]
    return Workload("big-paper", "a paper's own training script", tuple(many),
                    recipe=True).to_dict()


def _replies(ctx, channel):
    """Every help reply /trial and /plan give, in `channel`'s language."""
    ctx.store.upsert_worker("w1", {"recipes": [_recipe(60)], "gpus": [], "cpus": 4})
    topics = ["", *trial_command.TOPICS, "llm-infer", "llm-train", "hf-infer", "hf-train",
              "recipe big-paper"]
    for topic in topics:
        yield f"/trial help {topic}", commands.trial(ctx, f"help {topic}", "U1", channel)[0]
    words = {e.word for e in commands.PLAN_TABLE}
    for topic in ["", "checklist", *sorted(words)]:
        yield f"/plan help {topic}", commands.plan(ctx, f"help {topic}", "U1", channel, TODAY)


@pytest.mark.parametrize("channel", ["C1", "CKO"])
def test_every_help_reply_falls_back_to_under_4000_characters(ctx, channel):
    for asked, reply in _replies(ctx, channel):
        assert not reply["text"].startswith(":x:"), (asked, reply["text"])
        assert len(reply["text"]) < 4000, (asked, len(reply["text"]))
        shown = "\n".join(b["text"]["text"] for b in reply["blocks"])
        assert len(shown) >= len(reply["text"]) - 200, asked  # the blocks hold it all
        assert all(len(b["text"]["text"]) <= 3000 for b in reply["blocks"])


def test_help_detail_is_in_its_topic_and_the_overview_names_every_topic(ctx):
    overview = trial(ctx, "help")
    assert "`kv_heads=2`" not in overview  # parameters are each workload's topic
    for topic in trial_command.TOPICS:
        assert f"`/trial help {topic}`" in overview
    infer = trial(ctx, "help llm-infer")
    assert all(f"• `{p.name}=" in infer for p in trial_command.specs.LLM_INFER.params)
    assert "`/trial fit S12 batch=32 prompt=2048 gpu=H100`" in trial(ctx, "help fit")
    assert "Usage: `/trial fit S12" in trial(ctx, "help fit")
    prices = plan(ctx, "help prices")
    assert "`/plan price H100 2.49/h source=URL date=YYYY-MM-DD`" in prices
    assert "rent 1,000 per GPU-hour" in prices and "*Checklist*" not in prices
    assert "*Checklist*: `paper` paper and version" in plan(ctx, "help set")
    assert "`/plan help set`" in plan(ctx, "help")


@pytest.mark.parametrize("topic, usage", [
    ("sweep", "/trial sweep llm-infer"), ("fit", "/trial fit S12"),
    ("ladder", "/trial ladder llm-train"), ("ab", "/trial ab llm-infer"),
    ("cancel", "/trial cancel T12"), ("list", "/trial list [mine|running|failed]"),
    ("workers", "/trial workers"), ("status", "/trial status T12"), ("where", "/trial <")])
def test_each_trial_help_topic_says_what_it_does_its_parameters_and_an_example(ctx, topic,
                                                                               usage):
    """`/trial help status` once showed only the general usage line (#33)."""
    text = trial(ctx, f"help {topic}")
    first = text.splitlines()[0]
    assert first.startswith(("*`/trial ", "*Where")) and len(first) > 150, first
    assert re.search(r"Parameters?(, if any)?: |takes no parameters|`gpu=NAME`", first), first
    assert re.search(r"Example: `/trial [a-z]", first), first
    assert f"Usage: `{usage}" in text
    ko = trial(ctx, f"help {topic}", channel="CKO").splitlines()[0]
    assert "예: `/trial " in ko and "Example" not in ko


def test_a_help_longer_than_slack_recommends_keeps_all_of_it_in_blocks(ctx):
    ctx.store.upsert_worker("w1", {"recipes": [_recipe(60)], "gpus": [], "cpus": 4})
    reply = commands.trial(ctx, "help recipe big-paper", "U1", "C1")[0]
    shown = "\n".join(b["text"]["text"] for b in reply["blocks"])
    assert len(shown) > 4000 and "• `knob_59=1`" in shown
    assert reply["text"].endswith("\n(continued in this message's blocks)")
    assert re.search(r"• `knob_\d+=1`", reply["text"])
