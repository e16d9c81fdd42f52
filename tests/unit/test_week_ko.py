"""Issue #33's Korean row, walked as a user walks it: a plan's week in a Korean
channel (facts, blocks, a correction, prices, lock, actuals, review, show,
advise, history, the digest, refusals) and `/trial status` and `list`, through
the real handlers on a SQLite store. Every reply reads as Korean: no English
word outside code, ids, names, units and what the user typed (the rules of
tests/unit/test_i18n_ko_words.py, applied to the replies themselves, where
stored English words meet the Korean sentences that show them)."""
import datetime as dt
import re

import pytest

from bot import commands
from bot.app.runtime import context
from bot.plans import actualparse
from bot.plans import parse as plans
from bot.store import Store
from test_i18n_ko_words import BACKTICKED, COUNTERS, PER_AFTER, POLITENESS, english_words
from test_planner import report
from test_plans import finish

TODAY = dt.date(2026, 12, 1)
# What the user typed (the plan's name, a price's source), the worker's host
# name, and the keys a refusal lists as the ones `block` and `actual` take.
TYPED = {"adkv", "runpod", "box", *plans.BLOCK_KEYS, *actualparse.FIELDS}


@pytest.fixture
def ctx(tmp_path):
    ctx = context(Store(str(tmp_path / "w.db")), admins=frozenset({"U1"}))
    ctx.store.set_channel_lang("C1", "ko", "U1")
    return ctx


def week(trial: str) -> list[str]:
    return ["new adkv gpu=H100", 'adkv set excluded=none inputs="batch 1, prompt 4096, gen 256"',
            f"adkv block verify runs=10 trial={trial}", "adkv block verify correct runs=12",
            "price H100 $2.49/h source=runpod date=2026-11-28",
            "price electricity 0.12/kWh source=runpod date=2026-11-28",
            "adkv set pattern=steady period=6mo utilization=0.6 needs_cuda=no", "adkv lock",
            "adkv actual verify hours=1 confirm", "adkv actual verify correct hours=0.5",
            "adkv review", "adkv show", "adkv advise", "adkv history", "prices",
            "digest weekly mon 09:00 Asia/Seoul", "digest", "adkv new",
            "adkv actual verify hours=-3", "adkv set period=6 months",
            "adkv block verify bacth=2", "adkv unlock"]


def _wrong(line: str) -> bool:
    """English outside code, another politeness level, a counter apart from its
    number, "…당" after its figure, or a particle written both ways ("은(는)")."""
    prose = BACKTICKED.sub(" ", line)
    return bool(set(english_words(line)) - TYPED or POLITENESS.search(prose)
                or COUNTERS.search(prose) or PER_AFTER.search(prose)
                or re.search(r"`[^`]*`(은\(는\)|을\(를\)|이\(가\))", line))


def test_a_plans_week_in_a_korean_channel_reads_as_korean(ctx):
    trial = finish(ctx, report())
    found = []
    for text in week(trial):
        out = commands.plan(ctx, text, "U1", "C1", TODAY)["text"]
        found += [f"/plan {text}: {line}" for line in out.splitlines() if _wrong(line)]
    for text in (f"status {trial}", "list", "help status"):
        out = commands.trial(ctx, text, "U1", "C1")[0]["text"]
        found += [f"/trial {text}: {line}" for line in out.splitlines() if _wrong(line)]
    assert found == [], "\n".join(found)


def test_stored_english_words_are_shown_in_korean(ctx):
    """A price's unit in the history and the lock's code version are stored in
    English (they are compared as stored) and shown in the channel's words."""
    trial = finish(ctx, report())
    for text in week(trial)[:8]:
        commands.plan(ctx, text, "U1", "C1", TODAY)
    history = commands.plan(ctx, "adkv history", "U1", "C1", TODAY)["text"]
    assert "unit=GPU-시간당" in history and "per GPU-hour" not in history
    shown = commands.plan(ctx, "adkv show", "U1", "C1", TODAY)["text"]
    locked = commands.plan(ctx, "adkv unlock", "U1", "C1", TODAY)["text"]
    relocked = commands.plan(ctx, "adkv lock", "U1", "C1", TODAY)["text"]
    assert "코드 내장 llm-infer, torch" in relocked and "built-in" not in relocked + shown
    assert "잠금을 해제했습니다" in locked
