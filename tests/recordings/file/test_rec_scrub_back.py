"""Scrubbing a recording back (``recordings.file.scrub_back``): every state a step-back asks for
equals the one the engine had, the reader's cache of them stays within its bound, and after the
first steps back each step is served from states filled ahead (no keyframe decoded per step)."""
from __future__ import annotations

from engine.state.cache import StateCache, state_nbytes
from recordings.file import codec
from recordings.file.open_reader import open_reader
from recordings.file.scrub_back import READ_CHUNK
from tests.support.engine_driver import run_engine


def test_scrub_back_equals_the_engine_from_a_bounded_cache(tmp_path, monkeypatch):
    run = run_engine(tmp_path / "run.sqlite", seed=3, num_requests=40, max_output=20,
                     writer_kwargs={"keyframe_interval": 16})
    n = len(run.records)
    assert n > 80
    with open_reader(run.path) as reader:
        bound = 12 * max(state_nbytes(s) for s in run.states)
        reader._scrub.states = StateCache(max_bytes=bound)          # eviction at work
        reader._scrub.fill.budget_s = 60.0                          # as a frame with time to spare
        decoded = []                                                # keyframes read
        from_blob = codec.state_from_blob
        monkeypatch.setattr(codec, "state_from_blob", lambda *a: decoded.append(1) or from_blob(*a))
        read = []                                                   # records read from the file
        records = reader._records
        monkeypatch.setattr(reader, "_records", lambda a, b: read.extend(range(a, b)) or records(a, b))
        served = []
        for k in range(n - 1, -1, -1):                              # back one step a call
            served.append(k in reader._scrub.states)
            assert reader.state_at(k) == run.states[k], k
            assert reader._scrub.states.nbytes <= bound
            # decoded records (hundreds of tracked objects each at scale) are not kept behind
            # the fill: at most what one read brought ahead of it
            assert len(reader._scrub.records) <= READ_CHUNK
        # each stretch replays from the checkpoint the one above left, not from the keyframe
        # again: every record read at most about twice in the whole scrub back
        assert len(read) <= 2 * n
        # after the first steps back every step was filled ahead, with about one keyframe
        # decoded per keyframe interval instead of one per step
        assert all(served[3:])
        assert len(decoded) <= n // 16 + 3
        # a forward pass does no fill work and keeps nothing in the scrub cache
        reader._scrub.states.clear()
        assert [reader.state_at(k) for k in range(n)] == run.states
        assert len(reader._scrub.states) == 0
