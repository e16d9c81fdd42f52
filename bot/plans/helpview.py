"""`/plan help` and `/plan help TOPIC` as Slack payloads, from the command
table's own lines (bot/plans/entry.py). Pure."""
from __future__ import annotations

from bot.blocks import help_reply
from bot.plans import parse
from bot.states import Json
from worker.i18n import N_, _

HELP_MORE = N_("(continued in this message's blocks)")
# What `/plan help prices` adds to the table's lines: how a figure is read
# (bot/plans/money.py) and the limits it is checked against.
PRICE_RULES = N_("*How a price is read*: a figure with the currency you wrote, or none: "
                 "`$2.49/h`, `2,49/h`, `€2.10/h`, `₩3500/h`, `3500원/h`, `KRW 3,500/h` (`¥` is "
                 "refused: write JPY or CNY); nothing is ever converted. Limits, an order of "
                 "magnitude above anything real, scaled by the currency (KRW 1000×, JPY 100×): "
                 "rent 1,000 per GPU-hour, buy and resale 1,000,000 per GPU, electricity 10 per "
                 "kWh, power 10 kW per GPU. A price more than 3× off the one it replaces, or in "
                 "another currency, waits for the same command with `confirm` at the end.")


def help_text(lines: list[str], topics: list[str]) -> Json:
    """`/plan help`: the command table's lines (bot/plans/command.py, and the
    digest's), what `/plan` is, the checklist and settings by name, and the topics
    `/plan help TOPIC` shows."""
    return help_reply("\n".join([
        _("*`/plan`* turns measured trials into GPU-hour estimates, cost (only from "
          "confirmed prices) and rent/buy guidance."),
        *lines,
        parse.keys_help(),
        _("A run is one repetition of the trial's measured unit: one request for llm-infer, "
          "one run phase of a recipe's program."),
        _("*More*: {topics}", topics=" · ".join(f"`/plan help {t}`" for t in topics))]),
        _(HELP_MORE))


def topic_help(lines: list[str], topic: str) -> Json:
    """`/plan help TOPIC`: the table's lines that use the word, and for `set` the
    checklist and settings, for prices how a figure is read."""
    extra = []
    if topic in ("set", "checklist"):
        extra = [_("*Checklist*: {items}",
                   items="; ".join(f"`{k}` {_(v)}" for k, v in parse.CHECKLIST.items())),
                 _("*Settings*: {items}",
                   items="; ".join(f"`{k}` {_(v)}" for k, v in parse.SETTINGS.items()))]
    elif topic in ("price", "prices"):
        extra = [_(PRICE_RULES)]
    return help_reply("\n".join([*lines, *extra]), _(HELP_MORE))
