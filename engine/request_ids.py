"""Request ids are unique within a run, checked in memory that follows the live requests.

:class:`RequestIds` answers "was this id used in this run?" for :meth:`engine.engine.LLMEngine.add_request`
without keeping every id ever added:

- live ids (waiting, running, paused, not yet arrived, and a parallel-sampling prompt's own id
  while any of its sequences lives) are held exactly, in a dict: memory grows with live requests;
- a finished id that the engine's recorder holds (``recordings.file.writer.RecordingWriter.recorded_ids``:
  its ``requests`` table, indexed on ``request_id``, or its queue) leaves memory: later checks ask
  the recording. With a recording the check is exact and the memory is flat;
- a finished id that no recording holds (the engine runs from the Python API with recording
  off, or the recording stopped) goes to :class:`IdHashes`: 8 bytes per id (a 64-bit hash in a
  sorted numpy array). That is NOT flat: 8 MB per million finished requests (a Python set of
  the id strings took about 100 bytes per id). A new id whose hash equals a finished one's is
  refused as a duplicate: with ``m`` finished ids hashed, a fresh id is wrongly refused with
  probability about ``m / 2**64`` (5e-14 at a million).

An id ``X`` also counts as used when the recording holds ``X#0`` (the first sequence of a
parallel-sampling prompt added as ``X``, ``engine.sequence_group``): the recording keeps the
sequences, not the prompt's own id.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

import numpy as np

log = logging.getLogger(__name__)
_MASK = (1 << 64) - 1

# recorder.recorded_ids: which of the given ids the recording holds (or is about to)
Lookup = Callable[[list[str]], set[str]]


class IdHashes:
    """A set of strings kept as 64-bit hashes (Python's ``hash``, SipHash, keyed per process):
    a sorted ``numpy.uint64`` array plus up to :attr:`MERGE` recent hashes in a Python set,
    merged into the array when it fills (a linear merge: O(size) per ``MERGE`` additions).
    Membership has false positives with probability about ``len(self) / 2**64`` per query and
    no false negatives."""

    MERGE = 1024

    def __init__(self) -> None:
        self._sorted = np.zeros(0, np.uint64)
        self._recent: set[int] = set()

    def add(self, name: str) -> None:
        """Remember ``name`` (as its hash)."""
        self._recent.add(hash(name) & _MASK)
        if len(self._recent) >= self.MERGE:
            new = np.fromiter(self._recent, np.uint64, len(self._recent))
            merged = np.concatenate([self._sorted, new])
            merged.sort(kind="stable")      # two sorted runs: timsort merges them in O(n)
            self._sorted = merged
            self._recent = set()

    def __contains__(self, name: str) -> bool:
        h = hash(name) & _MASK
        if h in self._recent:
            return True
        i = int(np.searchsorted(self._sorted, np.uint64(h)))
        return i < len(self._sorted) and int(self._sorted[i]) == h

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)

    @property
    def nbytes(self) -> int:
        """Bytes of the sorted array (8 per merged hash; the recent set holds < ``MERGE``)."""
        return self._sorted.nbytes


class RequestIds:
    """The ids used in one run (see the module doc). Not thread-safe (the engine's thread)."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}       # live id -> live sequences it names
        self.hashes = IdHashes()             # finished ids no recording holds
        self.lookups: list[Lookup] = []      # recordings that hold finished ids

    def add(self, names: Iterable[str]) -> None:
        """Register the ids of one new request: its id and, for a parallel-sampling prompt, its
        sequences' ids (``engine.sequence_group.sequence_ids``), the prompt's id first. Raises
        ``ValueError`` naming the first id used before in this run (nothing is registered)."""
        names = list(dict.fromkeys(names))
        used = [n for n in names if n in self.live or n in self.hashes]
        if not used:
            for lookup in self.lookups:
                used = sorted(self._ask(lookup, names))
                if used:
                    break
        if used:
            raise ValueError(f"duplicate request id {min(used)!r} (ids are unique within a run)")
        parent, members = names[0], len(names) - 1
        self.live[parent] = max(1, members)
        for n in names[1:]:
            self.live[n] = 1

    def finish(self, finished: Iterable[tuple[str, str | None]], recorder=None) -> None:
        """Forget the live ids of ``finished`` requests, ``(request_id, parallel-sampling prompt
        id or None)`` each: an id no live sequence names any more goes to the recording that
        holds it (``recorder.recorded_ids``) or else to :attr:`hashes`."""
        gone = []
        for rid, parent in finished:
            for name in (rid, parent) if parent is not None and parent != rid else (rid,):
                left = self.live.get(name, 0) - 1
                if left > 0:
                    self.live[name] = left
                elif self.live.pop(name, None) is not None:
                    gone.append(name)
        if not gone:
            return
        lookup = getattr(recorder, "recorded_ids", None)
        held = self._ask(lookup, gone) if lookup is not None else set()
        if held and lookup not in self.lookups:
            self.lookups.append(lookup)
        for name in gone:
            if name not in held:
                self.hashes.add(name)

    @staticmethod
    def _ask(lookup: Lookup, names: list[str]) -> set[str]:
        """``lookup(names)``; a recording that cannot be read any more answers nothing."""
        try:
            return lookup(names)
        except Exception as exc:  # noqa: BLE001 - a broken file must not stop serving
            log.warning("request ids: the recording cannot be read (%s); its finished ids are "
                        "not checked", exc)
            return set()

