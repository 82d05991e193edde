"""Counter-based random numbers for sampling: one uniform per row from (seed, counter), with
integer torch ops on the logits' device, so a batch of rows with different seeds needs no
per-row ``torch.Generator`` and a row's draw does not depend on what else is in its batch.

The idea is that of counter-based generators (Salmon et al., "Parallel Random Numbers: As Easy as
1, 2, 3", SC 2011, the Random123 / Philox family): the n-th random number of a stream is a hash of
(key, n), with no state carried between draws. The hash here is the ``lowbias32`` integer
permutation of Chris Wellons' hash-prospector (https://github.com/skeeto/hash-prospector,
"Prospecting for Hash Functions", 2018), in its improved form with multipliers 0x21f0aaad and
0x735a2d97 (found by TheIronBorn, listed in that README), chained over the 32-bit words of the
seed and the counter. It is cheaper than Philox in
eager torch (a few elementwise ops per round on ``[N]`` tensors, no 32x32->64 multiply-high) and
good enough for categorical sampling: every bit of the output depends on every input bit.

All values are kept in ``int64`` tensors holding unsigned 32-bit numbers; both multipliers are
below 2**31, so every product stays below 2**63 and nothing overflows ``int64`` (signed overflow
is undefined in C++): CPU and CUDA give bit-identical results by construction.
"""
from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_MUL1, _MUL2 = 0x21F0AAAD, 0x735A2D97      # both < 2**31: x * c < 2**63 for x < 2**32


def lowbias32(x: torch.Tensor) -> torch.Tensor:
    """The ``lowbias32`` permutation of [0, 2**32) (hash-prospector; shifts 16, 15, 15),
    elementwise on an int64 tensor of values in [0, 2**32); returns a new int64 tensor in the
    same range."""
    x = x ^ (x >> 16)
    x = (x * _MUL1) & _M32
    x = x ^ (x >> 15)
    x = (x * _MUL2) & _M32
    return x ^ (x >> 15)


def counter_uniform(seed: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    """One uniform number in (0, 1) per row: ``float64 [N]`` on the inputs' device.

    ``seed`` and ``counter``: ``int64 [N]`` (any values; all 64 bits of each are used, negative
    ones as their two's complement). The result is a fixed function of (seed[i], counter[i]):
    the same pair gives the same number on any device and in any batch. Resolution 2**-32 (the
    numbers are ``(h + 0.5) / 2**32`` for a 32-bit hash ``h``).

    Raises ``ValueError`` if the shapes differ or the dtypes are not int64.
    """
    if seed.dtype != torch.int64 or counter.dtype != torch.int64:
        raise ValueError(f"counter_uniform needs int64 seed and counter, got {seed.dtype} and {counter.dtype}")
    if seed.shape != counter.shape:
        raise ValueError(f"counter_uniform: seed shape {tuple(seed.shape)} != counter shape {tuple(counter.shape)}")
    h = lowbias32((seed & _M32) ^ 0x9E3779B9)            # distinct odd constants: no fixed point at 0
    h = lowbias32(h ^ ((seed >> 32) & _M32) ^ 0x85EBCA6B)
    h = lowbias32(h ^ ((counter >> 32) & _M32) ^ 0xC2B2AE35)
    h = lowbias32(h ^ (counter & _M32))
    return (h.to(torch.float64) + 0.5) * (1.0 / 2 ** 32)
