"""The machine a benchmark runs on: its load and its current speed (bench/bench_ui_frame.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # the repository's packages
from app.host_speed import host_speed_ms  # noqa: E402


def load() -> str:
    """``uptime``'s load averages (other processes share the CPUs)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average %.2f, %.2f, %.2f" % os.getloadavg()


def host_speed() -> str:
    """The host's speed now (``app.host_speed.host_speed_ms``, ~10 ms on a quiet host): the
    host's own speed drifts (other tenants), so frames of runs made at different times compare
    only in proportion to it."""
    return f"host speed check {host_speed_ms():.1f} ms (lower is faster)"
