"""How a figure is printed: each one rounded on its own to significant digits,
never to the places of a bigger figure beside it, so a 0.0857 GPU-h block is
not shown as 0.00 next to a 120 GPU-h one. Totals are computed from the
unrounded parts and rounded once (docs/commands.md, "Figures"). Pure."""
from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal

from worker.i18n import _

DIGITS = 3  # significant digits of every figure shown
MAX_DIGITS = 6  # an interval gets up to this many to keep its ends apart


def rounded(x: Decimal | float, digits: int = DIGITS) -> Decimal:
    """`x` to `digits` significant digits; a whole part is never rounded away
    (12,345.6 → 12,346)."""
    d = x if isinstance(x, Decimal) else Decimal(repr(float(x)))
    if d == 0:
        return Decimal(0)
    places = max(0, digits - 1 - d.adjusted())
    q = d.quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
    if q.adjusted() > d.adjusted() and places > 0:  # 0.09996 → 0.100, not 0.1000
        q = d.quantize(Decimal(1).scaleb(-(places - 1)), ROUND_HALF_EVEN)
    return q


def number(x: Decimal | float | None, digits: int = DIGITS) -> str:
    """A figure as shown: "0.0857", "2.50", "1,235"; "n/a" for None, "not
    measured" for a NaN or infinity (never printed as one)."""
    if x is None:
        return _("n/a")
    if not finite(x):
        return _("not measured")
    q = rounded(x, digits)
    # Decimal's own format turns 7.53e-8 into "7.53E-8" and 1.2e-6 into "0.0000012":
    # positional down to a millionth, a plain exponent below
    return f"{q:,f}" if q == 0 or q.adjusted() >= -6 else f"{q:e}"


def signed(x: Decimal | float, digits: int = DIGITS) -> str:
    """A difference: "+0.0012", "-3.40", "0"."""
    if not finite(x):
        return _("not measured")
    if rounded(x, digits) == 0:
        return "0"
    return ("+" if x > 0 else "") + number(x, digits)


def gpu_hours(x: Decimal | float | None) -> str:
    """Hours a GPU was held: below zero is no measurement."""
    return _("not measured") if x is not None and finite(x) and x < 0 else number(x)


def interval(lo: Decimal | float, hi: Decimal | float) -> str:
    """"lo–hi", with more digits where three would print two different ends alike."""
    if not (finite(lo) and finite(hi)):
        return _("not measured")
    for digits in range(DIGITS, MAX_DIGITS + 1):
        a, b = number(lo, digits), number(hi, digits)
        if a != b or lo == hi:
            break
    return f"{a}–{b}"


def change(before: Decimal | float, after: Decimal | float) -> str:
    """The relative change from `before` to `after` as a percentage of the two
    figures as shown, so it agrees with them; "" when `before` shows as 0."""
    if not (finite(before) and finite(after)):
        return ""
    b, a = rounded(before), rounded(after)
    if b == 0:
        return ""
    r = (a - b) / b
    return f"{r:+.1%}" if r != 0 and abs(r) < Decimal("0.1") else f"{r:+.0%}"


def finite(x: Decimal | float) -> bool:
    return x.is_finite() if isinstance(x, Decimal) else math.isfinite(x)
