"""Bytes and seconds as people read them: three significant figures and the
unit that fits. The one formatter for every report, reply and table, in the
worker and in the bot.

None, a figure not measurable, reads "n/a". One that is not a finite number
(a NaN or infinity in a report stored before the bot refused them) reads "not
measured", never "nan" or "inf"; so does a negative one that is `measured` (a
peak, a time), where only a difference or a fitted prediction may be below zero."""
from __future__ import annotations

import math

from worker.i18n import _


def size(n: float | None, measured: bool = False) -> str:
    """Bytes in binary units: 512 B, 3.1 KiB, 245 MiB, 7.11 GiB, 141 GiB."""
    if n is None:
        return _("n/a")
    if not _shown(n, measured):
        return _("not measured")
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{sign}{value:.3g} {unit}" if value < 100 else f"{sign}{value:.0f} {unit}"
    return f"{sign}{n:.3g} B" if n >= 1 else "0 B"


def duration(x: float | None, measured: bool = False) -> str:
    """Seconds: 12.3 s, 451 ms, 82.5 µs, 90 ns (as measured, never rounded to hours)."""
    if x is None:
        return _("n/a")
    if not _shown(x, measured):
        return _("not measured")
    sign, x = ("-" if x < 0 else ""), abs(x)
    if x < 1000:  # 3 significant digits first: 0.99999 ms is "1 ms", not "1e+03 µs"
        x = float(f"{x:.3g}")
    if x >= 1:
        return f"{sign}{x:.3g} s" if x < 1000 else f"{sign}{x:.0f} s"
    if x >= 1e-3:
        return f"{sign}{x * 1e3:.3g} ms"
    if x >= 1e-6:
        return f"{sign}{x * 1e6:.3g} µs"
    return f"{sign}{x * 1e9:.3g} ns" if x >= 1e-9 else "0 s"


def number(x: float | None, spec: str, measured: bool = True, unit: str = "") -> str:
    """`format(x, spec)` and its `unit` ("20.0 tokens/s", "54%") for a measured
    figure; "n/a" for None."""
    if x is None:
        return _("n/a")
    return f"{format(x, spec)}{unit}" if _shown(x, measured) else _("not measured")


def _shown(x, measured: bool) -> bool:
    """A number that prints as itself: finite, and not below zero if measured."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x) and not (measured and x < 0)
    except OverflowError:  # an int past a float's range
        return False
