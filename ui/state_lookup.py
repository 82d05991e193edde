"""Finding one request in an ``EngineState`` without indexing every row.

``EngineState.row`` builds an id -> row dict over all live requests on first use (~5 ms at
10k live requests); a frame that looks up one selected request in a fresh state does better
with one C-level scan of ``request_ids`` (~0.1 ms).
"""
from __future__ import annotations

import numpy as np

from engine.outputs import RequestView
from engine.state import EngineState, row_view


def find_row(state: EngineState, request_id: str | None) -> int | None:
    """Row of live ``request_id`` in ``state.columns``, or None."""
    if request_id is None:
        return None
    try:
        return state.request_ids.index(request_id)
    except ValueError:
        return None


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
