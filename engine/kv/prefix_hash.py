"""Block hashes for automatic prefix caching: one hash per FULL block of a request's tokens,
chained with its parent block's hash. Pure Python (no torch).

Follows vLLM v1's ``hash_block_tokens`` / ``hash_request_tokens`` (vllm/v1/core/kv_cache_utils.py):
the hash of block ``i`` covers tokens ``[i * block_size, (i + 1) * block_size)`` of prompt +
output together with the hash of block ``i - 1`` (``ROOT_HASH`` for block 0), so equal hashes
mean equal whole prefixes, not only equal blocks. A partial last block has no hash.

The hash is Python's built-in tuple hash over ``(parent, tokens)``: deterministic across
processes for integers (no ``PYTHONHASHSEED`` dependence), which keeps runs and recordings
reproducible. It is a 64-bit signed integer, never 0 (0 marks "no hash" in the engine state).
Hits trust the hash, as vLLM's built-in-hash mode does: two different prefixes among N cached
blocks share a hash with probability about N^2 / 2^65 (1e-8 for a million blocks). The block
pool keeps each cached block's parent hash, so tests check every cached block's real contents
(the fake runner's paged cache) against its hash.
"""
from __future__ import annotations

from typing import Callable, Sequence

TokensOf = Callable[[int, int], Sequence[int]]   # (start, end) -> token ids [start, end)

ROOT_HASH = 0x5EED_B10C       # parent hash of a request's first block (any fixed non-zero int)


def hash_block(parent_hash: int, tokens: tuple[int, ...]) -> int:
    """Hash of one full block: ``tokens`` (a tuple of ``block_size`` token ids) after a block
    whose hash is ``parent_hash``. Returns a non-zero int (64-bit range)."""
    h = hash((parent_hash, tokens))
    return h if h != 0 else 1


def extend_block_hashes(hashes: list[int], tokens_of: TokensOf, num_tokens: int,
                        block_size: int) -> list[int]:
    """Append to ``hashes`` (the hashes of a request's first ``len(hashes)`` blocks, kept on the
    request) the hashes of its further full blocks among its first ``num_tokens`` tokens;
    ``tokens_of(start, end)`` gives its token ids ``[start, end)`` (``Request.token_ids``).
    Returns ``hashes``. O(new full blocks * block_size): each hash is computed once, as the
    tokens become known (vLLM keeps them on the request the same way).
    """
    parent = hashes[-1] if hashes else ROOT_HASH
    for i in range(len(hashes), num_tokens // block_size):
        parent = hash_block(parent, tuple(tokens_of(i * block_size, (i + 1) * block_size)))
        hashes.append(parent)
    return hashes
