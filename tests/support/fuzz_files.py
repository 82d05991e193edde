"""Shared steps of the importer fuzz tests: bit-flip and truncate a file's bytes, then load it
with peak memory measured."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

from hypothesis import strategies as st

from recordings.workloads.traces import TraceFormatError, TraceLoad, load_trace


def mutated(data, text: str, max_flips: int) -> bytes:
    """``text``'s UTF-8 bytes with up to ``max_flips`` single bits flipped, cut at a drawn length."""
    raw = bytearray(text.encode())
    for _ in range(data.draw(st.integers(0, max_flips))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    return bytes(raw[:data.draw(st.integers(0, len(raw)))])


def load_bounded(path: Path, raw: bytes, slack_bytes: int) -> TraceLoad | None:
    """Write ``raw`` to ``path`` and load it: the load, or None when the whole file was refused
    (the error must name the file). Asserts peak memory stays under 64 bytes per file byte plus
    ``slack_bytes``."""
    path.write_bytes(raw)
    tracemalloc.start()
    try:
        load = load_trace(path)
    except TraceFormatError as e:
        assert str(path) in str(e)
        return None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 * len(raw) + slack_bytes, peak              # memory bounded by the file's size
    return load
