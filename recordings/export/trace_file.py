"""A trace-event JSON file written one event at a time (never held whole in memory).

The file is the JSON Object Format of Google's Trace Event Format (the format Chrome's
about:tracing and the Perfetto UI open): ``{"otherData": {...}, "displayTimeUnit": "ms",
"traceEvents": [event, ...]}``. Events need not be in timestamp order; readers sort them. Each
event is serialised with the ``json`` module as it is emitted, and counted per process and
phase for the export's report.
"""
from __future__ import annotations

import json
import json.encoder
from collections import Counter
from pathlib import Path
from typing import IO, Any, Callable, Mapping


def _compact_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), allow_nan=False)`` as one reusable function:
    the ``json`` module's own C encoder made once, not per event (``json.dumps`` makes it anew
    on every call), with the same string escaping and float formatting; the pure-Python encoder
    where CPython's C part is missing. Raises ``ValueError`` for NaN or infinity."""
    make = json.encoder.c_make_encoder
    if make is None:
        return json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    default = json.JSONEncoder().default          # raises TypeError for what JSON cannot hold
    encoder = make(None, default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
    return lambda value: "".join(encoder(value, 0))


class TraceFile:
    """Open ``path`` for writing and stream events into it; use as a context manager (the file
    is completed on a clean exit and removed after an exception, so no half-written trace is
    left behind). ``other_data`` goes to the top-level ``otherData`` object (trace metadata).
    ``process_names`` maps pid -> name for :attr:`counts`. Raises ``OSError`` if the file
    cannot be written."""

    def __init__(self, path: str | Path, other_data: Mapping[str, Any],
                 process_names: Mapping[int, str]) -> None:
        self.path = Path(path)
        self.process_names = dict(process_names)
        self.counts: Counter[tuple[str, str]] = Counter()   # (process name, ph) -> events
        self._other = dict(other_data)
        self._out: IO[str] | None = None
        self._first = True
        self._encode = _compact_encoder()

    def __enter__(self) -> "TraceFile":
        self._out = self.path.open("w", encoding="utf-8")
        head = json.dumps({"otherData": self._other, "displayTimeUnit": "ms"})
        self._out.write(head[:-1] + ', "traceEvents": [\n')
        return self

    def emit(self, event: Mapping[str, Any]) -> None:
        """Write one event (a mapping with at least ``ph``, ``pid``; see the format)."""
        assert self._out is not None, "TraceFile used outside its with block"
        if not self._first:
            self._out.write(",\n")
        self._first = False
        self._out.write(self._encode(event))
        self.counts[(self.process_names.get(event["pid"], str(event["pid"])), event["ph"])] += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        if exc_type is None:
            out.write("\n]}\n")
            out.close()
        else:
            out.close()
            self.path.unlink(missing_ok=True)

    @property
    def num_events(self) -> int:
        return sum(self.counts.values())
