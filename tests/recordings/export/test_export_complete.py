"""One definition of a complete run (``recordings.file.completeness``): the exports say
``"complete": false`` wherever ``batchscope summary`` and ``check`` print INCOMPLETE."""
from __future__ import annotations

import json

import pytest

from app.cli import main
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from recordings.file.completeness import completeness
from recordings.file.open_reader import open_reader
from recordings.file.writer import RecordingWriter
from tests.support.fake_runner import FakeRunner

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=64, max_num_seqs=4,
                      max_num_batched_tokens=16, clock="virtual")


def record(path, steps: int | None) -> None:
    """Eight requests; ``steps``: stop after that many steps (the writer still closes the
    file, as a run stopped from the window does), None: serve them all."""
    writer = RecordingWriter(path, {"config": CONFIG.to_dict(), "model": {"name": "fake"}})
    engine = LLMEngine(CONFIG, FakeRunner(64, 4), 64, recorder=writer)
    for i in range(8):
        engine.add_request([1 + i, 2, 3, 4], SamplingParams(max_tokens=10, ignore_eos=True),
                           request_id=f"r{i}")
    while engine.has_unfinished and (steps is None or engine.step_index < steps):
        engine.step()
    writer.close()


def exported(path, fmt: str, tmp_path) -> dict:
    out = tmp_path / f"out-{fmt}.json"
    assert main(["export", str(path), "--format", fmt, "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    return doc if fmt == "json" else doc["otherData"]


@pytest.mark.parametrize("steps", [5, None])
def test_exports_agree_with_summary_and_check(tmp_path, capsys, steps):
    path = tmp_path / "run.sqlite"
    record(path, steps)
    with open_reader(path) as reader:
        state = completeness(reader)
    assert state.closed_cleanly and state.is_complete is (steps is None)
    capsys.readouterr()
    main(["summary", str(path)])
    said_incomplete = "INCOMPLETE" in capsys.readouterr().out
    main(["check", str(path)])
    assert ("INCOMPLETE" in capsys.readouterr().out) is said_incomplete is (steps is not None)
    for fmt in ("json", "perfetto"):
        data = exported(path, fmt, tmp_path)
        assert data["complete"] is (not said_incomplete), fmt
        assert data["num_unfinished"] == state.num_unfinished and data["closed_cleanly"] is True
