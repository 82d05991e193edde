"""The machine a benchmark runs on: its load and its current speed (bench/bench_ui_frame.py)."""
from __future__ import annotations

import math
import os
import subprocess
import time

import numpy as np


def load() -> str:
    """``uptime``'s load averages (other processes share the CPUs)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average %.2f, %.2f, %.2f" % os.getloadavg()


def host_speed() -> str:
    """CPU ms of a fixed workload (a Python loop and a numpy sort, ~10 ms on a quiet host): the
    host's own speed drifts (other tenants), so frames of runs made at different times compare
    only in proportion to it."""
    best = math.inf
    for _ in range(3):                          # the first run also warms up
        t = time.thread_time()
        total = 0
        for i in range(200_000):
            total += i & 7
        np.sort(np.random.default_rng(0).random(200_000))
        best = min(best, time.thread_time() - t)
    return f"host speed check {best * 1e3:.1f} ms CPU (lower is faster)"
