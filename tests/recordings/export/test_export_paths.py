"""The Perfetto export's fast path gives the trace the full replay gives: on recordings with every
lifecycle event, prefix caching, swapping and a cut-short run, the column-wise chunks of a
schema-4 file (``step_chunks.column_chunks``), in chunk sizes that cut runs and lifecycles at
every place, write the same bytes as the replay's chunks (``step_chunks.replayed_chunks``: a
record and a state snapshot per step), and handling every batch entry one by one (as the
per-record writer did) writes the same bytes as handling only the entries that change
something (``StepChunk.changed_entries``)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from recordings.export import step_chunks
from recordings.export.perfetto import export_perfetto
from recordings.export.step_chunks import StepChunk, column_chunks, has_columns, replayed_chunks
from recordings.file.open_reader import open_reader
from tests.support.engine_driver import SMALL_SEED, run_engine
from tests.support.export_runs import sim_demo

RUNS = {
    "lifecycle events": dict(seed=SMALL_SEED, writer_kwargs={"keyframe_interval": 8}),
    "prefix caching": dict(seed=4, num_requests=24, enable_prefix_caching=True, num_prefixes=3,
                           num_gpu_blocks=20),
    "swap": dict(seed=7, num_requests=20, preemption_mode="swap", num_cpu_blocks=24),
    "cut short": dict(seed=3, max_steps=12, num_requests=12),
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def recording(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "run.sqlite"
    run_engine(path, **RUNS[request.param])
    return path


def _trace(path, out, source) -> bytes:
    with open_reader(path) as reader:
        assert has_columns(reader)
        export_perfetto(reader, out, source=source)
    return out.read_bytes()


@pytest.mark.parametrize("chunk_steps", [1, 5, 512])
def test_columns_write_what_the_replay_writes(recording, tmp_path, chunk_steps):
    replayed = _trace(recording, tmp_path / "replayed.json",
                      functools.partial(replayed_chunks, chunk_steps=7))
    columns = _trace(recording, tmp_path / "columns.json",
                     functools.partial(column_chunks, chunk_steps=chunk_steps))
    assert columns == replayed


def test_every_entry_one_by_one_writes_the_same(recording, tmp_path, monkeypatch):
    fast = _trace(recording, tmp_path / "fast.json", functools.partial(column_chunks, chunk_steps=5))
    changed = StepChunk.changed_entries
    seen = []

    def every_entry(self, value, entries=None):
        picked = changed(self, value, entries)
        every = np.arange(len(self.request)) if entries is None else np.asarray(entries, np.int64)
        seen.append((len(picked), len(every)))
        return every
    monkeypatch.setattr(StepChunk, "changed_entries", every_entry)
    assert _trace(recording, tmp_path / "slow.json", functools.partial(column_chunks, chunk_steps=5)) == fast
    assert sum(p for p, _ in seen) < sum(e for _, e in seen)        # the fast path skips entries


@pytest.mark.parametrize("full_count_blocks", [0, 1 << 17])     # count where events were / all blocks
def test_the_swapped_and_cached_free_counts_follow_the_state(tmp_path, monkeypatch, full_count_blocks):
    monkeypatch.setattr(step_chunks, "FULL_COUNT_BLOCKS", full_count_blocks)
    rec = sim_demo(tmp_path / "swap.sqlite", 60, "--preemption-mode", "swap", "--num-cpu-blocks", "64",
                   "--enable-prefix-caching")
    with open_reader(rec) as reader:
        got = [(c.swapped.tolist(), c.cached_free.tolist()) for c in column_chunks(reader, chunk_steps=64)]
        swapped = sum((s for s, _ in got), [])
        cached = sum((c for _, c in got), [])
        states = [reader.state_at(k) for k in range(reader.latest_step() + 1)]
    assert swapped == [len(s.queue_rows("swapped")) for s in states] and max(swapped) > 0
    assert cached == [int(np.count_nonzero(s.cached_free_mask())) for s in states] and max(cached) > 0


def test_a_missing_step_is_named(recording, tmp_path):
    import sqlite3
    broken = tmp_path / "gap.sqlite"
    src, dst = sqlite3.connect(recording), sqlite3.connect(broken)
    src.backup(dst)
    src.close()
    dst.execute("DELETE FROM steps WHERE step = 3")
    dst.commit()
    dst.close()
    from recordings.errors import RecordingError
    with open_reader(broken) as reader, pytest.raises(RecordingError, match="step 3 is missing"):
        list(column_chunks(reader))


def test_each_event_is_written_as_json_dumps_writes_it(recording, tmp_path):
    import json
    lines = _trace(recording, tmp_path / "t.json", column_chunks).decode().splitlines()
    events = [line.rstrip(",") for line in lines[1:-1]]
    assert len(events) > 10
    assert all(json.dumps(json.loads(e), separators=(",", ":"), allow_nan=False) == e for e in events)
