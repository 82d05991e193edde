"""Shared fixtures: a small recorded run of the real engine (see ``engine_driver.run_engine``)."""
from __future__ import annotations

import pytest

from tests.support.engine_driver import SMALL_SEED, EngineRun, run_engine


@pytest.fixture
def recorded(tmp_path) -> EngineRun:
    """A closed recording (keyframes every 8 steps) of a small run with every lifecycle event;
    ``recorded.path`` is the file."""
    run = run_engine(tmp_path / "run.sqlite", seed=SMALL_SEED, writer_kwargs={"keyframe_interval": 8})
    return run
