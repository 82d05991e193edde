"""Numbers as people read them (the window, the CLI's tables, the compare report): no
scientific notation anywhere.

Durations in seconds read ``2,290 s``, ``38.2 s``, ``412 ms``, ``7.5 µs`` (:func:`seconds_text`);
other quantities (counts, clock units that are not seconds, such as a virtual clock's steps)
read ``2,290``, ``38.2``, ``0.412`` (:func:`number_text`). Three significant digits below 100,
whole numbers with thousands separators from 100 up: the digits a table column can hold and a
reader can compare at a glance.
"""
from __future__ import annotations

import math

NONE_TEXT = "–"      # no value (not yet known)


def number_text(x: float | None) -> str:
    """``x`` (any float, None) as ``2,290`` / ``38.2`` / ``0.412`` / ``0`` (None, NaN: "–").
    Three significant digits below 100 (down to 0.001; smaller magnitudes print as ``0``),
    whole with thousands separators from 100 up; never an exponent."""
    if x is None or not math.isfinite(x):
        return NONE_TEXT
    a = abs(x)
    if a >= 99.95:
        return f"{x:,.0f}"
    if a < 0.0005:
        return "0"
    digits = 3 - 1 - math.floor(math.log10(a))       # 3 significant digits after the point
    text = f"{x:.{max(digits, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def signed_text(x: float | None) -> str:
    """:func:`number_text` with its sign: ``+6,390`` / ``-0.0347`` / ``0``."""
    text = number_text(x)
    return f"+{text}" if x is not None and text not in (NONE_TEXT, "0") and x > 0 else text


def seconds_text(x: float | None, unit: str = "s") -> str:
    """A duration of ``x`` seconds in the unit that reads best: ``2,290 s``, ``38.2 s``,
    ``412 ms``, ``7.5 µs``, ``0 s`` (None, NaN: "–"). ``unit`` names the seconds (``"sim s"``
    for a simulated device's seconds: ``412 sim ms``)."""
    if x is None or not math.isfinite(x):
        return NONE_TEXT
    prefix = unit[:-1] if unit.endswith("s") else ""          # "sim s" -> "sim "
    a = abs(x)
    if a == 0:
        return f"0 {unit}"
    if a >= 0.9995:
        return f"{number_text(x)} {unit}"
    if a >= 0.0009995:
        return f"{number_text(x * 1e3)} {prefix}ms"
    if a >= 0.0000009995:
        return f"{number_text(x * 1e6)} {prefix}µs"
    return f"<1 {prefix}µs" if x > 0 else f">-1 {prefix}µs"


def clock_text(x: float | None, unit: str) -> str:
    """A value of the engine clock (or a duration on it) in ``unit`` (``"s"``, ``"sim s"``:
    :func:`seconds_text`; ``"steps"`` or ``""``: :func:`number_text` and the unit)."""
    if unit in ("s", "sim s"):
        return seconds_text(x, unit)
    text = number_text(x)
    return f"{text} {unit}" if unit and text != NONE_TEXT else text
