"""Money as people write it: `$2.49`, `2,49`, `₩3500`, `3500 KRW`, `KRW 3,500`,
`€2.10`, `3500원`. One reader for every price, returning the amount and the
currency the user wrote (an ISO code, or "" when none was written). Pure.

Rules (docs/commands.md, "How words are read"):
- A currency is a symbol ($ € £ ₩, 원) or an ISO code before or after the figure.
  `$` is read as USD; write CAD, AUD, SGD... for other dollars. `¥` is refused
  (yen or yuan: write JPY or CNY).
- `2.49` and `2,49` are decimals. `1,234,567` and `3,500.50` have thousands
  commas; `1.234,56` thousands dots.
- One separator followed by exactly three digits (`2,490`, `2.490`) could be
  either: in KRW and JPY, which have no minor unit in practice, it is a
  thousands separator; in any other currency `2,490` is refused naming both
  readings, and `2.490` stays a decimal point (as a program would read it).
- Limits are per currency, an order of magnitude above anything real (a B200's
  rent is a few USD per hour): a figure above them is a typo or the wrong unit.
"""
from __future__ import annotations

import re

from worker.i18n import _

SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "₩": "KRW", "원": "KRW"}
SHOWN = {"USD": "$", "EUR": "€", "GBP": "£", "KRW": "₩"}  # a code's symbol, where one is clear
# Units of the currency in one USD, to an order of magnitude only: the sanity limits scale
# by it. Not an exchange rate: no figure here is ever converted.
SCALE = {"USD": 1, "EUR": 1, "GBP": 1, "CHF": 1, "CAD": 1, "AUD": 1, "SGD": 1, "NZD": 1,
         "CNY": 10, "HKD": 10, "SEK": 10, "NOK": 10, "DKK": 10,
         "JPY": 100, "INR": 100, "TWD": 100, "KRW": 1000}
NO_MINOR_UNIT = ("KRW", "JPY")
# The most a figure may be, in USD-like units (× SCALE); "" (no currency) takes the largest
# scale, since the unit is unknown.
LIMITS = {"rent": 1_000, "buy": 1_000_000, "resale": 1_000_000, "electricity": 10}


class MoneyError(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def code(currency: str) -> str:
    """The ISO code of a stored currency ("$" from before codes were kept is USD)."""
    return SYMBOLS.get(currency, currency)


def shown(currency: str) -> str:
    """How a figure's currency is printed before it: $2.49, ₩3,500, CHF 2.10."""
    c = code(currency)
    return SHOWN.get(c, f"{c} " if c else "")


def currency(word: str) -> str:
    """The ISO code of a currency as a channel setting names it: KRW, krw, ₩, $."""
    c = SYMBOLS.get(word.strip()) or word.strip().upper()
    if c not in SCALE:
        raise MoneyError(_("`currency={word}`: not a currency I know; write one of {codes} "
                           "(or $, €, £, ₩), or `currency=` to clear it", word=word,
                           codes=", ".join(SCALE)))
    return c


def parse(raw: str, what: str) -> tuple[float, str]:
    """(amount, currency code) of `raw`, e.g. ("₩3,500", "rate") → (3500.0, "KRW")."""
    text = raw.strip()
    currency = ""
    if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        raise MoneyError(_("`{raw}`: {what} must be a finite number", raw=raw, what=what))
    if re.fullmatch(r"-\s*\S.*|([$€£₩¥]|[A-Za-z]{3})\s*-.*", text):  # -2.49, $-2.49
        raise MoneyError(_("`{raw}`: {what} cannot be negative, e.g. 2.49, $2.49 or ₩3500",
                           raw=raw, what=what))
    m = re.fullmatch(r"([$€£₩¥]|[A-Za-z]{3})?\s*([0-9][0-9.,]*)\s*([A-Za-z]{3}|원)?", text)
    if not m or (m.group(1) and m.group(3)):
        raise MoneyError(_("`{raw}`: {what} must be a number, with at most one currency, e.g. "
                           "2.49, $2.49, ₩3500 or 3500 KRW", raw=raw, what=what))
    mark = m.group(1) or m.group(3) or ""
    if mark == "¥":
        raise MoneyError(_("`{raw}`: ¥ is yen or yuan; write JPY or CNY, e.g. 350 JPY", raw=raw))
    if mark:
        currency = SYMBOLS.get(mark) or mark.upper()
        if currency not in SCALE:
            raise MoneyError(_("`{raw}`: `{mark}` is not a currency I know; write one of "
                               "{codes} (or $, €, £, ₩)", raw=raw, mark=mark,
                               codes=", ".join(SCALE)))
    return amount(m.group(2), currency, raw, what), currency


def amount(digits: str, currency: str, raw: str, what: str) -> float:
    if re.fullmatch(r"\d+(\.\d+)?", digits):
        if currency in NO_MINOR_UNIT and re.fullmatch(r"\d{1,3}\.\d{3}", digits):
            return float(digits.replace(".", ""))
        return float(digits)
    if re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d+)?", digits):
        if digits.count(",") == 1 and "." not in digits and currency not in NO_MINOR_UNIT:
            whole, frac = digits.split(",")
            raise MoneyError(_("`{raw}`: {what} {digits} could be {thousands} (a thousands "
                               "comma) or {decimal} (a decimal comma); write {plain} or "
                               "{decimal}", raw=raw, what=what, digits=digits,
                               thousands=f"{int(whole + frac):,}", decimal=f"{whole}.{frac}",
                               plain=whole + frac))
        return float(digits.replace(",", ""))
    if re.fullmatch(r"\d+,\d+", digits):
        return float(digits.replace(",", "."))  # a decimal comma: 2,49
    if re.fullmatch(r"\d{1,3}(\.\d{3})+(,\d+)?", digits):
        return float(digits.replace(".", "").replace(",", "."))  # 1.234.567 or 1.234,56
    raise MoneyError(_("`{raw}`: {what} {digits} is not a number I can read; write it with a "
                       "decimal point and no thousands separators, e.g. 2.49 or 3500", raw=raw,
                       what=what, digits=digits))


def check_limit(value: float, currency: str, kind: str, raw: str) -> None:
    """Refuse a figure no real price reaches (a typo, or a price per month or per node)."""
    if kind not in LIMITS:
        return
    top = LIMITS[kind] * SCALE.get(currency, max(SCALE.values()))
    if value > top:
        values = dict(raw=raw, value=f"{value:,.10g}", top=f"{top:,}",
                      cur=currency or _("any currency (none was written)"))
        why = {"rent": _("`{raw}`: {value} is too much to be real: the limit refuses a rent "
                         "above {top} per GPU-hour in {cur}.", **values),
               "electricity": _("`{raw}`: {value} is too much to be real: the limit refuses "
                                "electricity above {top} per kWh in {cur}.", **values),
               "buy": _("`{raw}`: {value} is too much to be real: the limit refuses a purchase "
                        "price above {top} per GPU in {cur}.", **values),
               "resale": _("`{raw}`: {value} is too much to be real: the limit refuses a "
                           "resale value above {top} per GPU in {cur}.", **values)}[kind]
        raise MoneyError(why + " " + _("Check the digits and the unit (per GPU and per hour, "
                                       "not per node or per month)."))
