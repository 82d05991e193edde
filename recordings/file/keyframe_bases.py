"""What a keyframe stored against earlier ones needs from them: the block hashes of its
``hash_base`` (schema 4) and the block map of its ``map_base`` (schema 5); docs/recording.md,
"Keyframes and seeking"."""
from __future__ import annotations

import io
from typing import Callable, Sequence

import numpy as np

from recordings.file import codec, compact

Rows = Callable[[str, Sequence], list]   # (SQL, parameters) -> rows, the reader's query


class KeyframeBases:
    """The hash and block-map bases of one recording, read through ``rows`` (the reader's query
    function) and kept for the next keyframe of the same base: a seek near the last one reads
    no base again. Methods raise ``ValueError`` for a missing or damaged base (the reader reports
    the keyframe as not decoding)."""

    def __init__(self, rows: Rows) -> None:
        self._rows = rows
        self._hash_base: tuple[int, np.ndarray] | None = None   # (step, block_hash) of a hash base
        self._map: codec.BlockMap | None = None                 # the last block map rebuilt

    def hashes_of(self, base: int, step: int) -> np.ndarray:
        """The block hashes after ``step`` of a keyframe stored without them (schema 4): those
        of the keyframe at ``base``, changed by the block events of the steps after it
        (``recordings.file.compact.apply_hash_events``)."""
        if self._hash_base is None or self._hash_base[0] != base:
            rows = self._rows("SELECT state_npz FROM keyframes WHERE step = ?", (int(base),))
            if not rows or not base < step:
                raise ValueError(f"keyframe {step}: its hash base, keyframe {base}, is missing")
            with np.load(io.BytesIO(rows[0][0]), allow_pickle=False) as z:
                if "block_hash" not in z.files:
                    raise ValueError(f"keyframe {step}: its hash base {base} holds no hashes")
                self._hash_base = (base, z["block_hash"].astype(np.int64))
        hashes = self._hash_base[1].copy()
        for (blob,) in self._rows("SELECT data FROM block_events WHERE step > ? AND step <= ? "
                                  "ORDER BY step", (int(base), int(step))):
            compact.apply_hash_events(hashes, blob)
        return hashes

    def map_of(self, step: int) -> codec.BlockMap:
        """The block map (step, ``block_owner``, ``block_pos``) of the keyframe at ``step``: its
        own arrays, or its ``map_base``'s changed by its changes (schema 5), following the chain
        of bases back to a keyframe that holds its whole map (at most the writer's
        ``HASH_BASE_EVERY`` keyframes)."""
        chain = []      # the keyframes after the whole map, newest first
        at = int(step)
        while self._map is None or self._map[0] != at:
            rows = self._rows("SELECT state_npz FROM keyframes WHERE step = ?", (at,))
            if not rows:
                raise ValueError(f"keyframe {step}: its block-map base, keyframe {at}, is missing")
            z = np.load(io.BytesIO(rows[0][0]), allow_pickle=False)
            if "map_base" not in z.files:
                self._map = (at, *codec.block_map_of(z, None))
                break
            chain.append((at, z))
            base = int(z["map_base"][0])
            if not base < at:
                raise ValueError(f"keyframe {at}: its block-map base {base} is not earlier")
            at = base
        for at, z in reversed(chain):
            self._map = (at, *codec.apply_map_changes(self._map, z))
        return self._map
