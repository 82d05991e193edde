"""The runner's own per-request state, kept from :class:`engine.outputs.SchedulerOutput` diffs
alone (after vLLM v1's ``InputBatch``, vllm/v1/worker/gpu_input_batch.py, and its runner's
``_update_states`` / ``_prepare_inputs``; our own code). numpy arrays only: no torch tensors, no
``Request``.

One row per request the runner holds, rows dense (``0 .. num_reqs - 1``): a removed row is
filled by moving the last row into it (vLLM's ``condense``, done at once). Per row: the token
ids so far (prompt then output) in ``token_ids [rows, width] int32``, ``num_tokens``,
``num_prompt_tokens``, ``num_computed_tokens``, the block table ``block_table [rows, blocks]
int32`` (zero beyond ``num_blocks``), and the sampling parameters as arrays (``temperature``,
``top_k``, ``top_p``, ``seed``, the three penalties) for the batched sampler, plus the
``SamplingParams`` objects. ``seed`` is each row's random stream, set once when the request is
added: ``SamplingParams.seed`` (as int64, modulo 2**64), else, for a sampled (temperature > 0)
request, a seed derived from ``base_seed`` and the count of such requests so far
(``engine.runner.sampling_tensors.derived_seed``), remembered by request id until :meth:`forget`, so a
request dropped and sent again in full (recompute preemption) keeps its stream; greedy rows 0.
A row's draw counter is its number of output tokens so far (:meth:`sampling_counters`).
Capacity starts at the configured limits (``max_num_reqs`` rows, ``max_model_len`` tokens,
``max_blocks_per_req`` blocks) and grows when a live knob raises them.

:meth:`prepare` turns the step's batch into packed model inputs with vectorized numpy: no Python
work per token, only per request (the id-to-row lookup).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.outputs import NewRequestData, ScheduledRequest, SchedulerOutput
from engine.runner.sampling_tensors import derived_seed, seed_to_int64

_SAMPLING_FIELDS = (("temperature", np.float32), ("top_k", np.int32), ("top_p", np.float32),
                    ("seed", np.int64), ("repetition_penalty", np.float32),
                    ("frequency_penalty", np.float32), ("presence_penalty", np.float32))


@dataclass
class BatchInputs:
    """One step's packed inputs (``R`` scheduled requests, ``T`` tokens), in batch order.

    ``rows`` int64 [R]: each request's InputBatch row. ``query_lens`` / ``context_lens`` int64
    [R]: tokens computed this step / KV length after it. ``query_start`` int64 [R + 1]: request
    i owns packed tokens ``query_start[i]:query_start[i + 1]``. ``input_ids``, ``positions``,
    ``slot_mapping`` int64 [T] (flat cache slot ``block * block_size + offset``).
    ``block_tables`` int32 [R, W], W the longest table among them (zero padded), ``num_blocks``
    int64 [R]. ``sample_idx`` int64 [S]: the batch indices (into ``rows``) of the requests whose
    chunk reaches their last known token, so they sample; ``logits_idx`` int64 [S] their last
    packed token.
    """

    rows: np.ndarray
    query_lens: np.ndarray
    context_lens: np.ndarray
    query_start: np.ndarray
    input_ids: np.ndarray
    positions: np.ndarray
    slot_mapping: np.ndarray
    block_tables: np.ndarray
    num_blocks: np.ndarray
    sample_idx: np.ndarray
    logits_idx: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.query_start[-1])


def slot_mapping_of(positions: np.ndarray, token_rows: np.ndarray, block_table: np.ndarray,
                    block_size: int) -> np.ndarray:
    """Flat KV cache slot of each token: ``block_table[row, pos // block_size] * block_size +
    pos % block_size``, vectorized. ``positions`` / ``token_rows`` int [T] (row of
    ``block_table`` [rows, blocks] per token). Returns int64 [T]."""
    blocks = block_table[token_rows, positions // block_size].astype(np.int64)
    return blocks * block_size + positions % block_size


class InputBatch:
    """Dense per-request state of a runner (see the module docstring). ``req_ids[row]`` and
    ``req_id_to_index`` map rows and ids. ``base_seed`` derives the seeds of unseeded sampled
    requests. Raises ``ValueError`` on a diff that names a request it does not hold (a
    scheduler/runner desync)."""

    def __init__(self, max_num_reqs: int, max_model_len: int, max_blocks_per_req: int,
                 block_size: int, base_seed: int = 0) -> None:
        self.block_size = block_size
        self.base_seed = base_seed
        self._derived_seeds: dict[str, int] = {}     # unseeded sampled request id -> its seed
        self._num_derived = 0
        self.req_ids: list[str] = []
        self.req_id_to_index: dict[str, int] = {}
        self.sampling_params: list = []
        r = max(1, max_num_reqs)
        self.token_ids = np.zeros((r, max(1, max_model_len)), dtype=np.int32)
        self.num_tokens = np.zeros(r, dtype=np.int64)
        self.num_prompt_tokens = np.zeros(r, dtype=np.int64)
        self.num_computed_tokens = np.zeros(r, dtype=np.int64)
        self.block_table = np.zeros((r, max(1, max_blocks_per_req)), dtype=np.int32)
        self.num_blocks = np.zeros(r, dtype=np.int64)
        for name, dtype in _SAMPLING_FIELDS:
            setattr(self, name, np.zeros(r, dtype=dtype))

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    # --- capacity -------------------------------------------------------------------------
    def _per_row(self):
        return ("num_tokens", "num_prompt_tokens", "num_computed_tokens", "num_blocks",
                *(name for name, _ in _SAMPLING_FIELDS))

    def _ensure(self, rows: int, tokens: int, blocks: int) -> None:
        """Grow the arrays (doubling) to hold ``rows`` rows of ``tokens`` tokens and ``blocks``
        blocks (a live knob raised a limit); contents are kept."""
        cap, width = self.token_ids.shape
        bw = self.block_table.shape[1]
        if rows <= cap and tokens <= width and blocks <= bw:
            return
        new_cap = cap if rows <= cap else max(rows, 2 * cap)
        self.token_ids = _grown(self.token_ids, new_cap, width if tokens <= width else max(tokens, 2 * width))
        self.block_table = _grown(self.block_table, new_cap, bw if blocks <= bw else max(blocks, 2 * bw))
        if new_cap > cap:
            for name in self._per_row():
                old = getattr(self, name)
                arr = np.zeros(new_cap, dtype=old.dtype)
                arr[:cap] = old
                setattr(self, name, arr)

    # --- the diff -------------------------------------------------------------------------
    def update(self, sched: SchedulerOutput) -> None:
        """Apply a step's diff (vLLM's ``_update_states``): drop ``finished_req_ids`` (ids not
        held are ignored: a step that failed before reaching the runner), add
        ``scheduled_new_reqs``, then set the held requests' ``num_computed_tokens``, append their
        new block ids and any tokens the runner did not sample itself."""
        for rid in sched.finished_req_ids:
            if rid in self.req_id_to_index:
                self.remove(rid)
        for new in sched.scheduled_new_reqs:
            self.add(new)
        cached = sched.scheduled_cached_reqs
        if not cached.req_ids:
            return
        index = self.req_id_to_index
        try:
            rows = np.fromiter([index[rid] for rid in cached.req_ids], dtype=np.int64,
                               count=len(cached.req_ids))
        except KeyError as e:
            raise ValueError(f"scheduler output names request {e.args[0]!r}, which the runner "
                             f"does not hold (it must first come in scheduled_new_reqs)") from None
        self.num_computed_tokens[rows] = cached.num_computed_tokens
        for row, blocks in zip(rows.tolist(), cached.new_block_ids):
            if blocks:
                self.append_blocks(row, blocks)
        for rid, toks in cached.new_token_ids.items():
            self.append_tokens(np.array([index[rid]] * len(toks)), np.asarray(toks))

    def add(self, new: NewRequestData) -> int:
        """Hold a request sent in full (replacing a row of the same id); returns its row."""
        if new.request_id in self.req_id_to_index:
            self.remove(new.request_id)
        prompt = np.asarray(new.prompt_token_ids, dtype=np.int32)
        n_prompt, n_out = len(prompt), len(new.output_token_ids)
        row = self.num_reqs
        self._ensure(row + 1, n_prompt + n_out + 1, len(new.block_ids))
        self.token_ids[row, :n_prompt] = prompt
        self.token_ids[row, n_prompt:n_prompt + n_out] = new.output_token_ids
        self.num_prompt_tokens[row] = n_prompt
        self.num_tokens[row] = n_prompt + n_out
        self.num_computed_tokens[row] = new.num_computed_tokens
        nb = len(new.block_ids)
        self.block_table[row, :nb] = new.block_ids
        self.block_table[row, nb:] = 0
        self.num_blocks[row] = nb
        p = new.sampling_params
        self.temperature[row] = p.temperature
        self.top_k[row] = p.top_k
        self.top_p[row] = p.top_p
        self.seed[row] = self._seed_of(new.request_id, p)
        self.repetition_penalty[row] = p.repetition_penalty
        self.frequency_penalty[row] = p.frequency_penalty
        self.presence_penalty[row] = p.presence_penalty
        self.req_ids.append(new.request_id)
        self.sampling_params.append(p)
        self.req_id_to_index[new.request_id] = row
        return row

    def _seed_of(self, request_id: str, p) -> int:
        """The int64 seed of a request's stream (see the module docstring)."""
        if p.seed is not None:
            return seed_to_int64(p.seed)
        if p.temperature <= 0:
            return 0
        seed = self._derived_seeds.get(request_id)
        if seed is None:
            self._num_derived += 1
            seed = self._derived_seeds[request_id] = seed_to_int64(derived_seed(self.base_seed, self._num_derived))
        return seed

    def forget(self, request_id: str) -> None:
        """Drop what is kept for a request beyond its row (its derived seed), once it finished
        for good; a request that comes back under the same id later gets a new seed."""
        self._derived_seeds.pop(request_id, None)

    def remove(self, request_id: str) -> None:
        """Drop a request; the last row moves into its place (rows stay dense). Raises
        ``KeyError`` if it is not held."""
        row = self.req_id_to_index.pop(request_id)
        last = self.num_reqs - 1
        if row != last:
            moved = self.req_ids[last]
            n = int(self.num_tokens[last])
            self.token_ids[row, :n] = self.token_ids[last, :n]
            self.block_table[row] = self.block_table[last]
            for name in self._per_row():
                arr = getattr(self, name)
                arr[row] = arr[last]
            self.req_ids[row] = moved
            self.sampling_params[row] = self.sampling_params[last]
            self.req_id_to_index[moved] = row
        self.req_ids.pop()
        self.sampling_params.pop()

    def append_blocks(self, row: int, block_ids: Sequence[int]) -> None:
        """Append ``block_ids`` to ``row``'s block table."""
        nb, k = int(self.num_blocks[row]), len(block_ids)
        self._ensure(0, 0, nb + k)
        self.block_table[row, nb:nb + k] = block_ids
        self.num_blocks[row] = nb + k

    def append_tokens(self, rows: np.ndarray, token_ids: np.ndarray) -> None:
        """Append ``token_ids[i]`` to row ``rows[i]`` (int arrays [S]); a row may appear more
        than once (its tokens in order)."""
        if not len(rows):
            return
        rows = np.asarray(rows, dtype=np.int64)
        # the k-th occurrence of a row goes k places after its current end
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        first = np.searchsorted(sorted_rows, sorted_rows)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(rows)) - first
        cols = self.num_tokens[rows] + rank
        self._ensure(0, int(cols.max()) + 1, 0)
        self.token_ids[rows, cols] = token_ids
        np.add.at(self.num_tokens, rows, 1)

    # --- reading ----------------------------------------------------------------------------
    def prompt_token_ids(self, row: int) -> np.ndarray:
        """``row``'s prompt, int32 [num_prompt_tokens] (a view: copy to keep)."""
        return self.token_ids[row, :self.num_prompt_tokens[row]]

    def output_token_ids(self, row: int) -> np.ndarray:
        """``row``'s output so far, int32 (a view: copy to keep)."""
        return self.token_ids[row, self.num_prompt_tokens[row]:self.num_tokens[row]]

    def block_ids(self, row: int) -> np.ndarray:
        """``row``'s block table, int32 [num_blocks] (a view)."""
        return self.block_table[row, :self.num_blocks[row]]

    def sampling_counters(self, rows: np.ndarray) -> np.ndarray:
        """The draw counter of each row of ``rows`` (int [S]): its number of output tokens so
        far, int64 [S]."""
        return self.num_tokens[rows] - self.num_prompt_tokens[rows]

    def token_pairs(self, rows: np.ndarray, prompt: bool) -> tuple[np.ndarray, np.ndarray]:
        """Every prompt (``prompt``) or output token of the rows ``rows`` (int [S]) as flat
        pairs ``(i, token id)``, ``i`` the position in ``rows``: two int64 arrays [P], row by row
        in token order, vectorized (the input of ``engine.runner.penalties.apply_penalties_pairs``)."""
        rows = np.asarray(rows, dtype=np.int64)
        start = np.zeros(len(rows), dtype=np.int64) if prompt else self.num_prompt_tokens[rows]
        stop = self.num_prompt_tokens[rows] if prompt else self.num_tokens[rows]
        lengths = stop - start
        which = np.repeat(np.arange(len(rows)), lengths)
        first = np.cumsum(lengths) - lengths
        cols = np.arange(int(lengths.sum())) - np.repeat(first - start, lengths)
        return which, self.token_ids[rows[which], cols].astype(np.int64)

    # --- the step's inputs -----------------------------------------------------------------
    def prepare(self, scheduled: Sequence[ScheduledRequest]) -> BatchInputs:
        """Pack the batch entries ``scheduled`` (in that order; each computes ``num_tokens``
        from the row's ``num_computed_tokens``) into :class:`BatchInputs`, vectorized, and
        advance those rows' ``num_computed_tokens`` past the step. Raises ``ValueError`` if a
        request is not held or a chunk runs past its known tokens or its block table."""
        index = self.req_id_to_index
        r = len(scheduled)
        try:
            rows = np.fromiter([index[s.request_id] for s in scheduled], dtype=np.int64, count=r)
        except KeyError as e:
            raise ValueError(f"request {e.args[0]!r} is scheduled but the runner does not hold it") from None
        q = np.fromiter([s.num_tokens for s in scheduled], dtype=np.int64, count=r)
        start = self.num_computed_tokens[rows]
        ctx = start + q
        over = (ctx > self.num_tokens[rows]) | (ctx > self.num_blocks[rows] * self.block_size)
        if over.any():
            i = int(np.argmax(over))
            raise ValueError(f"{scheduled[i].request_id}: chunk [{start[i]}, {ctx[i]}) runs past its "
                             f"{self.num_tokens[rows[i]]} known tokens or {self.num_blocks[rows[i]]} blocks")
        cu = np.cumsum(q)
        qs = np.zeros(r + 1, dtype=np.int64)
        qs[1:] = cu
        if r and int(q.max()) == 1 and int(q.min()) == 1:        # all decodes: one token each
            token_rows, positions = rows, start
        else:
            token_rows = np.repeat(rows, q)
            positions = np.repeat(start - qs[:-1], q) + np.arange(int(qs[-1]))
        input_ids = self.token_ids[token_rows, positions].astype(np.int64)
        slots = slot_mapping_of(positions, token_rows, self.block_table, self.block_size)
        nb = self.num_blocks[rows]
        width = max(1, int(nb.max())) if r else 1
        sample_idx = np.flatnonzero(ctx == self.num_tokens[rows])
        self.num_computed_tokens[rows] = ctx
        return BatchInputs(rows=rows, query_lens=q, context_lens=ctx, query_start=qs,
                           input_ids=input_ids, positions=positions.astype(np.int64),
                           slot_mapping=slots, block_tables=self.block_table[rows, :width],
                           num_blocks=nb, sample_idx=sample_idx, logits_idx=cu[sample_idx] - 1)


def _grown(arr: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``arr`` copied into a zero array of shape ``[rows, cols]`` (at least its own)."""
    if arr.shape == (rows, cols):
        return arr
    out = np.zeros((max(rows, arr.shape[0]), max(cols, arr.shape[1])), dtype=arr.dtype)
    out[:arr.shape[0], :arr.shape[1]] = arr
    return out
