"""Prompts made when their request is admitted, not when the workload is built.

A trace replay knows each request's prompt length up front but needs its token ids only from the
moment the request reaches the engine until it finishes. Building every prompt at load time costs
memory proportional to the whole trace (4 bytes per prompt token as ``array('i')``: 90 MB for the
Azure conversation trace, gigabytes for a day of one); a deferred prompt keeps a few numbers per
request instead (a generator state, a corpus offset, the row's hash ids) and makes the ids from
them on demand, the same ids every time, equal to what building them up front gave.

Three recipes, one per way ``recordings.workloads.workload.build_workload`` synthesises a prompt:
random ids from one numpy generator drawn request after request (:class:`RandomIdPrompts`: the
generator's state before each request is kept), a window of the tokenized corpus
(:class:`CorpusWindowPrompts`: the window's start is kept), and Mooncake hash blocks
(:class:`HashIdPrompts`, a pure function of the hash ids, the length and the request's index).
No torch.
"""
from __future__ import annotations

import array
from typing import Protocol, Sequence

import numpy as np


class PromptMaker(Protocol):
    """Makes one request's prompt from its ``recipe`` (whatever the maker kept for it);
    ``makes_text`` False: the text it makes is always None (the engine may then make the ids
    on first use, ``engine.request.PromptIdsOnUse``)."""

    makes_text: bool

    def make(self, recipe) -> tuple[Sequence[int], str | None]: ...


class RandomIdPrompts:
    """Uniform ids in ``[low, high]`` drawn with ``numpy.random.default_rng(seed).integers`` one
    request after another (int32), as ``build_workload`` draws them without a tokenizer.

    :meth:`recipe` is called once per request in build order with its length: it keeps the
    generator's state (PCG64: its 128-bit state and the buffered 32-bit half, about 150 bytes) and
    advances the generator past the request's draws (drawing and dropping them: a bounded integer
    draw may reject, so the count of raw draws is not known without drawing). :meth:`make`
    restores that state into a fresh generator and draws the same ids. Ids are returned as
    ``array('i')`` (4 bytes per token)."""

    makes_text = False

    def __init__(self, seed: int, low: int, high: int) -> None:
        self.low, self.high = low, high
        self._rng = np.random.default_rng(seed)
        self._inc = self._rng.bit_generator.state["state"]["inc"]

    def recipe(self, length: int) -> tuple[int, int, int, int]:
        """(state, has_uint32, uinteger, length) before this request's ``length`` draws."""
        st = self._rng.bit_generator.state
        kept = (st["state"]["state"], st["has_uint32"], st["uinteger"], length)
        self._rng.integers(self.low, self.high + 1, length, dtype=np.int32)
        return kept

    def make(self, recipe: tuple[int, int, int, int]) -> tuple[array.array, None]:
        state, has_uint32, uinteger, length = recipe
        bits = np.random.PCG64()
        bits.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": self._inc},
                      "has_uint32": has_uint32, "uinteger": uinteger}
        drawn = np.random.Generator(bits).integers(self.low, self.high + 1, length, dtype=np.int32)
        return array.array("i", drawn.tobytes()), None


class CorpusWindowPrompts:
    """Windows of a corpus cut with a tokenizer (``corpus`` is ``workload._CorpusPrompts``): the
    recipe is ``(start, length)``, the window's first character (picked at build time with the
    workload's ``random.Random``) and its token count; :meth:`make` encodes the window and decodes
    it back into the prompt text."""

    makes_text = True

    def __init__(self, corpus) -> None:
        self.corpus = corpus

    def make(self, recipe: tuple[int, int]) -> tuple[list[int], str]:
        ids = self.corpus.window_at(*recipe)
        return ids, self.corpus.tokenizer.decode(ids)


class HashIdPrompts:
    """Mooncake hash-id blocks (``tokens`` is a ``prefix_blocks.HashBlockPrompts``): the recipe is
    ``(hash_ids, num_used, length, request_index)`` (the row's ids, of which the first ``num_used``
    make the prompt: the row's own tuple is kept, not a copy), its tokens a pure function of them
    (``HashBlockPrompts.prompt(hash_ids[:num_used], length, request_index)``). Without a tokenizer
    the ids are ``array('i')`` and there is no text; with one (``tokenizer``) they are a list and
    the text their decoding."""

    def __init__(self, tokens, tokenizer=None) -> None:
        self.tokens, self.tokenizer = tokens, tokenizer

    @property
    def makes_text(self) -> bool:
        return self.tokenizer is not None

    def make(self, recipe: tuple[Sequence[int], int, int, int]) -> tuple[Sequence[int], str | None]:
        hash_ids, num_used, length, request_index = recipe
        drawn = self.tokens.prompt(hash_ids[:num_used], length, request_index)
        if self.tokenizer is None:
            return array.array("i", drawn.tobytes()), None
        ids = drawn.tolist()
        return ids, self.tokenizer.decode(ids)
