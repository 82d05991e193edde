"""Torch's CPU thread count on a machine shared with other work.

torch starts one thread per core. When another process keeps a core busy, the forward pass's
threads wait on each other at every barrier and a step can take ten times as long as with one
thread fewer (issue 20: 4.9 s between tokens against 0.2 s with ``--threads 1`` on 2 busy cores).
So unless ``--threads`` fixes it, the count is the cores left free by the other processes: the
cores this process may use minus the load average the others make (at start: the whole load;
while running: the load less this process's own CPU use), at least 1. It is checked again while
the engine runs (:meth:`ThreadGovernor.maybe_recheck`) and shown in the status bar.
"""
from __future__ import annotations

import math
import os
import time
from typing import Callable

RECHECK_S = 10.0        # seconds between two checks while running


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_average() -> float | None:
    """The 1-minute load average (runnable processes), or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def choose_num_threads(num_cores: int, others_load: float | None) -> int:
    """Threads for the forward pass: the cores the others leave free, rounded to the nearest
    whole core, in ``[1, num_cores]``; all cores when the load is unknown. ``others_load`` is the
    load average of the other processes (runnable threads, as ``os.getloadavg``)."""
    if others_load is None or not math.isfinite(others_load):
        return num_cores
    free = num_cores - max(0.0, others_load)
    return max(1, min(num_cores, int(free + 0.5)))


class ThreadGovernor:
    """Sets torch's thread count: ``fixed`` (``--threads``) or chosen from the cores and the
    others' load, at start and again every :data:`RECHECK_S` seconds of :meth:`maybe_recheck`.
    ``set_threads`` / ``get_threads`` default to torch's; ``cores``, ``load`` and ``clock``
    (wall seconds) and ``cpu_clock`` (this process's CPU seconds) may be replaced in tests."""

    def __init__(self, fixed: int | None = None, *, set_threads: Callable[[int], None] | None = None,
                 cores: Callable[[], int] = usable_cores, load: Callable[[], float | None] = load_average,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time) -> None:
        if fixed is not None and fixed < 1:
            raise ValueError(f"--threads must be >= 1, got {fixed}")
        self.fixed = fixed
        self._set = set_threads or _torch_set_threads
        self._cores, self._load, self._clock, self._cpu = cores, load, clock, cpu_clock
        self.num_threads = 0
        self.others_load: float | None = None
        self._since = (clock(), cpu_clock())
        self._apply(self._load())             # at start: the whole load is the others'

    def _apply(self, others: float | None) -> None:
        self.others_load = others
        n = self.fixed or choose_num_threads(self._cores(), others)
        if n != self.num_threads:
            self._set(n)
            self.num_threads = n

    def maybe_recheck(self) -> bool:
        """Choose again if :data:`RECHECK_S` seconds passed since the last check (never with
        ``fixed``): the others' load is the load average less this process's CPU use over the
        interval (in cores). Returns True when the count changed."""
        if self.fixed:
            return False
        wall, cpu = self._clock(), self._cpu()
        dt = wall - self._since[0]
        if dt < RECHECK_S:
            return False
        own = (cpu - self._since[1]) / dt
        self._since = (wall, cpu)
        load = self._load()
        before = self.num_threads
        self._apply(None if load is None else load - own)
        return self.num_threads != before

    def describe(self) -> str:
        """For the status bar: 'threads 1 of 2 (auto, others' load 1.2)' or 'threads 4 (--threads)'."""
        if self.fixed:
            return f"threads {self.num_threads} (--threads)"
        load = "" if self.others_load is None else f", others' load {max(0.0, self.others_load):.1f}"
        return f"threads {self.num_threads} of {self._cores()} (auto{load})"


def _torch_set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
