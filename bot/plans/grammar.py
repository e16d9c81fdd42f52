"""What every `/plan` parser shares: its error, the command it returns, and the
checks of key=value pairs, numbers and GPU names. Pure."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from bot.fits import gpus
from bot.states import Json
from worker.i18n import _, did_you_mean, sentences


class PlanError(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PlanCommand:
    action: str
    plan: str | None = None
    args: Json = field(default_factory=dict)


def no_more(rest: list[str], what: str) -> None:
    if rest:
        raise PlanError(_("`{word}`: `{command}` takes nothing more", word=rest[0], command=what))


def key_values(words: list[str], allowed: tuple[str, ...], what: str, empty: bool = False) -> Json:
    """key=value pairs; with `empty`, `key=` is kept as "" (an item unset)."""
    out = {}
    for word in _units_joined(words):
        key, eq, raw = word.partition("=")
        if not eq or not key or (not raw.strip() and not empty):
            raise PlanError(_("`{word}`: write key=value (quote values with spaces: "
                              "note=\"like this\"); {what} takes {keys}", word=word, what=what,
                              keys=", ".join(allowed)))
        if key not in allowed:
            raise PlanError(sentences(
                _("`{word}`: {what} has no `{key}`.", word=word, what=what, key=key),
                did_you_mean(key, allowed, after=f"={raw}"),
                _("It takes {keys}", keys=", ".join(allowed))))
        if key in out:
            raise PlanError(_("`{word}`: {key} is given twice", word=word, key=key))
        out[key] = raw.strip()
    return out


def _units_joined(words: list[str]) -> list[str]:
    """`period=6 months` typed unquoted is one figure and its unit, not two words:
    joined, the figure's own check answers it (`6mo`)."""
    out: list[str] = []
    for word in words:
        figure = FIGURE.fullmatch(out[-1].partition("=")[2].lower()) if out else None
        if figure and not figure.group(2) and word.lower() in UNIT_WORDS:
            out[-1] = f"{out[-1]} {word}"
        else:
            out.append(word)
    return out


def gpu_item(raw: str, key: str = "") -> str:
    """What a price is for: a GPU of the table by its table name. A name the table
    lacks is kept (upper case) when it is not a typo of one, so a price can be
    recorded for a part the table does not list yet."""
    try:
        return gpus.named(raw).name
    except gpus.GpuNameError as exc:
        if exc.why != "unknown":
            raise PlanError(f"`{key}{raw}`: {exc}") from None
    return raw.upper()


def number(raw: str, what: str, low: float = 0.0, positive: bool = False,
           example: str = "", shown: str = "") -> float:
    """A figure, checked: a number, finite, its sign, at least `low`. Each refusal
    names the rule and an example (`example`, else `{what}=1`); `shown` is the
    word as typed (`hours=-3h`), else `{what}={raw}`."""
    values = dict(key=what, word=shown or f"{what}={raw}", example=example or f"{what}=1")
    try:
        value = float(raw)
    except ValueError:
        raise PlanError(_("`{word}`: {key} must be a number, e.g. {example}", **values)) from None
    if not math.isfinite(value):
        raise PlanError(_("`{word}`: {key} must be a finite number, e.g. {example}", **values))
    if value < 0 <= low:
        raise PlanError(_("`{word}`: {key} cannot be negative, e.g. {example}", **values))
    if positive and value <= 0:
        raise PlanError(_("`{word}`: {key} must be greater than 0, e.g. {example}", **values))
    if value < low:
        raise PlanError(_("`{word}`: {key} must be at least {low}, e.g. {example}", low=f"{low:g}",
                          **values))
    return value


# A figure and the unit after it: `2`, `1.5h`, `90 min`, `-3`, `1e9`, `6 months`.
FIGURE = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*([a-z]*)")
MAX_HOURS = 1_000_000  # GPU-hours in one figure: 114 GPU-years, beyond any one block
HOUR_UNITS = {**dict.fromkeys(("", "h", "hr", "hrs", "hour", "hours"), 1.0),
              **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 1 / 60)}
# Units of time that hours= does not take, in hours: the refusal gives the figure in hours.
OTHER_HOURS = {**dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1 / 3600),
               **dict.fromkeys(("d", "day", "days"), 24.0),
               **dict.fromkeys(("w", "wk", "week", "weeks"), 168.0)}


def hours(raw: str, what: str, positive: bool = False) -> float:
    """`2`, `2h`, `1.5hr`, `90m` or `90min` as hours: every figure in hours reads the
    same (hours=, handoff=, prep=...). A refusal names the rule: the unit, the sign
    or the limit."""
    word, example = f"{what}={raw}", f"{what}=2h"
    m = FIGURE.fullmatch(raw.strip().lower())
    if not m:
        raise PlanError(_("`{word}`: {key} is a number of hours, with h or m or no unit, e.g. "
                          "{key}=2, {key}=2h or {key}=90m", word=word, key=what))
    figure, unit = m.groups()
    if unit in OTHER_HOURS:  # 1.5d: days are not taken, but said in hours
        value = float(figure) * OTHER_HOURS[unit]
        raise PlanError(_("`{word}`: {key} takes hours (h) or minutes (m), not `{unit}`; "
                          "{raw} is {hours} h, so write {key}={hours}h", word=word, key=what,
                          unit=unit, raw=raw.strip(), hours=f"{value:.4g}"))
    if unit not in HOUR_UNITS:
        raise PlanError(_("`{word}`: `{unit}` is not a unit of {key}; write hours (h) or minutes "
                          "(m), e.g. {key}=2h or {key}=90m", word=word, unit=unit, key=what))
    value = number(figure, what, positive=positive, example=example, shown=word)
    value *= HOUR_UNITS[unit]
    if value > MAX_HOURS:
        raise PlanError(_("`{word}`: {hours} hours is more than {most}, the most one figure in "
                          "hours may be (114 GPU-years); check the digits and the unit, e.g. "
                          "{key}=1200h", word=word, key=what, hours=f"{value:,.10g}",
                          most=f"{MAX_HOURS:,}"))
    return value


def count(raw: str, what: str, high: int = 10**7) -> int:
    """A whole number from 1 to `high` (runs=, configs=, gpus=, batch=...)."""
    values = dict(word=f"{what}={raw}", key=what, high=f"{high:,}", example=f"{what}=10")
    try:
        value = int(raw, 10)
    except ValueError:
        fraction = FIGURE.fullmatch(raw.strip().lower())
        raise PlanError(_("`{word}`: {key} is a count, a whole number from 1 to {high} in "
                          "digits, e.g. {example}", **values) if fraction and not
                        fraction.group(2) else
                        _("`{word}`: {key} must be a whole number from 1 to {high}, e.g. "
                          "{example}", **values)) from None
    if value < 0:
        raise PlanError(_("`{word}`: {key} cannot be negative; it is a count from 1 to {high}, "
                          "e.g. {example}", **values))
    if not 1 <= value <= high:
        raise PlanError(_("`{word}`: {key} must be from 1 to {high}, e.g. {example}", **values))
    return value


# `period=` units: what each is in days, and the words people write for it.
PERIOD_DAYS = {"d": 1.0, "w": 7.0, "mo": 30.44, "y": 365.25}
PERIOD_WORDS = {**dict.fromkeys(("day", "days"), "d"),
                **dict.fromkeys(("wk", "week", "weeks"), "w"),
                **dict.fromkeys(("m", "mon", "mos", "month", "months"), "mo"),
                **dict.fromkeys(("yr", "yrs", "year", "years"), "y")}


def period_days(raw: str) -> float:
    """`10d`, `6w`, `3mo` or `1y` in days; `6 months` is answered with `6mo`."""
    word = f"period={raw}"
    m = FIGURE.fullmatch(raw.strip().lower())
    unit = m.group(2) if m else ""
    if m and unit in PERIOD_WORDS:
        raise PlanError(_("`{word}`: write the unit as {unit}: period={figure}{unit} (units: d, "
                          "w, mo, y)", word=word, unit=PERIOD_WORDS[unit], figure=m.group(1)))
    if not m or unit not in PERIOD_DAYS:
        raise PlanError(_("`{word}`: period is a length with a unit d, w, mo or y, e.g. 10d, "
                          "6w, 3mo or 1y", word=word))
    return number(m.group(1), "period", positive=True, example="period=3mo",
                  shown=word) * PERIOD_DAYS[unit]


def utilization(raw: str) -> float:
    """A share from 0 to 1, or a percentage: `0.6`, `60%`."""
    pct = raw.strip().endswith("%")
    value = number(raw.strip().rstrip("%"), "utilization", positive=True,
                   example="utilization=0.6", shown=f"utilization={raw}")
    value = value / 100 if pct else value
    if value > 1:
        raise PlanError(_("`utilization={raw}`: a share is at most 1 (or 100%), e.g. "
                          "utilization=0.6 or utilization=60%", raw=raw))
    return value


UNIT_WORDS = {*HOUR_UNITS, *OTHER_HOURS, *PERIOD_DAYS, *PERIOD_WORDS} - {""}
