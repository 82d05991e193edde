"""Fewer glibc malloc arenas, so that memory follows what is live.

glibc gives each thread that allocates while another holds the lock its own malloc arena (up to
8 per core). The engine thread and the recorder's writer thread both allocate the mid-sized
blocks Python hands to ``malloc`` (prompt token arrays, compressed step blobs, SQLite pages,
numpy columns); freed memory stays in the arena that served it, and the arenas' free space
fragments instead of going back to the OS. Measured on the Azure conversation trace through
``batchscope run --executor sim`` (bench/bench_scale.py's settings, 20,239 steps): peak RSS 421 MB
with glibc's default, 239 MB with two arenas, 285 MB with one (engine and writer then contend
for one lock), 353 MB with the default plus ``malloc_trim`` every 1,000 steps.

:func:`limit_malloc_arenas` is glibc's ``mallopt(M_ARENA_MAX, n)`` (the call behind the
``MALLOC_ARENA_MAX`` variable and the ``glibc.malloc.arena_max`` tunable; see the glibc manual,
"Memory Allocation Tunables"). It must run before the threads start: an arena made before stays.
Elsewhere (macOS, Windows, musl) it does nothing.
"""
from __future__ import annotations

import ctypes
import os
import platform

M_ARENA_MAX = -8            # glibc's malloc.h
ENV = "MALLOC_ARENA_MAX"    # a user's own setting wins


def limit_malloc_arenas(n: int = 2) -> bool:
    """Cap glibc's malloc arenas at ``n`` (>= 1) for the threads that allocate from now on,
    unless the environment sets ``MALLOC_ARENA_MAX`` (then glibc already used it). Returns True
    when the cap was set, False where there is no glibc or glibc refused. Raises ``ValueError``
    if ``n`` < 1."""
    if n < 1:
        raise ValueError(f"malloc arenas: need at least 1, got {n}")
    if os.environ.get(ENV) or platform.libc_ver()[0] != "glibc":
        return False
    try:                     # the process's own symbols: glibc's mallopt, no library search
        return bool(ctypes.CDLL(None).mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(n)))
    except (OSError, AttributeError):
        return False
