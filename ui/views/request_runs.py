"""The KV block map's *by request* layout: each request's blocks packed into one contiguous run.

The physical layout draws block ``b`` at cell ``b``: at production sizes (26k-500k blocks,
hundreds of owners whose blocks interleave) that reads as coloured static. This layout keeps the
same cells and colours but orders them by owner, as a heap viewer or a treemap groups a
process's allocations: the requests that hold blocks in slot order (running ones by batch
slot, then the slotless holders: paused, swapped, preempted, in arrival order), each as ONE run
of as many cells as it owns blocks (areas proportional to blocks), then three regions: the
cached-free blocks (free, still caching a prefix), the free blocks and the blocks out of use.

A run is drawn in four parts, in this order: the shared prefix blocks it holds for others
(reference count > 1: the marked segment, placed once, in the run of the block's oldest holder,
which ``EngineState.block_owner`` names), the full blocks, the partly written block and the
allocated, unwritten ones. Every block appears exactly once; within a part blocks keep their
block-table order, so :func:`blocks_in_order` gives the exact block of every cell (hover and
click name the real block, its fill and holders). The parts are worked out from counts (one
``bincount`` over the held blocks a frame, no sort): drawing is O(blocks) in numpy, and the exact
order is computed only for the run under the pointer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.state.state import RESERVED, EngineState
from ui.views.block_image import MARK_CACHED_FREE, MARK_RESERVED, MARK_SHARED

SHARED, FULL, PARTIAL, EMPTY = range(4)     # the parts of a run, in drawing order
assert (FULL, PARTIAL) == (EMPTY - 2, EMPTY - 1)    # :func:`_categories` counts down from EMPTY
REGIONS = ("cached-free", "free", "out of use")


@dataclass(frozen=True)
class RequestRuns:
    """Where each part of the by-request layout starts in the sequence of cells.

    ``rows``: int64 [h] the state rows of the requests that hold blocks, in drawing order;
    ``index``: int64 [h] the same requests' index in :func:`ui.state_lookup.block_holders`'
    ``holders`` (arrival order); ``parts``: int64 [h, 4] blocks in each part of each run
    (:data:`SHARED`, :data:`FULL`, :data:`PARTIAL`, :data:`EMPTY`); ``partial_fill``: int64 [h]
    tokens in the partly written block (0: none); ``starts``: int64 [h + 1] first cell of each
    run, ``starts[h]`` that of the regions; ``regions``: int64 [3] blocks in each of
    :data:`REGIONS`. ``num_blocks``: cells in all."""

    rows: np.ndarray
    index: np.ndarray
    parts: np.ndarray
    partial_fill: np.ndarray
    starts: np.ndarray
    regions: np.ndarray
    num_blocks: int

    @property
    def region_starts(self) -> np.ndarray:
        """int64 [4]: first cell of each of :data:`REGIONS`, and the end of the last."""
        return self.starts[-1] + np.concatenate([[0], np.cumsum(self.regions)])

    def run_at(self, i: int) -> int | None:
        """Position (in ``rows``) of the run that holds cell ``i``; None in the regions."""
        if not 0 <= i < self.starts[-1]:
            return None
        return int(np.searchsorted(self.starts, i, side="right")) - 1

    def region_at(self, i: int) -> int | None:
        """Index in :data:`REGIONS` of the region that holds cell ``i``; None in a run."""
        rs = self.region_starts
        if not rs[0] <= i < rs[-1]:
            return None
        return int(np.searchsorted(rs, i, side="right")) - 1


def _categories(state: EngineState, fill: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The part (:data:`SHARED` .. :data:`EMPTY`) of each of the held ``blocks`` (int array of
    block ids), int8 [len(blocks)]."""
    f = fill[blocks]
    # EMPTY, less one when written (PARTIAL), less one more when full (FULL): int8 arithmetic,
    # a seventh of the time of two nested int64 ``np.where`` at 65k held blocks
    cat = np.full(len(f), EMPTY, np.int8)
    cat -= (f > 0).view(np.int8)
    cat -= (f >= state.block_size).view(np.int8)
    if len(state.shared_block):
        cat[np.isin(blocks, state.shared_block)] = SHARED
    return cat


def request_runs(state: EngineState, holders: np.ndarray, at: np.ndarray,
                 fill: np.ndarray) -> RequestRuns:
    """The by-request layout of ``state``: ``holders`` and ``at`` as
    :func:`ui.state_lookup.block_holders` returns them, ``fill`` int [blocks] tokens written in
    each block (:func:`ui.state_lookup.block_fill`). O(blocks) numpy, no sort of the blocks."""
    h = len(holders)
    held = np.flatnonzero(at < h)
    cat = _categories(state, fill, held)
    at_held = at[held]
    parts = np.bincount(at_held * 4 + cat, minlength=4 * h).reshape(h, 4).astype(np.int64)
    partial = cat == PARTIAL
    partial_fill = np.bincount(at_held[partial], weights=fill[held[partial]],
                               minlength=h).astype(np.int64)
    slot = state.columns["slot"][holders].astype(np.int64)
    key = np.where(slot >= 0, slot, state.max_num_seqs + np.arange(h))
    order = np.argsort(key, kind="stable")
    parts, partial_fill = parts[order], partial_fill[order]
    owner = state.block_owner
    free = owner == -1
    num_cached = int(np.count_nonzero(free & (state.block_hash != 0)))
    regions = np.array([num_cached, int(np.count_nonzero(free)) - num_cached,
                        int(np.count_nonzero(owner == RESERVED))], np.int64)
    starts = np.concatenate([[0], np.cumsum(parts.sum(axis=1))]).astype(np.int64)
    return RequestRuns(holders[order], order.astype(np.int64), parts, partial_fill, starts, regions,
                       int(starts[-1] + regions.sum()))


def segments(runs: RequestRuns, palette_of_run: np.ndarray, block_size: int,
             selected_run: int | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The layout as SEGMENTS of cells that look alike, ``4 h + 3`` of them (each run's four
    parts, then the three regions; some empty): ``(palette_index int16, fill int64, marks int8,
    framed bool, lengths int64)``, each [segments], the first four as
    ``ui.views.block_image.render`` takes them per cell (``palette_of_run``: int16 [h] palette
    entry of each run's request; ``selected_run``: the run to frame, or None). Shared cells are
    drawn full and marked shared, cached-free cells marked cached-free, the cells out of use
    marked reserved. O(runs): the by-request image is painted from these
    (``ui.views.run_image``), not from per-block arrays."""
    h = len(runs.rows)
    lengths = np.concatenate([runs.parts.reshape(-1), runs.regions])
    pal = np.concatenate([np.repeat(palette_of_run.astype(np.int16), 4), np.full(3, -1, np.int16)])
    fills = np.zeros((h, 4), np.int64)
    fills[:, SHARED] = fills[:, FULL] = block_size
    fills[:, PARTIAL] = runs.partial_fill
    mark = np.zeros((h, 4), np.int8)
    mark[:, SHARED] = MARK_SHARED
    marks = np.concatenate([mark.reshape(-1), [MARK_CACHED_FREE, 0, MARK_RESERVED]]).astype(np.int8)
    fill = np.concatenate([fills.reshape(-1), np.zeros(3, np.int64)])
    framed = np.zeros(4 * h + 3, bool)
    if selected_run is not None:
        framed[4 * selected_run:4 * selected_run + 4] = True
    return pal, fill, marks, framed, lengths


def cells(runs: RequestRuns, palette_of_run: np.ndarray, block_size: int,
          selected_run: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The look of every cell of the layout: ``(palette_index int16, fill int64, marks int8,
    framed bool)``, each [``num_blocks``]: :func:`segments` repeated over their lengths."""
    *looks, lengths = segments(runs, palette_of_run, block_size, selected_run)
    pal, fill, marks, framed = (np.repeat(a, lengths) for a in looks)
    return pal, fill, marks, framed


def run_blocks(state: EngineState, runs: RequestRuns, at: np.ndarray, run: int,
               fill: np.ndarray) -> np.ndarray:
    """The block ids of run ``run`` in drawing order (its parts in order, block-table order
    within a part), int64 [run length]."""
    blocks = np.flatnonzero(at == runs.index[run])
    cat = _categories(state, fill, blocks)
    return blocks[np.lexsort((state.block_pos[blocks], cat))]


def region_blocks(state: EngineState, region: int) -> np.ndarray:
    """The block ids of region ``region`` (index in :data:`REGIONS`) in block-id order."""
    owner = state.block_owner
    if region == 2:
        return np.flatnonzero(owner == RESERVED)
    cached = (owner == -1) & (state.block_hash != 0)
    return np.flatnonzero(cached if region == 0 else (owner == -1) & ~cached)


def block_at_cell(state: EngineState, runs: RequestRuns, at: np.ndarray, fill: np.ndarray,
                  i: int) -> int | None:
    """The block drawn at cell ``i`` of the layout (None past its end)."""
    run = runs.run_at(i)
    if run is not None:
        return int(run_blocks(state, runs, at, run, fill)[i - runs.starts[run]])
    region = runs.region_at(i)
    if region is None:
        return None
    return int(region_blocks(state, region)[i - runs.region_starts[region]])


def blocks_in_order(state: EngineState, runs: RequestRuns, at: np.ndarray,
                    fill: np.ndarray) -> np.ndarray:
    """Every block id in drawing order, int64 [``num_blocks``] (a permutation of the blocks:
    what cell ``i`` shows is block ``blocks_in_order(...)[i]``). O(blocks log blocks): for tests
    and a whole-layout lookup, not for a frame."""
    out = [run_blocks(state, runs, at, r, fill) for r in range(len(runs.rows))]
    out += [region_blocks(state, k) for k in range(len(REGIONS))]
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)


def cell_of_block(state: EngineState, runs: RequestRuns, at: np.ndarray, fill: np.ndarray,
                  block: int) -> int:
    """The cell that shows ``block`` (the inverse of :func:`block_at_cell`). Raises IndexError
    for a block id outside the cache."""
    if not 0 <= block < state.num_total_blocks:
        raise IndexError(f"block {block} outside the cache of {state.num_total_blocks} blocks")
    pos = np.flatnonzero(runs.index == at[block])
    if len(pos):
        run = int(pos[0])
        return int(runs.starts[run] + np.flatnonzero(run_blocks(state, runs, at, run, fill) == block)[0])
    owner = state.block_owner[block]
    region = 2 if owner == RESERVED else 0 if state.block_hash[block] != 0 else 1
    return int(runs.region_starts[region] + np.flatnonzero(region_blocks(state, region) == block)[0])


def cells_of_blocks(state: EngineState, runs: RequestRuns, at: np.ndarray, fill: np.ndarray,
                    blocks: np.ndarray) -> np.ndarray:
    """The cells that show held ``blocks`` (int array of block ids), int64 [len(blocks)]: one
    exact lookup per run they fall in (the selection's shared prefix sits in its oldest holder's
    run). Raises IndexError for a block that is not held."""
    blocks = np.asarray(blocks, np.int64)
    out = np.full(len(blocks), -1, np.int64)
    run_of = np.full(len(runs.rows) + 1, -1, np.int64)
    run_of[runs.index] = np.arange(len(runs.rows))
    where = run_of[np.minimum(at[blocks], len(runs.rows))] if len(blocks) else out
    if (where < 0).any():
        raise IndexError(f"blocks not held by any request: {blocks[where < 0][:8].tolist()}")
    for run in np.unique(where).tolist():
        mine = where == run
        drawn = run_blocks(state, runs, at, run, fill)
        pos = np.argsort(drawn)
        out[mine] = runs.starts[run] + pos[np.searchsorted(drawn[pos], blocks[mine])]
    return out
