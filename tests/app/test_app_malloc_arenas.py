"""app.malloc_arenas: the cap on glibc's malloc arenas holds for threads started after it."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.malloc_arenas import limit_malloc_arenas

ROOT = Path(__file__).resolve().parents[2]
glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas only")

# Six threads alive at once each malloc small blocks (below the mmap threshold, so from an
# arena); glibc's malloc_stats() then prints one "Arena N:" section per arena to stderr.
PROBE = textwrap.dedent("""
    import ctypes, ctypes.util, sys, threading
    from app.malloc_arenas import limit_malloc_arenas
    if sys.argv[1] == "cap":
        assert limit_malloc_arenas(2)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    barrier = threading.Barrier(6)
    def work():
        blocks = [libc.malloc(1024) for _ in range(256)]
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads: t.start()
    for t in threads: t.join()
    libc.malloc_stats()
""")


def arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stderr.count("Arena ")


@glibc
def test_threads_share_at_most_the_capped_number_of_arenas():
    assert arenas("default") >= 4          # glibc's default: an arena per thread (up to 8 per core)
    assert arenas("cap") == 2


@glibc
def test_a_users_own_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas(2) is False


def test_a_cap_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1, got 0"):
        limit_malloc_arenas(0)
