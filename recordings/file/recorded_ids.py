"""Which request ids a recording being written holds: the engine's duplicate-id check for
finished requests (``engine.request_ids``), so the engine need not keep their ids in memory.

The writer thread owns the writing connection; :class:`RecordedIds` asks the file through a
read-only connection of its own (``recordings.file.opening.connect_readonly``; WAL lets it read while
the writer writes) and answers for the ids queued but not committed yet from a set the writer
keeps (at most its queue's worth). Both together are exact, in this order: the writer commits a
batch and only then drops its ids from the queued set, and a lookup checks the queued set before
the file, so an id is always in one or the other. The writer's map of the live requests it has
written (id -> arrival number; a request leaves it once its finish is written) answers first,
without a query: a request the engine just finished is always in it or in the queued set. (The
writer thread changes that map and the set while the engine thread reads them: single ``in``
tests, atomic under CPython's GIL.)
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Container, Iterable

from engine.sequence_group import sequence_id
from recordings.file.opening import connect_readonly

_CHUNK = 400    # ids per query (SQLite allows 999 parameters in old builds; two per id)


class RecordedIds:
    """The request ids of the recording at ``path`` (see the module doc). ``queued`` and
    ``committed`` are called by the writer (engine thread and writer thread), :meth:`find` by
    the engine thread; the read connection is opened on first use."""

    def __init__(self, path: Path, live: Container[str] = ()) -> None:
        self.path = path
        self.queued: set[str] = set()
        self._live = live          # the writer's live requests (committed, finish not written)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def committed(self, ids: Iterable[str]) -> None:
        """``ids`` are in the file now (call after the transaction that holds them committed)."""
        self.queued.difference_update(ids)

    def find(self, names: list[str]) -> set[str]:
        """The ``names`` the recording holds as a request id, or as the id of a parallel-sampling
        prompt (it holds ``<name>#0``), committed or queued. Raises ``sqlite3.Error`` if the
        file cannot be read."""
        wanted, first = set(names), {sequence_id(n, 0): n for n in names}
        queued, live = self.queued, self._live
        found = {n for n in names if n in queued or n in live}
        found.update(first[s] for s in first if s in queued or s in live)
        if len(found) == len(names):
            return found
        ask = [n for n in names if n not in found]
        ask += [s for s, n in first.items() if n not in found]
        with self._lock:
            if self._conn is None:
                self._conn = connect_readonly(self.path)
            for i in range(0, len(ask), 2 * _CHUNK):
                part = ask[i:i + 2 * _CHUNK]
                rows = self._conn.execute("SELECT request_id FROM requests WHERE request_id IN "
                                          f"({', '.join('?' * len(part))})", part).fetchall()
                for (rid,) in rows:
                    if rid in wanted:
                        found.add(rid)
                    if rid in first:
                        found.add(first[rid])
        return found

    def close(self) -> None:
        """Close the read connection (before the writer folds its WAL back); reopened if asked
        again."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
