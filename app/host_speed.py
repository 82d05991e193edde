"""The host's current CPU speed, for runs compared on the wall clock.

Other processes on a shared machine slow a run down as much as a worse schedule does: two
wall-clock runs made minutes apart compare only in proportion to the host's speed at the time.
:func:`host_speed_ms` times a fixed workload (a Python loop and a numpy sort, about 10 ms of CPU
on a quiet host; the best of three, on this thread's CPU clock and on the wall clock), and
:func:`speed_change_note` says when the speed changed between runs.
"""
from __future__ import annotations

import math
import time

import numpy as np

CHANGE_RATIO = 1.3      # slower or faster by this factor between two checks: the runs' times differ for it


def host_speed_ms() -> float:
    """Wall-clock milliseconds of a fixed workload, the best of three runs (lower is faster).
    Wall time, not CPU time: a process waiting for a busy core is what slows a run down."""
    best = math.inf
    data = np.random.default_rng(0).random(200_000)
    for _ in range(3):                          # the first run also warms up
        t = time.perf_counter()
        total = 0
        for i in range(200_000):
            total += i & 7
        np.sort(data)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def speed_change_note(checks: list[tuple[str, float, float]]) -> str | None:
    """``checks``: per run, (its name, host speed before it, after it) in ms from
    :func:`host_speed_ms`. A line saying by how much the host's speed changed across the runs
    when the slowest check took :data:`CHANGE_RATIO` times the fastest or more, else None."""
    points = [(ms, f"{when} {name}") for name, before, after in checks
              for ms, when in ((before, "before"), (after, "after"))]
    if not points:
        return None
    fast, slow = min(points), max(points)
    if slow[0] < CHANGE_RATIO * fast[0]:
        return None
    return (f"the host's speed changed during these runs: its speed check took {fast[0]:.1f} ms "
            f"{fast[1]} and {slow[0]:.1f} ms {slow[1]} ({slow[0] / fast[0]:.1f}x slower; other work "
            f"on this machine). Wall-clock times differ by that too, not only by the configs: for "
            f"a load-free comparison use --clock virtual (times in steps) or --executor sim")
