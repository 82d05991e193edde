"""The :class:`recordings.file.reader.Reader`'s request numbers: a recording stores each request once (its
``requests`` row, numbered by arrival, ``seq``) and refers to it by number everywhere else. This
mixin maps numbers to ids, prompt lengths and the static columns keyframes need, reading the
table through its covering index and keeping a bounded cache (flat memory on long runs)."""
from __future__ import annotations

import numpy as np

from engine.state.state import COLUMNS

ID_WINDOW = 512   # request numbers loaded around one the reader has not seen yet
ID_CACHE_MAX = 1 << 16   # request numbers -> ids kept; beyond, the cache starts over (flat memory)


class RequestNumbers:
    """Mixin for :class:`recordings.file.reader.Reader` (uses its ``_rows``)."""

    def _init_request_numbers(self) -> None:
        self._ids: dict[int, str] = {}
        self._num_prompt: dict[int, int] = {}
        self._static: tuple | None = None              # the last keyframe's (seqs, ids, static)
        indexes = {name for (name,) in self._rows(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'requests'")}
        # the covering index of arrival number -> id and static facts (files of this release)
        self._by_seq = next((f"INDEXED BY {name}" for name in ("requests_static", "requests_seq_lookup")
                             if name in indexes), "")
        self._static_hint = "INDEXED BY requests_static" if "requests_static" in indexes else ""

    def _id_of(self, seq: int) -> str:
        name = self._ids.get(seq)
        if name is None:
            # The requests near ``seq`` (a step's batch and queue are near each other in arrival
            # order), through the covering index: never the whole table and its prompt blobs.
            self._forget_ids()
            for s, rid, n in self._rows(
                    f"SELECT seq, request_id, num_prompt_tokens FROM requests {self._by_seq} "
                    "WHERE seq BETWEEN ? AND ?", (seq - ID_WINDOW, seq + ID_WINDOW)):
                self._ids[s], self._num_prompt[s] = rid, n
            name = self._ids.get(seq)
            if name is None:
                raise KeyError(f"request number {seq} is not in the requests table")
        return name

    def _static_of(self, seqs: np.ndarray) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
        """Request ids and static columns (``codec.STATIC_COLUMNS``) of the arrival numbers
        ``seqs`` (ascending). A request's static facts never change, and keyframes near each
        other hold mostly the same live requests (a scrub back decodes one a keyframe
        interval): those of the last call are reused and only the others read (~25 -> ~8 ms a
        keyframe at 14k live requests). Raises ``KeyError`` for a number the table does not
        have."""
        last = self._static
        if last is None or not len(last[0]) or not len(seqs):
            ids, static = self._static_rows(seqs)
            self._static = (np.asarray(seqs, np.int64).copy(), np.array(ids, object), static)
            return ids, static
        known, known_ids, known_static = last
        at = np.minimum(np.searchsorted(known, seqs), len(known) - 1)
        have = known[at] == seqs
        new_ids, new_static = self._static_rows(seqs[~have]) if not have.all() else ((), {})
        out_ids = np.empty(len(seqs), object)
        out_ids[have] = known_ids[at[have]]
        out_ids[~have] = new_ids
        static = {}
        for name, column in known_static.items():
            static[name] = out = np.empty(len(seqs), column.dtype)
            out[have] = column[at[have]]
            if name in new_static:
                out[~have] = new_static[name]
        self._static = (np.asarray(seqs, np.int64).copy(), out_ids, static)
        return tuple(out_ids.tolist()), static

    def _static_rows(self, seqs: np.ndarray) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
        """:meth:`_static_of` from the requests table: one range query when ``seqs`` are dense,
        else ``IN`` lists."""
        sql = (f"SELECT seq, request_id, arrival_step, arrival_time, num_prompt_tokens, max_tokens "
               f"FROM requests {self._static_hint} WHERE ")
        rows: list[tuple] = []
        if len(seqs) and int(seqs[-1]) - int(seqs[0]) < 4 * len(seqs) + 64:
            rows = self._rows(sql + "seq BETWEEN ? AND ? ORDER BY seq", (int(seqs[0]), int(seqs[-1])))
        else:
            for i in range(0, len(seqs), 900):
                part = [int(x) for x in seqs[i:i + 900]]
                rows += self._rows(sql + f"seq IN ({', '.join('?' * len(part))}) ORDER BY seq", part)
        found = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        at = np.searchsorted(found, seqs)
        if len(seqs) and (at.max() >= len(found) or not np.array_equal(found[at], seqs)):
            raise KeyError("a keyframe names a request number the requests table does not have")
        self._forget_ids()
        for r in rows:
            self._ids[r[0]], self._num_prompt[r[0]] = r[1], r[4]
        picked = [rows[i] for i in at.tolist()]
        static = {name: np.array([r[j] for r in picked], COLUMNS[name])
                  for j, name in ((2, "arrival_step"), (3, "arrival_time"),
                                  (4, "num_prompt_tokens"), (5, "max_tokens"))}
        return tuple(r[1] for r in picked), static

    def _forget_ids(self) -> None:
        """Start the id cache over once it holds ``ID_CACHE_MAX`` requests: a reader that has
        scrubbed a long recording (or the live view of a long run) keeps no id per request of
        its history."""
        if len(self._ids) >= ID_CACHE_MAX:
            self._ids.clear()
            self._num_prompt.clear()

    def _num_prompt_of(self, seq: int) -> int:
        self._id_of(seq)
        return self._num_prompt[seq]
