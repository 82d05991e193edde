"""CUDA graphs for decode-only steps: one graph per batch size of a ladder, captured at start-up,
a real batch padded up to the smallest size that holds it and replayed; mixed steps stay eager.

A decode step of a small model on a fast GPU is dominated by kernel launches (16 layers times a
dozen kernels, each a few microseconds of CPU); a CUDA graph replays the whole forward pass with one
launch. A graph replays fixed kernels on fixed addresses, so the step's inputs go into static
buffers (:class:`DecodeGraphs`: token ids, positions and block tables, staged on the host and copied
in one transfer) and the attention derives everything else from them on the device
(:mod:`engine.runner.attention.decode_static`). Padding rows (between the real batch and its capture size)
write their K/V into a scratch block no request owns and their outputs are discarded.

Off a GPU (or with ``capture=False``) the same padded static path runs eagerly, so the CPU tests
check exactly what the graphs replay. Follows vLLM v1 (``vllm/v1/worker/gpu/cudagraph_utils.py``:
capture sizes ``1, 2, 4, 8, 16, ... 256`` then every 16, largest first into one shared memory pool,
a warm-up run before each capture, outputs copied into a persistent buffer) and nano-vllm's
``ModelRunner.capture_cudagraph``.
"""
from __future__ import annotations

import bisect
import os
import time
from itertools import chain
from typing import Sequence

import numpy as np
import torch
from tqdm import tqdm

from engine.runner.attention.decode_static import StaticDecodeMetadata
from engine.runner.attention.triton_attention import _sm_count, choose_num_splits, triton_available

MAX_CAPTURE_SIZE = 512          # vLLM's cap: bigger decode batches run eagerly
CAPTURE_DESC = "capturing CUDA graphs"


def capture_sizes(max_num_seqs: int, limit: int = MAX_CAPTURE_SIZE) -> list[int]:
    """The batch sizes to capture, ascending: 1, 2, 4, multiples of 8 below 256, multiples of 16
    from 256, up to ``min(max_num_seqs, limit)``, which is always included (vLLM's default
    ``cudagraph_capture_sizes``). Raises ``ValueError`` when ``max_num_seqs`` < 1."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
    top = min(max_num_seqs, limit)
    ladder = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return sorted({s for s in ladder if s < top} | {top})


def decode_backend(device: torch.device) -> str:
    """The attention of the padded decode path on ``device``: ``triton`` (our decode kernel, which
    reads only each row's context) on CUDA when triton imports and ``BATCHSCOPE_ATTENTION`` is not
    ``reference``; else ``reference`` (torch; under a graph every row attends over the whole padded
    table, ``max_model_len`` keys, masked). Graphs are opt-in, so they opt into the kernel too."""
    if device.type != "cuda" or os.environ.get("BATCHSCOPE_ATTENTION", "") == "reference":
        return "reference"
    return "triton" if triton_available() else "reference"


def padded_size(num_reqs: int, sizes: Sequence[int]) -> int:
    """The smallest of the ascending ``sizes`` that holds ``num_reqs`` rows. Raises ``ValueError``
    when ``num_reqs`` is < 1 or above the largest size."""
    i = bisect.bisect_left(sizes, num_reqs)
    if num_reqs < 1 or i == len(sizes):
        raise ValueError(f"a padded decode batch holds 1 to {sizes[-1]} requests, got {num_reqs}")
    return sizes[i]


class DecodeGraphs:
    """Decode-only forward passes of ``forward`` (an ``engine.runner.forward.ModelForward``: the
    runner's ``forward``) over static, padded buffers, replayed from CUDA
    graphs on a GPU (eager elsewhere, or with ``capture=False``).

    ``kv_caches``: the runner's per-layer ``(k_cache, v_cache)``, ``[num_blocks, block_size,
    num_kv_heads, head_dim]``; ``scratch_block``: a block id in them that no request owns (padding
    rows write there). Batches of up to ``max_num_seqs`` requests (at most
    :data:`MAX_CAPTURE_SIZE`) whose block tables fit ``max_model_len`` tokens are handled.
    ``backend``: ``reference`` or ``triton`` attention (default: :func:`decode_backend`).
    ``capture``: capture graphs (default: on CUDA); ``progress``: a tqdm line while capturing.
    Raises ``ValueError`` when asked to capture off CUDA. Memory: the inputs (``max_rows * (2 +
    max_blocks_per_req)`` int64), one hidden-state buffer ``[max_rows, hidden_size]``, and the
    graphs' shared pool (the largest batch's activations).
    """

    def __init__(self, forward, kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                 block_size: int, scratch_block: int, max_num_seqs: int, max_model_len: int, *,
                 backend: str | None = None, capture: bool | None = None, progress: bool = True) -> None:
        self.forward = forward
        device = kv_caches[0][0].device
        self.device = device
        self.sizes = capture_sizes(max_num_seqs)
        self.max_rows = n = self.sizes[-1]
        self.block_size = block_size
        self.max_blocks_per_req = w = -(-max_model_len // block_size)
        self.scratch_block = scratch_block
        cuda = device.type == "cuda"
        # [input ids | positions | block tables], staged on the host, one copy to the device
        self._host = torch.zeros(n * (2 + w), dtype=torch.long, pin_memory=cuda)
        self._dev = torch.zeros_like(self._host, device=device) if cuda else self._host
        self._np = self._host.numpy()
        self._copied = torch.cuda.Event() if cuda else None
        self.input_ids, self.positions = self._dev[:n], self._dev[n:2 * n]
        self.block_tables = self._dev[2 * n:].view(n, w)
        backend = backend or decode_backend(device)
        full = StaticDecodeMetadata.allocate(self.positions, self.block_tables, kv_caches, block_size, backend)
        hkv = kv_caches[0][0].shape[2]
        self.metas = {b: full.head(b, choose_num_splits(b, hkv, max_model_len, _sm_count(device))
                                   if backend == "triton" else 1) for b in self.sizes}
        dtype = kv_caches[0][0].dtype
        self.hidden = torch.zeros(n, forward.hidden_size, dtype=dtype, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.capture_s = 0.0
        self.use_graphs = cuda if capture is None else capture
        if self.use_graphs and not cuda:
            raise ValueError(f"CUDA graphs need a CUDA device; the model is on {device}")
        if self.use_graphs:
            self.capture(progress)

    def handles(self, num_reqs: int, num_tokens: int) -> bool:
        """Whether a step of ``num_reqs`` requests scheduling ``num_tokens`` tokens in all is
        decode-only (one token each) and small enough for the padded path."""
        return num_tokens == num_reqs <= self.max_rows and num_reqs > 0

    def padded_size(self, num_reqs: int) -> int:
        """The capture size a batch of ``num_reqs`` requests runs at (see :func:`padded_size`)."""
        return padded_size(num_reqs, self.sizes)

    def stage(self, input_ids: Sequence[int], positions: Sequence[int],
              block_tables: Sequence[Sequence[int]] | np.ndarray | torch.Tensor) -> int:
        """Write one decode batch (``n`` requests: token id, its position, the request's block
        table) into the static inputs, padding rows up to the capture size, which it returns.
        ``block_tables`` is one sequence of block ids per request, or a CPU integer array / tensor
        ``[n, w]`` (an input batch's table; entries past a request's blocks must be block ids of the
        cache: they are read under the mask). Raises ``ValueError`` for a batch of the wrong size or
        a block table longer than ``max_blocks_per_req``."""
        n = len(input_ids)
        b = self.padded_size(n)
        if self._copied is not None:
            self._copied.synchronize()          # the previous step's copy has left the host buffer
        dense = isinstance(block_tables, (np.ndarray, torch.Tensor))
        lens = (np.array([block_tables.shape[1]]) if dense
                else np.fromiter(map(len, block_tables), dtype=np.int64, count=n))
        w = self.max_blocks_per_req
        if lens.max() > w:
            raise ValueError(f"a block table of {lens.max()} blocks is longer than max_model_len allows "
                             f"({w} blocks of {self.block_size} tokens)")
        ids, pos, tables = self._host_views()
        ids[:n] = input_ids
        pos[:n] = positions
        self._pad(n, b)
        if dense:
            tables[:n, :lens[0]] = np.asarray(block_tables)
        else:
            tables[:n][np.arange(w) < lens[:, None]] = np.fromiter(
                chain.from_iterable(block_tables), dtype=np.int64, count=int(lens.sum()))
        self._upload()
        return b

    def _host_views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self.max_rows
        return self._np[:n], self._np[n:2 * n], self._np[2 * n:].reshape(n, self.max_blocks_per_req)

    def _pad(self, n: int, b: int) -> None:
        """Rows ``n .. b-1`` become padding (token 0 at position 0 over the scratch block); every
        table row up to ``b`` is cleared to the scratch block."""
        ids, pos, tables = self._host_views()
        ids[n:b] = 0
        pos[n:b] = 0
        tables[:b] = self.scratch_block

    def _upload(self) -> None:
        if self._dev is not self._host:
            self._dev.copy_(self._host, non_blocking=True)
            self._copied.record()

    def run(self, input_ids: Sequence[int], positions: Sequence[int],
            block_tables: Sequence[Sequence[int]] | np.ndarray | torch.Tensor) -> torch.Tensor:
        """The decode step of ``n`` requests (see :meth:`stage`): stores their K/V and returns the
        final hidden states ``[n, hidden_size]`` in the model's dtype, a view of a static buffer
        valid until the next call (apply the LM head to the rows to sample)."""
        b = self.stage(input_ids, positions, block_tables)
        if self.use_graphs:
            self.graphs[b].replay()
        else:
            self._forward(b)
        return self.hidden[:len(input_ids)]

    def _forward(self, b: int) -> None:
        """The body a graph captures: the forward pass over the first ``b`` static rows, hidden
        states into the static output buffer."""
        meta = self.metas[b]
        meta.refresh()
        self.hidden[:b].copy_(self.forward.hidden_states(self.input_ids[:b], self.positions[:b], meta))

    @torch.inference_mode()
    def capture(self, progress: bool = True) -> None:
        """Capture one graph per size, largest first, into one shared memory pool; each after a
        warm-up run of an all-padding batch (Triton compiles, cuBLAS picks its kernels), which
        writes only the scratch block."""
        t = time.perf_counter()
        self.pool = torch.cuda.graph_pool_handle()
        for b in tqdm(self.sizes[::-1], desc=CAPTURE_DESC, unit="graph", disable=not progress):
            self._pad(0, b)
            self._upload()
            self._forward(b)
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                self._forward(b)
            self.graphs[b] = graph
        torch.cuda.synchronize(self.device)
        self.capture_s = time.perf_counter() - t


def enable_cuda_graphs(runner, config, progress: bool = True, backend: str | None = None) -> None:
    """Give ``runner`` (an :class:`engine.runner.model_runner.ModelRunner`) its :class:`DecodeGraphs` when
    ``config.cuda_graphs`` (an :class:`engine.config.EngineConfig`) is on, or ``None`` and the runner
    is on CUDA: batches up to ``max_num_seqs`` and ``max_model_len`` tokens, captured now on a GPU
    (eager elsewhere), with the attention ``backend`` (default: the device's, see :class:`DecodeGraphs`)."""
    on = config.cuda_graphs if config.cuda_graphs is not None else runner.device.type == "cuda"
    if not on:
        return
    runner.graphs = DecodeGraphs(runner.forward, runner.kv_caches, runner.block_size, runner.scratch_block,
                                 config.max_num_seqs, config.max_model_len, backend=backend, progress=progress)
