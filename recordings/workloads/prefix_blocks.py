"""Mooncake ``hash_ids`` as shared token blocks, and the prefix-cache hit rates they allow.

A Mooncake trace row lists one hash id per 512-token block of its prompt (the last block may be
partial); two rows whose prompts start with the same ids share that prefix (Qin et al., "Mooncake",
FAST 2025; ids are chained, so an id also names everything before it). A replay synthesises the
prompt tokens so that equal ids give equal tokens: the tokens of hash block ``h`` at offset ``j``
are a pure function of ``(seed, h, j)`` (a SplitMix64 hash, Steele et al., OOPSLA 2014), so a
prefix shared in the trace is shared token for token in the workload and a prefix cache can hit.

When lengths are scaled, a hash block becomes ``block_tokens`` tokens, rounded to a multiple of the
engine's ``block_size`` so shared prefixes stay aligned to KV blocks (a prefix cache matches whole
blocks, chained from the first). No torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

MOONCAKE_HASH_BLOCK_TOKENS = 512   # tokens per hash id in Mooncake traces
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_UNIQUE_SALT = 0xD6E8FEB86659FD93   # keys the tokens of no hash id (request-unique)


def ideal_prefix_hit_rate(hash_ids_per_prompt: Iterable[Sequence[int]]) -> float | None:
    """The trace's ideal prefix-cache hit rate: the fraction of all prompt hash blocks whose hash id
    already appeared in an earlier prompt (prompts in arrival order; an infinite cache that never
    evicts). ``None`` when no prompt has hash ids. On the Mooncake FAST'25 synthetic trace: 0.640
    (77,953 of 121,877 blocks)."""
    seen: set[int] = set()
    hits = total = 0
    for ids in hash_ids_per_prompt:
        for h in ids:
            total += 1
            if h in seen:
                hits += 1
            else:
                seen.add(h)
    return hits / total if total else None


def hash_block_tokens(prompt_scale: float, block_size: int,
                      trace_block_tokens: int = MOONCAKE_HASH_BLOCK_TOKENS) -> int:
    """Tokens one hash block becomes: ``trace_block_tokens * prompt_scale`` rounded to the nearest
    multiple of ``block_size``, at least one block. Raises ``ValueError`` for ``block_size`` < 1
    or ``prompt_scale`` <= 0."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if prompt_scale <= 0:
        raise ValueError(f"prompt_scale must be > 0, got {prompt_scale}")
    return block_size * max(1, round(trace_block_tokens * prompt_scale / block_size))


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 values (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class HashBlockPrompts:
    """Prompt token ids built from hash ids: ``block_tokens`` tokens per hash id.

    Tokens come either from the id range ``[low, high]`` (no tokenizer: uniform-looking ids) or,
    when ``corpus_ids`` (a tokenized text) is given, as a window of the corpus (read as a cycle)
    starting at a place picked by the hash id, so the prompt decodes to real text. Positions past
    the row's hash ids (a row listing fewer ids than its length needs, or lengths raised to a
    minimum) get tokens unique to the request. Deterministic given the constructor's arguments.
    """

    def __init__(self, block_tokens: int, seed: int, low: int = 100, high: int = 40000,
                 corpus_ids: Sequence[int] | None = None) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        if high < low:
            raise ValueError(f"empty token id range [{low}, {high}]")
        if corpus_ids is not None and len(corpus_ids) == 0:
            raise ValueError("the corpus has no tokens")
        self.block_tokens = block_tokens
        self.seed = seed
        self.low, self.span = low, high - low + 1
        self.corpus = None if corpus_ids is None else np.asarray(corpus_ids, dtype=np.int64)

    def _keys(self, values: Sequence[int], salt: int) -> np.ndarray:
        """One uint64 key per value, mixed with the seed and ``salt`` (Python ints: no overflow
        warnings; numpy arrays wrap)."""
        base = np.uint64((self.seed * 0x9E3779B97F4A7C15 + salt) % (1 << 64))
        return _mix64(np.asarray(values, dtype=np.uint64) + base)

    def prompt(self, hash_ids: Sequence[int], length: int, request_index: int) -> np.ndarray:
        """``length`` token ids (int32) for a prompt whose hash blocks are ``hash_ids``: token j
        belongs to hash block ``j // block_tokens``, at offset ``j % block_tokens``; positions past
        the hash ids are keyed by ``request_index`` and the position."""
        pos = np.arange(length, dtype=np.int64)
        block = pos // self.block_tokens
        has_id = block < len(hash_ids)
        key = np.empty(length, dtype=np.uint64)
        offset = (pos % self.block_tokens).astype(np.uint64)
        if len(hash_ids):
            key[has_id] = self._keys(hash_ids, 0)[block[has_id]]
        key[~has_id] = self._keys([request_index], _UNIQUE_SALT)[0]
        offset[~has_id] = pos[~has_id].astype(np.uint64)
        if self.corpus is None:
            values = _mix64(key + offset * _GOLDEN) % np.uint64(self.span)
            return (values.astype(np.int64) + self.low).astype(np.int32)
        n = np.uint64(len(self.corpus))
        return self.corpus[((key % n + offset) % n).astype(np.int64)].astype(np.int32)


class PrefixCoverage:
    """The ideal prefix-cache hits of a synthesised workload, request by request in arrival order.

    An infinite cache of ``block_size``-token blocks that keeps every full prompt block: a new
    prompt's longest prefix of whole blocks equal to (a prefix of) an earlier prompt is a hit,
    except that at least one token is always computed (a full hit gives back its last block), as in
    vLLM v1. Prompts are described by their hash ids (``block_tokens`` tokens each, a multiple of
    ``block_size``) and their length: equal hash-id prefixes mean equal tokens (ids are chained), and
    positions past the hash ids are unique. Hash-id prefixes are kept in a trie of ints.
    """

    def __init__(self, block_tokens: int, block_size: int) -> None:
        if block_tokens % block_size:
            raise ValueError(f"block_tokens ({block_tokens}) must be a multiple of block_size ({block_size})")
        self.block_tokens, self.block_size = block_tokens, block_size
        self._node: dict[tuple[int, int], int] = {}     # (parent node, hash id) -> node
        self._cached: list[int] = []                     # tokens of the node's block held
        self.num_hit_tokens = 0
        self.num_prompt_tokens = 0

    def add(self, hash_ids: Sequence[int], length: int) -> int:
        """Account one prompt of ``length`` tokens; returns its ideal hit tokens (a multiple of
        ``block_size``) and then caches its full blocks."""
        bt, bs = self.block_tokens, self.block_size
        cacheable = length // bs * bs
        matched, parent, missed = 0, -1, False
        for i, h in enumerate(hash_ids):
            start = i * bt
            if start >= length:
                break
            here = min(bt, length - start)
            node = self._node.get((parent, h))
            if node is None:
                node = self._node[(parent, h)] = len(self._cached)
                self._cached.append(0)
            if not missed:
                got = min(self._cached[node], here)
                matched = start + got
                missed = got < here
            self._cached[node] = max(self._cached[node], min(here, max(0, cacheable - start)))
            parent = node
        if matched >= length:                     # a full hit still computes the last token
            matched = length - 1
        hits = matched // bs * bs
        self.num_hit_tokens += hits
        self.num_prompt_tokens += length
        return hits

    @property
    def hit_rate(self) -> float | None:
        """Ideal hit tokens / prompt tokens so far (``None`` before the first prompt)."""
        return self.num_hit_tokens / self.num_prompt_tokens if self.num_prompt_tokens else None


@dataclass(frozen=True)
class PrefixSharing:
    """How a workload's prompts share prefixes, for the provenance and the run summary.

    ``hash_block_tokens`` tokens per trace hash id (``trace_block_tokens`` in the trace);
    ``trace_ideal_hit_rate``: :func:`ideal_prefix_hit_rate` of the trace rows (fraction of hash
    blocks); ``workload_ideal_hit_rate``: the same ideal for the prompts as built, in prompt tokens
    served from ``block_size``-token blocks (:class:`PrefixCoverage`), comparable with an engine's
    ``prefix_cache_hits / prefix_cache_queries``. ``num_hash_ids_unused``: ids that got no token
    (listed past the row's length, or cut by ``max_prompt_tokens``; both are in the notes).
    """

    num_hash_ids: int
    num_distinct_hash_ids: int
    trace_block_tokens: int
    hash_block_tokens: int
    block_size: int
    trace_ideal_hit_rate: float | None
    workload_ideal_hit_rate: float | None
    num_hash_ids_unused: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class SharedPrefixPrompts:
    """Prompts for trace rows with hash ids (:class:`HashBlockPrompts`), their lengths, and an
    account of every hash id (used, listed past the row's length, cut by a length clip) and of the
    ideal hit rate (:class:`PrefixCoverage`).

    A row of ``L`` trace tokens and ``n`` ids uses ``min(n, ceil(L / trace_block_tokens))`` ids
    and becomes ``round(L * hash_block_tokens / trace_block_tokens)`` tokens, at least one token
    in each used hash block, so no id is lost to rounding.
    """

    def __init__(self, block_size: int, prompt_scale: float, seed: int, low: int, high: int,
                 corpus_ids: Sequence[int] | None = None,
                 trace_block_tokens: int = MOONCAKE_HASH_BLOCK_TOKENS) -> None:
        self.trace_block_tokens = trace_block_tokens
        self.block_size = block_size
        self.block_tokens = hash_block_tokens(prompt_scale, block_size, trace_block_tokens)
        self.tokens = HashBlockPrompts(self.block_tokens, seed, low, high, corpus_ids)
        self.coverage = PrefixCoverage(self.block_tokens, block_size)
        self.all_ids: list[Sequence[int]] = []
        self.num_past_length = self.num_rows_past_length = 0
        self.num_cut = self.num_rows_cut = 0
        self.num_rows_longer = 0

    def _num_usable(self, num_trace_tokens: int, hash_ids: Sequence[int]) -> int:
        return min(len(hash_ids), -(-num_trace_tokens // self.trace_block_tokens))

    def length(self, num_trace_tokens: int, hash_ids: Sequence[int]) -> int:
        """The prompt length (before any min / max clip) for a row of ``num_trace_tokens``."""
        used = self._num_usable(num_trace_tokens, hash_ids)
        scaled = round(num_trace_tokens * self.block_tokens / self.trace_block_tokens)
        return max(1, scaled, (used - 1) * self.block_tokens + 1 if used else 0)

    def account(self, num_trace_tokens: int, hash_ids: Sequence[int], length: int) -> int:
        """Account one row's hash ids (used, listed past its length, cut by the clip to ``length``
        tokens) and its ideal prefix hits, in arrival order; returns how many of its first hash
        ids its ``length`` tokens use (its prompt is ``tokens.prompt(hash_ids[:used], length,
        index)``, made when needed: ``recordings.workloads.deferred_prompts.HashIdPrompts``)."""
        usable = self._num_usable(num_trace_tokens, hash_ids)
        used = min(usable, -(-length // self.block_tokens))
        if len(hash_ids) > usable:
            self.num_past_length += len(hash_ids) - usable
            self.num_rows_past_length += 1
        if used < usable:
            self.num_cut += usable - used
            self.num_rows_cut += 1
        if length > len(hash_ids) * self.block_tokens:
            self.num_rows_longer += 1
        self.all_ids.append(hash_ids)
        self.coverage.add(hash_ids[:used], length)
        return used

    def prompt(self, num_trace_tokens: int, hash_ids: Sequence[int], length: int,
               request_index: int) -> np.ndarray:
        """``length`` token ids (int32; ``length`` as clipped by the caller) for the row, and
        account its hash ids and its ideal prefix hits (:meth:`account`)."""
        used = self.account(num_trace_tokens, hash_ids, length)
        return self.tokens.prompt(hash_ids[:used], length, request_index)

    def sharing(self) -> PrefixSharing:
        ids = self.all_ids
        return PrefixSharing(
            num_hash_ids=sum(map(len, ids)), num_distinct_hash_ids=len({h for x in ids for h in x}),
            trace_block_tokens=self.trace_block_tokens, hash_block_tokens=self.block_tokens,
            block_size=self.block_size, trace_ideal_hit_rate=ideal_prefix_hit_rate(ids),
            workload_ideal_hit_rate=self.coverage.hit_rate,
            num_hash_ids_unused=self.num_past_length + self.num_cut)

    def notes(self) -> list[str]:
        """Plain-words lines: how hash ids became tokens and every id that got none (the ideal hit
        rates are in :meth:`sharing`)."""
        s = self.sharing()
        bt, tb = self.block_tokens, self.trace_block_tokens
        scale = f"x{bt / tb:g}, " if bt != tb else ""
        out = [f"hash_ids: {s.num_hash_ids:,} ids ({s.num_distinct_hash_ids:,} distinct) in "
               f"{len(self.all_ids):,} prompts became shared token blocks (equal ids, equal tokens); "
               f"a {tb}-token hash block became {bt} tokens ({scale}a multiple of block_size "
               f"{self.block_size}, so shared prefixes stay block-aligned)"]
        if self.num_past_length:
            out.append(f"hash_ids: {self.num_past_length:,} ids in {self.num_rows_past_length:,} rows "
                       f"were listed past the row's input_length (ceil(input_length / {tb}) "
                       f"blocks) and got no tokens")
        if self.num_cut:
            out.append(f"hash_ids: {self.num_cut:,} ids in {self.num_rows_cut:,} prompts fell past "
                       f"the clipped prompt length and were cut")
        if self.num_rows_longer:
            out.append(f"hash_ids: {self.num_rows_longer:,} prompts are longer than their hash ids "
                       f"cover; their remaining tokens are unique to the request")
        return out
