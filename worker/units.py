"""Bytes and seconds as people read them: three significant figures and the
unit that fits. The one formatter for every report, reply and table, in the
worker and in the bot."""
from __future__ import annotations


def size(n: float | None) -> str:
    """Bytes in binary units: 512 B, 3.1 KiB, 245 MiB, 7.11 GiB, 141 GiB."""
    if n is None:
        return "n/a"
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            value = n / scale
            return f"{sign}{value:.3g} {unit}" if value < 100 else f"{sign}{value:.0f} {unit}"
    return f"{sign}{n:.3g} B" if n >= 1 else "0 B"


def duration(x: float | None) -> str:
    """Seconds: 12.3 s, 451 ms, 82.5 µs, 90 ns (as measured, never rounded to hours)."""
    if x is None:
        return "n/a"
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
