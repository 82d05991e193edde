"""Counts in messages for people: "1 block", "2 blocks", "1,024 blocks" (never "1 blocks")."""
from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` with thousands separators and ``word`` in the singular when ``n`` is 1, else
    ``many`` (default ``word + "s"``): ``plural(1, "block") == "1 block"``,
    ``plural(3, "entry", "entries") == "3 entries"``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
