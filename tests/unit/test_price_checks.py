"""#33: a price far from the one it replaces waits for `confirm`; resale above buy is refused."""
import datetime as dt
import sqlite3

import pytest

from bot import commands
from bot.app.runtime import context
from bot.store import Store, migrations

TODAY = dt.date(2026, 12, 1)
TAIL = "source=runpod date=2026-11-28"


@pytest.fixture
def ctx(tmp_path):
    return context(Store(str(tmp_path / "p.db")), admins=frozenset({"U1"}))


def say(ctx, text):
    return commands.plan(ctx, text, "U1", "C1", TODAY)["text"]


def before(step):
    """The schema version of a file the migration `step` has not reached yet."""
    return migrations.BASELINE + [name for name, _ in migrations.MIGRATIONS].index(step)


def rents(ctx):
    return [p["value"] for p in ctx.store.prices() if p["kind"] == "rent"]


def test_a_price_far_from_the_one_it_replaces_waits_for_confirm(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    out = say(ctx, f"price H100 $24.90/h {TAIL}")
    assert "Not recorded yet" in out and "$24.9" in out and "$2.49" in out and "confirm" in out
    assert rents(ctx) == [2.49]
    assert "Recorded" in say(ctx, f"price H100 $24.90/h {TAIL} confirm")
    assert rents(ctx) == [24.90]


def test_the_issues_typo_without_a_currency_waits_for_confirm(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    out = say(ctx, f"price H100 25000/h {TAIL}")
    assert "Not recorded yet" in out and "25000" in out and "$2.49" in out
    assert rents(ctx) == [2.49]


def test_a_price_in_another_currency_waits_for_confirm(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    out = say(ctx, f"price H100 €2.30/h {TAIL}")
    assert "Not recorded yet" in out and "EUR" in out and "USD" in out and "€2.3" in out
    assert rents(ctx) == [2.49]


def test_an_older_quote_far_off_waits_for_confirm_too(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    assert "Not recorded yet" in say(ctx, "price H100 $24.90/h source=q date=2026-10-01")


def test_a_close_new_price_is_recorded_without_confirm(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    assert "Recorded" in say(ctx, f"price H100 $2.10/h {TAIL}")
    assert rents(ctx) == [2.10]


def test_confirm_is_not_stored_with_the_price(ctx):
    assert "Recorded" in say(ctx, f"price H100 $2.49/h {TAIL} confirm")
    assert "confirm" not in ctx.store.prices()[0]


@pytest.mark.parametrize("first, second", [("buy=30000", "resale=40000"),
                                           ("resale=40000", "buy=30000")])
def test_resale_above_buy_is_refused_naming_both(ctx, first, second):
    assert "Recorded" in say(ctx, f"price H100 {first} {TAIL}")
    out = say(ctx, f"price H100 {second} {TAIL}")
    assert "resale 40,000" in out and "buy 30,000" in out and "Recorded" not in out
    assert len(ctx.store.prices()) == 1
    # confirm does not override: a resale above buy is never right
    assert "Recorded" not in say(ctx, f"price H100 {second} {TAIL} confirm")


def test_a_price_without_a_currency_is_read_in_the_channels_and_says_so(ctx):
    assert "KRW" in say(ctx, "settings currency=krw")
    assert "Its currency: KRW" in say(ctx, "settings")
    out = say(ctx, f"price H100 3500/h {TAIL}")
    assert "read as KRW, this channel's currency" in out
    assert ctx.store.prices()[0]["currency"] == "KRW"
    # the channel's currency is what the next price is compared in: $2.49 is another currency
    assert "Not recorded yet" in say(ctx, f"price H100 $2.49/h {TAIL}")
    out = say(ctx, f"price H100 25000/h {TAIL}")  # 7× the ₩3500: the refusal names the KRW
    assert "Not recorded yet" in out and "read as KRW" in out
    # another channel has none: the price keeps none, and the reply says how to set one
    out = commands.plan(ctx, f"price L4 0.80/h {TAIL} confirm", "U1", "C2", TODAY)["text"]
    assert "this channel has none set" in out and "currency=USD" in out


def test_a_written_currency_wins_over_the_channels(ctx):
    say(ctx, "settings currency=KRW")
    out = say(ctx, f"price H100 $2.49/h {TAIL}")
    assert "Recorded" in out and "read as" not in out
    assert ctx.store.prices()[0]["currency"] == "USD"


@pytest.mark.parametrize("word", ["currency=dollars", "currency=¥"])
def test_an_unknown_channel_currency_is_refused_naming_the_choices(ctx, word):
    out = say(ctx, f"settings {word}")
    assert "not a currency I know" in out and "KRW" in out and "currency=" in out
    assert ctx.store.channel_currency("C1") is None


def test_settings_currency_clears_and_keeps_the_language(ctx):
    say(ctx, "settings lang=ko currency=EUR")
    say(ctx, "settings currency=")
    assert ctx.store.channel_currency("C1") is None and ctx.store.channel_lang("C1") == "ko"


def test_a_correction_far_off_waits_for_confirm_and_keeps_the_currency(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    out = say(ctx, "price correct P1 24.90/h")
    assert "Not recorded yet" in out and "$24.9" in out and "$2.49" in out
    assert rents(ctx) == [2.49]
    assert "corrected" in say(ctx, "price correct P1 2.39/h")
    assert ctx.store.prices()[0]["currency"] == "USD" and rents(ctx) == [2.39]
    assert "corrected" in say(ctx, "price correct P1 23.90/h confirm")
    assert rents(ctx) == [23.90]


def test_a_correction_may_not_put_resale_above_buy(ctx):
    say(ctx, f"price H100 buy=30000 {TAIL}")
    say(ctx, f"price H100 resale=20000 {TAIL}")
    out = say(ctx, "price correct P2 resale=40000")
    assert "resale 40,000" in out and "buy 30,000" in out
    assert sorted(p["value"] for p in ctx.store.prices()) == [20000, 30000]


def test_a_gpus_first_price_far_outside_the_others_waits_for_confirm(ctx):
    say(ctx, f"price H100 $2.49/h {TAIL}")
    say(ctx, f"price L4 $0.80/h {TAIL}")
    out = say(ctx, f"price A100-80GB $150/h {TAIL}")  # per node, or a typo
    assert "Not recorded yet" in out and "$150" in out and "$0.8 to $2.49" in out
    assert "Recorded" in say(ctx, f"price A100-80GB $1.50/h {TAIL}")
    assert "Recorded" in say(ctx, f"price H200 $30/h {TAIL} confirm")


def test_a_deleted_prices_number_is_not_handed_out_again(ctx):
    """Advice and reviews cite P-numbers: a deleted P2 must not name another figure."""
    say(ctx, f"price H100 $2.49/h {TAIL}")
    assert "P2" in say(ctx, f"price H100 $2.59/h {TAIL}")
    assert "P2 deleted" in say(ctx, "price delete P2")
    out = say(ctx, f"price H100 $2.55/h {TAIL}")
    assert "P3" in out and "P2" not in out
    assert sorted(p["id"] for p in ctx.store.all_prices()) == [1, 3]


def test_a_file_from_before_never_reuses_a_price_number_its_history_shows(tmp_path):
    """A file made before the step: prices under a plain rowid, P2 recorded and
    deleted (its history names it). Opened by this trialbot, P1 stays and the
    next price is P3."""
    path = str(tmp_path / "old.db")
    Store(path)
    conn = sqlite3.connect(path)
    conn.executescript(
        "drop table prices; create table prices (id integer primary key, item text, kind "
        "text, value real, unit text, currency text, source text, date text, user text, "
        "recorded real);"
        "insert into prices values (1, 'H100-80GB', 'rent', 2.49, 'h', 'USD', 'runpod', "
        "'2026-11-28', 'U1', 1.0);"
        "insert into plan_history (plan, item, what, action, old, new, user, at) values "
        "(null, 'A100-80GB', 'price P2', 'add', null, '{}', 'U1', 2.0),"
        "(null, 'A100-80GB', 'price P2', 'delete', '{}', null, 'U1', 3.0);"
        f"pragma user_version = {before('price numbers never reused')};")
    conn.close()
    ctx = context(Store(path), admins=frozenset({"U1"}))
    assert [(p["id"], p["value"]) for p in ctx.store.all_prices()] == [(1, 2.49)]
    assert "P3" in say(ctx, f"price H100 $2.55/h {TAIL}")
    assert "autoincrement" in ctx.store.db.execute(
        "select sql from sqlite_master where name = 'prices'").fetchone()[0].lower()
