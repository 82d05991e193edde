"""Shared fixtures: a small synthetic run and its recording."""
from __future__ import annotations

import pytest

from synthetic import SyntheticRun, generate, write_run


@pytest.fixture(scope="module")
def small_run() -> SyntheticRun:
    """A run with arrivals, chunked prefill, preemptions, pauses, aborts and a failure."""
    return generate(seed=1, num_requests=14, num_gpu_blocks=14, max_num_seqs=4)


@pytest.fixture
def recorded(tmp_path, small_run):
    """Path of a closed recording of ``small_run`` with keyframes every 8 steps."""
    path = tmp_path / "run.sqlite"
    write_run(small_run, path, keyframe_interval=8)
    return path
