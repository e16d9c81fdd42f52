"""Confirmed prices: lookup, staleness, cost and break-even. Pure: today is
passed in. There is no built-in price list; every figure here was typed by a
person with its source and date (`/plan price`)."""
from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_EVEN, Decimal

from bot.fits import gpus
from bot.plans import money as codes
from bot.states import Json
from worker.i18n import N_, _, pgettext

# How a stored unit reads (parse_price writes these words).
UNITS = (N_("per GPU-hour"), N_("per GPU"), N_("per kWh"))
# How a stored kind reads: the words are stored in English and shown in the reader's.
KINDS = {"rent": N_("rent"), "buy": N_("buy"), "resale": N_("resale"), "power": N_("power"),
         "electricity": N_("electricity")}


def kind_name(kind: str) -> str:
    return _(KINDS[kind]) if kind in KINDS else kind

STALE_DAYS = 30


def find(prices: list[Json], item: str | None, kind: str) -> Json | None:
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


def age_days(price: Json, today: dt.date) -> int:
    return (today - dt.date.fromisoformat(price["date"])).days


def is_stale(price: Json, today: dt.date) -> bool:
    return age_days(price, today) > STALE_DAYS


def _step(currency: str) -> Decimal:  # KRW and JPY have no minor unit in practice
    return Decimal("1") if codes.code(currency) in codes.NO_MINOR_UNIT else Decimal("0.01")


def money(value: Decimal | float, currency: str = "") -> str:
    q = Decimal(str(value)).quantize(_step(currency), ROUND_HALF_EVEN)
    return f"{codes.shown(currency)}{q:,}"


def cost(hours: Decimal, rent: Json) -> Decimal:
    """GPU-hours × the confirmed rate, to the cent (to the won or yen)."""
    return (hours * Decimal(str(rent["value"]))).quantize(_step(rent["currency"]),
                                                          ROUND_HALF_EVEN)


def cited(price: Json, today: dt.date) -> str:
    """A price with where it came from and how old it is."""
    unit = _(price["unit"]) if price["unit"] in UNITS else price["unit"]
    stale = (", " + _("STALE: {days} days old, reconfirm with `/plan price`",
                      days=age_days(price, today)) if is_stale(price, today) else "")
    item = "" if price["kind"] == "electricity" else f"{price['item']} "
    figure = (f"{price['value']:g}" if price["kind"] == "power"
              else f"{codes.shown(price['currency'])}{price['value']:g}")
    # "$2.49 per GPU-hour" in English, "GPU-시간당 $2.49" in Korean (docs/i18n.md)
    value = pgettext("a price's figure", "{figure} {unit}", figure=figure, unit=unit)
    pid = f"P{price['id']}, " if price.get("id") else ""  # which recorded price: `/plan prices`
    return f"{item}{kind_name(price['kind'])} {value} (" + _(
        "{id}source: {source}, confirmed {date}{stale})", id=pid, source=price["source"],
        date=price["date"], stale=stale)


def breakeven(buy: Json, resale: Json | None, rent: Json, power: Json, electricity: Json,
              utilization: float) -> Json:
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


# A new figure more than this many times above or below the one it replaces is
# far beyond a market move between two quotes (rents moved well under 2× a year);
# it is far more often a typo, a price per node or month, or another currency.
CONFIRM_FACTOR = 3
# A GPU's first figure of a kind is held to a wider band around the same kind's
# figures for the other GPUs recorded here: GPUs differ by generation and size, so
# this only catches what no GPU here comes near (a price per node, month or cent).
BAND_FACTOR = 10


def resale_above_buy(new: Json, current: list[Json]) -> str | None:
    """Why `new` is refused: a resale value above the purchase price (or a
    purchase below the resale value) of the same GPU, in one currency."""
    if new["kind"] not in ("buy", "resale"):
        return None
    other = find(current, new["item"], "resale" if new["kind"] == "buy" else "buy")
    if not other or codes.code(other["currency"]) != codes.code(new["currency"]):
        return None  # figures in two currencies are never compared (nor converted)
    buy, resale = (new, other) if new["kind"] == "buy" else (other, new)
    if resale["value"] <= buy["value"]:
        return None
    return _("{item}: resale {resale} is above buy {buy}; a GPU sells for less than it cost. "
             "Check the figures, or correct the other one first (`/plan price correct P{id} "
             "...`)", item=new["item"], resale=money(resale["value"], resale["currency"]),
             buy=money(buy["value"], buy["currency"]), id=other.get("id"))


def needs_confirm(new: Json, current: list[Json]) -> str | None:
    """Why `new` waits for `confirm`: the figure that applies now for its item and
    kind is in another currency, or more than CONFIRM_FACTOR times larger or
    smaller. Checked whatever `new`'s date: an older quote applies once the
    newer one is deleted."""
    old = find(current, new["item"], new["kind"])
    if not old:
        return _outside_band(new, current)
    # A figure without a currency is compared by size only: 25000 against $2.49 is caught
    # by the factor, and 2.50 beside $2.50 is most likely the same dollars.
    same = (codes.code(old["currency"]) == codes.code(new["currency"])
            or not (old["currency"] and new["currency"]))
    ratio = (max(old["value"], new["value"]) / min(old["value"], new["value"])
             if min(old["value"], new["value"]) > 0 else None)
    if same and ratio is not None and ratio <= CONFIRM_FACTOR:
        return None
    why = (_("it is {ratio}× that figure (more than {most}× apart)",
             ratio=f"{ratio:,.1f}", most=CONFIRM_FACTOR) if same and ratio else
           _("it is in {new} and that figure in {old}",
             new=codes.code(new["currency"]), old=codes.code(old["currency"])) if not same else
           _("one of the two is 0"))
    return _("Not recorded yet: {item} {kind} {new} differs from P{id}, {old}, the figure "
             "that applies now; {why}. If {new} is right, send the same command again with "
             "`confirm` at the end.",
             item=new["item"], kind=kind_name(new["kind"]), new=_figure(new), id=old.get("id"),
             old=_figure(old), why=why)


def _figure(price: Json) -> str:
    return (f"{price['value']:g} kW" if price["kind"] == "power"
            else f"{codes.shown(price['currency'])}{price['value']:g}")


def _outside_band(new: Json, current: list[Json]) -> str | None:
    """Why a GPU's first `new` figure of its kind waits for `confirm`: it is more
    than BAND_FACTOR times outside the range of that kind's figures for other GPUs
    in its currency (a figure without one compared by size)."""
    peers = [p["value"] for p in current if p["kind"] == new["kind"] and p["value"] > 0
             and (codes.code(p["currency"]) == codes.code(new["currency"])
                  or not (p["currency"] and new["currency"]))]
    if not peers or new["value"] <= 0:
        return None
    low, high = min(peers), max(peers)
    if low / BAND_FACTOR <= new["value"] <= high * BAND_FACTOR:
        return None
    return _("Not recorded yet: {item} {kind} {new} is more than {most}× outside the {kind} "
             "figures recorded here for other GPUs ({low} to {high}). If {new} is right, send "
             "the same command again with `confirm` at the end.", item=new["item"],
             kind=kind_name(new["kind"]), new=_figure(new), most=BAND_FACTOR,
             low=_figure({**new, "value": low}), high=_figure({**new, "value": high}))
