"""Confirmed prices: lookup, staleness, cost and break-even. Pure: today is
passed in. There is no built-in price list; every figure here was typed by a
person with its source and date (`/plan price`)."""
from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_EVEN, Decimal

from bot.fits import gpus
from bot.plans import money as codes
from worker.i18n import N_, _

# How a stored unit reads (parse_price writes these words).
UNITS = (N_("per GPU-hour"), N_("per GPU"), N_("per kWh"))

STALE_DAYS = 30


def find(prices: list[dict], item: str | None, kind: str) -> dict | None:
    """The price of `kind` that applies for `item` (GPU names compare by the one
    table's name: an H100 price is H100-80GB's; others case-insensitively);
    `prices` holds one per item and kind, the one confirmed latest (Store.prices)."""
    if not item:
        return None
    want = gpus.canonical(item).lower()
    # Rows stored before names were canonical ("H100" beside "H100-80GB") are one
    # GPU too: of all its rows, the one confirmed latest applies.
    return max((p for p in prices if p["kind"] == kind
                and gpus.canonical(p["item"]).lower() == want),
               key=lambda p: (p["date"], p.get("id") or 0), default=None)


def age_days(price: dict, today: dt.date) -> int:
    return (today - dt.date.fromisoformat(price["date"])).days


def is_stale(price: dict, today: dt.date) -> bool:
    return age_days(price, today) > STALE_DAYS


def _step(currency: str) -> Decimal:  # KRW and JPY have no minor unit in practice
    return Decimal("1") if codes.code(currency) in codes.NO_MINOR_UNIT else Decimal("0.01")


def money(value: Decimal | float, currency: str = "") -> str:
    q = Decimal(str(value)).quantize(_step(currency), ROUND_HALF_EVEN)
    return f"{codes.shown(currency)}{q:,}"


def cost(hours: Decimal, rent: dict) -> Decimal:
    """GPU-hours × the confirmed rate, to the cent (to the won or yen)."""
    return (hours * Decimal(str(rent["value"]))).quantize(_step(rent["currency"]),
                                                          ROUND_HALF_EVEN)


def cited(price: dict, today: dt.date) -> str:
    """A price with where it came from and how old it is."""
    unit = _(price["unit"]) if price["unit"] in UNITS else price["unit"]
    stale = (", " + _("STALE: {days} days old, reconfirm with `/plan price`",
                      days=age_days(price, today)) if is_stale(price, today) else "")
    item = "" if price["kind"] == "electricity" else f"{price['item']} "
    value = (f"{price['value']:g} {unit}" if price["kind"] == "power"
             else f"{codes.shown(price['currency'])}{price['value']:g} {unit}")
    pid = f"P{price['id']}, " if price.get("id") else ""  # which recorded price: `/plan prices`
    return f"{item}{price['kind']} {value} (" + _(
        "{id}source: {source}, confirmed {date}{stale})", id=pid, source=price["source"],
        date=price["date"], stale=stale)


def breakeven(buy: dict, resale: dict | None, rent: dict, power: dict, electricity: dict,
              utilization: float) -> dict:
    """docs/design.md §4, rule 3: H = (hardware − resale) / (rent per h − power per h),
    days = H / (24 · utilization). Power per h = kW × electricity rate."""
    power_per_h = power["value"] * electricity["value"]
    net = buy["value"] - (resale["value"] if resale else 0.0)
    margin = rent["value"] - power_per_h
    if margin <= 0:
        return {"hours": None, "days": None, "power_per_h": power_per_h, "net": net,
                "why": _("running an owned GPU costs as much as renting one per hour "
                         "({power} ≥ {rent}): buying never breaks even",
                         power=f"{power_per_h:.3f}", rent=f"{rent['value']:g}")}
    h = net / margin
    return {"hours": h, "days": h / (24 * utilization), "power_per_h": power_per_h, "net": net,
            "why": None}
