"""Numbers as people read them: one formatter per kind of figure, used by every table, chart and sentence.

The counting convention behind the figures (1 GB = 1e9 B, an FMA = 2 FLOP) is
:data:`pygpuperf.core.results.COUNTING_CONVENTION`; sizes of memory and caches are binary (KiB, MiB, GiB).
"""

from __future__ import annotations

import math


def figure(value: float | None) -> str:
    """A rate or size in a sentence: thousands separators from 100 up, three significant digits below
    (4,689; 55.5; 0.52); "-" for none."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_number(value: float | None, digits: int = 1) -> str:
    """A table cell: thousands separators from 100 up, `digits` decimals from 1, three significant digits below."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if abs(value) >= 1 else f"{value:.3g}"


def format_bytes(n: float) -> str:
    """'32 KiB', '1.5 MiB', '50 MiB', '1020 KiB': binary units, three significant digits (more above 100)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"
    return f"{n:.0f} B"


def ms(us: float) -> str:
    """Microseconds as milliseconds: two decimals, one from 10 ms up."""
    return f"{us / 1e3:.2f}" if us < 1e4 else f"{us / 1e3:.1f}"


def percent(share: float) -> str:
    """A share as a percentage with one decimal: 0.157 -> '15.7%'."""
    return f"{100 * share:.1f}%"


def times(ratio: float) -> str:
    """A ratio: 2.2x, 0.19x, 13x, 1,200x; a third digit where two would round to 1."""
    if ratio >= 99.5:
        return f"{ratio:,.0f}x"
    text = f"{ratio:.2g}"
    return f"{ratio:.3g}x" if text == "1" else f"{text}x"
