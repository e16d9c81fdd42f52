"""What every `/plan` parser shares: its error, the command it returns, and the
checks of key=value pairs, numbers and GPU names. Pure."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from bot.fits import gpus
from bot.states import Json
from worker.i18n import _


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
    for word in words:
        key, eq, raw = word.partition("=")
        if not eq or not key or (not raw.strip() and not empty):
            raise PlanError(_("`{word}`: write key=value (quote values with spaces: "
                              "note=\"like this\"); {what} takes {keys}", word=word, what=what,
                              keys=", ".join(allowed)))
        if key not in allowed:
            raise PlanError(_("`{word}`: {what} has no `{key}`; it takes {keys}", word=word,
                              what=what, key=key, keys=", ".join(allowed)))
        if key in out:
            raise PlanError(_("`{word}`: {key} is given twice", word=word, key=key))
        out[key] = raw.strip()
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


def number(raw: str, what: str, low: float = 0.0, positive: bool = False) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise PlanError(_("`{key}={raw}`: {key} must be a number", key=what, raw=raw)) from None
    if not math.isfinite(value):
        raise PlanError(_("`{key}={raw}`: {key} must be a finite number", key=what, raw=raw))
    if positive and value <= 0:
        raise PlanError(_("`{key}={raw}`: {key} must be greater than 0", key=what, raw=raw))
    if value < low:
        raise PlanError(_("`{key}={raw}`: {key} must be at least {low}", key=what, raw=raw,
                          low=f"{low:g}"))
    return value
