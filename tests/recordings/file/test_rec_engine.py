"""The recorded engine runs themselves: they cover the lifecycle, and a virtual-clock run is
recorded identically every time."""
from __future__ import annotations

from collections import Counter

from tests.support.engine_driver import SMALL_SEED, run_engine
from recordings.file.open_reader import open_reader


def test_small_run_covers_the_lifecycle(recorded):
    kinds = Counter(e.kind for r in recorded.records for e in r.events)
    for kind in ("arrived", "rejected", "scheduled", "preempted", "paused", "resumed", "aborted",
                 "failed", "finished"):
        assert kinds[kind] > 0, kind
    assert any(r.not_admitted for r in recorded.records)
    assert any(r.error for r in recorded.records)
    assert {t.status for r in recorded.records for t in r.transitions} >= {
        "FINISHED_STOPPED", "FINISHED_LENGTH", "FINISHED_ABORTED", "FINISHED_ERROR", "PAUSED",
        "PREEMPTED"}
    assert {b.kind for r in recorded.records for b in r.block_events} == {"allocated", "freed"}
    assert not len(recorded.final) and len(recorded.finished) == len(recorded.prompts)


def table_rows(path) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every table's columns and rows, without the wall-clock columns."""
    with open_reader(path) as reader:
        out = {}
        for (table,) in reader.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                       "ORDER BY name"):
            names = [r[1] for r in reader.execute(f"PRAGMA table_info({table})")]
            keep = [c for c in names
                    if not c.endswith("_ns") and c not in ("started_at", "closed_at")]
            rows = reader.execute(f"SELECT {', '.join(keep)} FROM {table} ORDER BY 1, 2")
            out[table] = (keep, rows)
        return out


def test_identical_virtual_clock_runs_record_identical_rows(tmp_path):
    runs = [run_engine(tmp_path / f"run{i}.sqlite", SMALL_SEED, num_requests=40,
                       num_gpu_blocks=20, writer_kwargs={"keyframe_interval": 16})
            for i in range(2)]
    first, second = (table_rows(run.path) for run in runs)
    assert set(first) == {"runs", "requests", "steps", "events", "block_events", "transitions",
                          "keyframes"}
    for table in first:
        columns, rows = first[table]
        assert len(rows) > 0, table
        assert second[table] == first[table], f"table {table} differs"
    steps = first["steps"][0]
    assert "start_ns" not in steps and "recorder_wait_ns" not in steps  # wall clock left out
    assert "token_time" in steps and "batch" in steps
    # and a different seed gives a different recording
    other = run_engine(tmp_path / "other.sqlite", SMALL_SEED + 1, num_requests=40,
                       num_gpu_blocks=20, writer_kwargs={"keyframe_interval": 16})
    assert table_rows(other.path)["steps"] != first["steps"]
