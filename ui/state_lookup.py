"""Finding requests in an ``EngineState`` without indexing every row.

``EngineState.row`` builds an id -> row dict over all live requests on first use (~5 ms at
10k live requests); a frame that looks up one selected request in a fresh state does better
with one C-level scan of ``request_ids`` (~0.1 ms). Likewise the block map finds each block's
owner among the few hundred requests that hold blocks (:func:`block_holders`) rather than
searching all live rows for it (``EngineState.owner_rows``: ~0.7 ms at 14k live requests).
"""
from __future__ import annotations

import numpy as np

from engine.outputs import RequestView
from engine.state.state import EngineState, row_view


_last_found: tuple = ((), None, None)     # (request_ids, request_id, row) of the last lookup


def find_row(state: EngineState, request_id: str | None) -> int | None:
    """Row of live ``request_id`` in ``state.columns``, or None. A frame asks this of the same
    state and the selected request in several views (block map, inspector, tables): the last
    answer is kept (``request_ids`` is an immutable tuple), so only the first asks scan it (the
    whole of it, ~0.1 ms at 10k live requests, when the request is not live any more)."""
    global _last_found
    if request_id is None:
        return None
    ids, rid, row = _last_found
    if ids is state.request_ids and rid == request_id:
        return row
    try:
        row = state.request_ids.index(request_id)
    except ValueError:
        row = None
    _last_found = (state.request_ids, request_id, row)
    return row


def find_view(state: EngineState, request_id: str | None) -> RequestView | None:
    """The view of a live or recently finished request (as ``state.view``), or None."""
    i = find_row(state, request_id)
    if i is not None:
        return row_view(request_id, state.columns, i)
    return next((v for v in reversed(state.recently_finished) if v.request_id == request_id), None)


def owned_blocks(state: EngineState, request_id: str | None) -> np.ndarray:
    """Mask of the blocks held by live ``request_id``, bool [num_total_blocks] (all False if
    it holds none or is not live)."""
    i = find_row(state, request_id)
    if i is None:
        return np.zeros(state.num_total_blocks, bool)
    return state.block_owner == state.columns["seq"][i]


def block_ids(state: EngineState, request_id: str | None) -> tuple[int, ...]:
    """The block table of live ``request_id`` in table order (as ``state.block_ids``)."""
    blocks = np.flatnonzero(owned_blocks(state, request_id))
    return tuple(blocks[np.argsort(state.block_pos[blocks], kind="stable")].tolist())


def block_holders(state: EngineState) -> tuple[np.ndarray, np.ndarray]:
    """``(holders, at)``: the rows of the requests that hold blocks (int64 [h], ascending) and,
    for each block, the index of its owner in ``holders`` (int64 [num_total_blocks]; ``h`` for
    a free block). ``np.append(holders, -1)[at]`` equals ``state.owner_rows()``; gathering a
    column of the holders the same way gives a per-block value in one pass. O(blocks + span of
    the holders' arrival numbers), no search."""
    holders = np.flatnonzero(state.columns["num_blocks"] > 0)
    owner, h = state.block_owner, len(holders)
    if not h:
        return holders, np.full(len(owner), 0, np.int64)
    seqs = state.columns["seq"][holders]
    lo, hi = int(seqs[0]), int(seqs[-1])                    # rows are in arrival order
    index_of_seq = np.full(hi - lo + 2, h, np.int64)          # last entry: not a holder
    index_of_seq[seqs - lo] = np.arange(h)
    at = np.full(len(owner), h, np.int64)
    used = np.flatnonzero(owner >= 0)        # only the owned blocks: a big cache is mostly free
    at[used] = index_of_seq[np.clip(owner[used] - lo, 0, hi - lo + 1)]
    return holders, at


def block_fill(state: EngineState, holders: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Tokens written in each block (int64 [num_total_blocks], as ``state.block_fill()``) from
    :func:`block_holders`' answer: the owner's ``num_computed_tokens`` past the block's start."""
    bs = state.block_size
    fill = np.zeros(len(at), np.int64)
    held = np.flatnonzero(at < len(holders))     # only the held blocks: a big cache is mostly free
    computed = state.columns["num_computed_tokens"][holders][at[held]]
    fill[held] = np.clip(computed - state.block_pos[held].astype(np.int64) * bs, 0, bs)
    return fill
