"""`/plan price ...`: a price's words (a GPU's rent, purchase, resale or power,
electricity) and its corrections, each value checked before it is stored.
Pure: today's date is passed in."""
from __future__ import annotations

import datetime as dt
import re

from bot.plans import money, prices
from bot.plans.grammar import PlanCommand, PlanError, gpu_item, key_values, no_more, number
from bot.states import Json
from worker.i18n import _

PRICE_ID = re.compile(r"[Pp]?(\d{1,12})")


def parse_price_change(verb: str, words: list[str]) -> PlanCommand:
    """`price correct P7 [FIGURE] [source=...] [date=...]` and `price delete P7`;
    the figure is checked against P7's item in the command (parse_price_correction)."""
    usage = _("`/plan price correct P7 2.39/h source=... date=YYYY-MM-DD` (any of the figure, "
              "source= and date=) or `/plan price delete P7`; `/plan prices all` lists the ids")
    match = PRICE_ID.fullmatch(words[0]) if words else None
    if match is None:
        raise PlanError(_("`{word}` is not a price id: prices are named P7 and so on. Usage: "
                          "{usage}", word=words[0], usage=usage) if words else
                        _("Name the price: prices are named P7 and so on. Usage: {usage}",
                          usage=usage))
    pid = int(match.group(1))
    if verb == "delete":
        no_more(words[1:], f"/plan price delete P{pid}")
        return PlanCommand("price-delete", args={"id": pid})
    if not words[1:]:
        raise PlanError(_("Say what to correct in P{id}. Usage: {usage}", id=pid, usage=usage))
    return PlanCommand("price-correct", args={"id": pid, "words": words[1:]})


def parse_price_correction(old: Json, words: list[str], today: dt.date) -> Json:
    """The fields of price `old` that `words` change, checked as a new price's
    are; its item and kind stay."""
    figure = [w for w in words if not w.startswith(("source=", "date="))]
    item = old["item"]
    dated = [w for w in words if w.startswith(("source=", "date="))]
    new = parse_price([item, *(figure or [_figure_word(old)]), *dated, *_kept(old, words)],
                      today)
    if not new["currency"]:  # `correct P7 2.39/h` of $2.49 means dollars still
        new["currency"] = old.get("currency") or ""
    if new["kind"] != old["kind"]:
        raise PlanError(_("P{id} is a {kind} price; a correction keeps its kind. Record a "
                          "{new} figure as a new price (`/plan price {item} ...`)", id=old["id"],
                          kind=prices.kind_name(old["kind"]), new=prices.kind_name(new["kind"]),
                          item=item))
    return {k: new[k] for k in ("value", "unit", "currency", "source", "date")
            if new[k] != old.get(k)}


def _kept(old: Json, words: list[str]) -> list[str]:
    """source= and date= from the old price where the correction gives none."""
    return [f"{k}={old[k]}" for k in ("source", "date")
            if not any(w.startswith(f"{k}=") for w in words)]


def _figure_word(price: Json) -> str:
    """The word that records this figure again (for a correction of its source or date)."""
    value = f"{price['currency'] or ''}{price['value']!r}"
    return {"rent": f"{value}/h", "electricity": f"{value}/kWh",
            "power": f"power={price['value']!r}kW", "buy": f"buy={value}",
            "resale": f"resale={value}"}[price["kind"]]


MAX_POWER_KW = 10  # one GPU: a B200 draws about 1 kW


def parse_price(words: list[str], today: dt.date) -> Json:
    """`H100 2.49/h`, `H100 buy=30000`, `H100 resale=9000`, `H100 power=0.7kW`,
    `electricity 0.12/kWh`, each with source= and date=."""
    usage = _("Usage: `/plan price H100 2.49/h source=URL-or-quote date=YYYY-MM-DD` "
              "(also buy=, resale=, power=KW per GPU, and `/plan price electricity 0.12/kWh`)")
    if not words:
        raise PlanError(_("Name what the price is for.") + " " + usage)
    item, rest = words[0], [w for w in words[1:] if w.lower() != "confirm"]
    confirm = len(rest) < len(words) - 1  # a doubtful figure repeated: prices.needs_confirm
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}", item):
        raise PlanError(_("`{item}` is not a GPU name; e.g. H100, A100-80GB.", item=item)
                        + " " + usage)
    value_words = [w for w in rest if not w.startswith(("source=", "date="))]
    pairs = key_values([w for w in rest if w.startswith(("source=", "date="))],
                       ("source", "date"), _("a price"))
    # `KRW 3,500/h` and `3500 KRW/h` are one figure in two words
    if len(value_words) == 2 and any(re.fullmatch(r"[A-Za-z]{3}(/.*)?", w) for w in value_words):
        value_words = [" ".join(value_words)]
    if len(value_words) != 1:
        raise PlanError(_("Give exactly one figure for {item}.", item=item) + " " + usage)
    kind, unit, value, currency = _figure(item, value_words[0], usage)
    date = _price_date(pairs, today, usage)
    return {"item": "electricity" if kind == "electricity" else gpu_item(item), "kind": kind,
            "value": value, "unit": unit, "currency": currency, "source": pairs["source"],
            "date": date.isoformat(), "confirm": confirm}


def _figure(item: str, word: str, usage: str) -> tuple[str, str, float, str]:
    """(kind, unit, value, currency) of a price's one figure, checked."""
    currency = ""
    try:
        if item.lower() == "electricity":
            m = re.fullmatch(r"(.+)/kWh", word, re.IGNORECASE)
            if not m:
                raise PlanError(_("`{word}`: write the electricity rate per kWh, e.g. 0.12/kWh",
                                  word=word))
            kind, unit = "electricity", "per kWh"
            value, currency = money.parse(m.group(1), "electricity")
        elif "=" in word:
            kind, unit, value, currency = _gpu_figure(word, usage)
        else:
            m = re.fullmatch(r"(.+)/(h|hr|hour)", word, re.IGNORECASE)
            if not m:
                raise PlanError(_("`{word}`: a rental rate is per GPU-hour, e.g. 2.49/h.",
                                  word=word) + " " + usage)
            kind, unit = "rent", "per GPU-hour"
            value, currency = money.parse(m.group(1), "rate")
        if kind in ("buy", "rent", "electricity") and value <= 0:  # resale may be 0
            raise PlanError(_("`{word}`: {kind} must be greater than 0", word=word,
                              kind=prices.kind_name(kind)))
        money.check_limit(value, currency, kind, word)
    except money.MoneyError as exc:
        raise PlanError(exc.message) from None
    return kind, unit, value, currency


def _gpu_figure(word: str, usage: str) -> tuple[str, str, float, str]:
    """buy=, resale= or power= of a GPU: (kind, unit, value, currency)."""
    kind, _eq, raw = word.partition("=")
    kind = kind.lower()
    if kind not in ("buy", "resale", "power"):
        raise PlanError(_("`{word}`: a GPU's figures are RATE/h, buy=, resale= or "
                          "power=.", word=word) + " " + usage)
    if kind != "power":
        value, currency = money.parse(raw, kind)
        return kind, "per GPU", value, currency
    m = re.fullmatch(r"([0-9.]+)\s*(kW|W)", raw, re.IGNORECASE)
    if raw.strip().startswith("-"):
        raise PlanError(_("`{word}`: power cannot be negative; it is a draw per GPU, e.g. "
                          "power=0.7kW or power=700W", word=word))
    if not m:
        raise PlanError(_("`{word}`: power is a draw per GPU with its unit, e.g. "
                          "power=0.7kW or power=700W", word=word))
    value = number(m.group(1), "power", positive=True)
    value = value / 1000 if m.group(2).lower() == "w" else value
    if value > MAX_POWER_KW:
        raise PlanError(_("`{word}`: {value} kW is more than {most} kW, the most one "
                          "GPU may draw here; give the draw per GPU, not per node "
                          "(e.g. power=0.7kW)", word=word, value=f"{value:g}",
                          most=MAX_POWER_KW))
    return kind, "kW", value, ""


def _price_date(pairs: Json, today: dt.date, usage: str) -> dt.date:
    """The price's source= is given and its date= is a past or present day."""
    if "source" not in pairs:
        raise PlanError(_("A price needs source=: the URL or quote it comes from, so others "
                          "can check it.") + " " + usage)
    if "date" not in pairs:
        raise PlanError(_("A price needs date=YYYY-MM-DD: when it was confirmed.") + " "
                        + usage)
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", pairs["date"]):
            raise ValueError(pairs["date"])
        date = dt.date.fromisoformat(pairs["date"])
    except ValueError:
        raise PlanError(_("`date={raw}`: write the date as YYYY-MM-DD",
                          raw=pairs["date"])) from None
    if date > today:
        raise PlanError(_("`date={raw}` is in the future (today is {today}); give the date the "
                          "price was confirmed", raw=pairs["date"], today=today))
    return date
