"""Scrubbing a live run back: the live source answers past steps from a bounded cache of exact
states (``engine.state.cache``), filled ahead of a scrub back; every answer equals the recording's
``Reader.state_at`` (and the engine's own state after that step), and the cache never holds
more than its bound, however long the run."""
from __future__ import annotations

import random

import pytest


from engine.run_info import RunInfo  # noqa: E402
from app.live import source as live_source  # noqa: E402
from app.live.source import LiveSource  # noqa: E402
from engine.state.cache import BackFill, StateCache, replay, state_nbytes  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from engine.state.state import EngineState  # noqa: E402
from tests.support.fake_runner import FakeRunner  # noqa: E402
from recordings.file.reader import Reader  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.file.writer import RecordingWriter  # noqa: E402


def _live_run(tmp_path, ring_steps: int, publish_every: int, num_requests: int = 40):
    """A finished fake-runner run recorded to a file and handed to a LiveSource as the engine
    worker does (every record; the state with every ``publish_every``-th)."""
    config = EngineConfig(block_size=4, num_gpu_blocks=48, max_model_len=64, max_num_seqs=6,
                          max_num_batched_tokens=24, check_invariants=True)
    path = tmp_path / "live.sqlite"
    run_info = RunInfo(config=config.to_dict(), model={"name": "fake"}, recording=str(path))
    writer = RecordingWriter(path, run_info, flush_interval_s=0.01, keyframe_interval=16)   # keyframes in the ring
    engine = LLMEngine(config, FakeRunner(48, 4), 48, recorder=writer)
    source = LiveSource(open_reader=Reader)
    source.reset(engine.state(), run_info)
    rng = random.Random(5)
    for i in range(num_requests):
        engine.add_request([rng.randrange(1, 900) for _ in range(rng.randrange(2, 20))],
                           SamplingParams(max_tokens=rng.randrange(2, 12), ignore_eos=True),
                           request_id=f"r{i}", arrival_time=float(i // 3))
    states = {}
    while engine.has_unfinished:
        record = engine.step()
        states[record.step] = engine.state()
        if record.step % publish_every == 0 or not engine.has_unfinished:
            source.publish(engine.state(), record)
        else:
            source.publish_record(record)
    writer.close()
    return source, states, open_reader(path)


@pytest.fixture
def small_ring(tmp_path, monkeypatch):
    monkeypatch.setattr(live_source, "RING_STEPS", 24)       # older history from the file
    return _live_run(tmp_path, 24, 5)


def test_scrubbing_back_gives_the_recorded_states_from_a_bounded_cache(small_ring):
    source, states, reader = small_ring
    last = source.latest_step()
    biggest = max(state_nbytes(s) for s in states.values())
    source.states = StateCache(max_bytes=12 * biggest)      # a dozen states: eviction at work
    # the steps a replay from a keyframe through the ring reaches (older ones come from the file)
    ring_first = source.records(0, last + 1)[-live_source.RING_STEPS].step
    keyframe = min(s for (s,) in reader.execute("SELECT step FROM keyframes") if s >= ring_first - 1)
    in_ring = range(keyframe + 1, last)
    found = []
    for k in range(last - 1, -1, -1):                        # back one step a call, to the start
        if k in source.states:
            found.append(k)
        assert source.state_at(k) == reader.state_at(k) == states[k], k
        assert source.states.nbytes <= source.states.max_bytes
    # there, all but the first few steps back were filled ahead of the cursor
    assert len(in_ring) > 12 and len([k for k in found if k in in_ring]) >= len(in_ring) - 8


def test_random_steps_equal_the_reader(small_ring):
    source, states, reader = small_ring
    last = source.latest_step()
    source.states = StateCache(max_bytes=4 * max(state_nbytes(s) for s in states.values()))
    states[-1] = reader.state_at(-1)
    rng = random.Random(11)
    for k in [rng.randrange(-1, last + 3) for _ in range(60)]:
        assert source.state_at(k) == states[min(k, last)], k
        assert source.states.nbytes <= source.states.max_bytes
        assert all(source.states.get(s) == states[s] for s in source.states.steps())


def test_published_states_are_kept_only_when_exactly_after_their_step(small_ring):
    source, states, _ = small_ring
    last = source.latest_step()
    assert last in source.states                 # published with its record
    source.states.clear()
    late = states[last]
    source.publish(late)                         # no record: may hold changes since the step
    assert len(source.states) == 0


def test_cache_evicts_after_the_cursor_first_then_the_farthest_before():
    size = state_nbytes(EngineState(0, 0.0, 8, 4, 2))
    cache = StateCache(max_bytes=4 * size)
    for s in range(6):                           # following: the oldest go
        cache.add(EngineState(s, 0.0, 8, 4, 2))
    assert cache.steps() == [2, 3, 4, 5] and cache.nbytes == 4 * size
    cache.cursor = 3                             # scrubbed back to 3: 5, then 4, go first
    cache.add(EngineState(1, 0.0, 8, 4, 2))
    assert cache.steps() == [1, 2, 3, 4]
    cache.add(EngineState(0, 0.0, 8, 4, 2))
    assert cache.steps() == [0, 1, 2, 3]
    cache.cursor = 0
    cache.add(EngineState(2, 1.0, 8, 4, 2))      # the same step again replaces it
    assert cache.steps() == [0, 1, 2, 3] and cache.get(2).clock == 1.0
    assert cache.at_or_before(10).step == 3 and cache.at_or_before(-1) is None
    with pytest.raises(ValueError, match="max_bytes"):
        StateCache(max_bytes=0)


def test_back_fill_does_one_unit_of_work_a_call_on_a_zero_budget(small_ring):
    """Budget 0: each call starts the replay, or applies one record (copying its state out
    when that step is missing), then stops."""
    source, states, reader = small_ring
    records = {r.step: r for r in reader.records(0, reader.latest_step() + 1)}
    cache = StateCache(max_bytes=10**9)
    cache.add(states[10])
    fill = BackFill(depth=8, budget_s=0.0, lead=8, checkpoints=True)
    calls = [fill.run(30, cache, cache.at_or_before,
                      lambda a, b: (records[s] for s in range(a, b))) for _ in range(22)]
    # start from step 10, apply 11..20 (keeping 11: the checkpoint the stretch below 21, 12..20,
    # will start from), then keep 21..29 (depth 8 below 29)
    assert calls == [0] * 11 + [1] * 9 + [0, 0]
    assert cache.steps() == [10, 11, *range(21, 30)]
    assert all(cache.get(s) == states[s] for s in cache.steps())
    # without checkpoints (the live source: its ring's records are cheap to replay) only 21..29
    plain = StateCache(max_bytes=10**9)
    plain.add(states[10])
    BackFill(depth=8, budget_s=60.0, lead=8).run(30, plain, plain.at_or_before,
                                                lambda a, b: (records[s] for s in range(a, b)))
    assert plain.steps() == [10, *range(21, 30)]
    # nothing missing near the cursor: no replay
    assert fill.run(30, cache, cache.at_or_before, lambda a, b: pytest.fail("replayed")) == 0


def test_back_fill_gets_ahead_then_copies_one_state_a_call(small_ring):
    """With time to spare a call fills the whole stretch below the cursor; once the ``lead``
    steps below the cursor are cached, a call copies one state out and stops."""
    source, states, reader = small_ring
    records = {r.step: r for r in reader.records(0, reader.latest_step() + 1)}
    records_of = lambda a, b: (records[s] for s in range(a, b))   # noqa: E731
    cache = StateCache(max_bytes=10**9)
    cache.add(states[10])
    fill = BackFill(depth=8, budget_s=60.0, lead=4, checkpoints=True)
    assert fill.run(30, cache, cache.at_or_before, records_of) == 9     # 21..29 at once
    assert fill.ahead(30, cache) == 4
    # ahead already (24..21 cached): the stretch below 21 (12..20: depth 8 below 20), one a call
    # from the checkpoint at 11 the first call left (not from 10 again)
    asked = []
    records_of = lambda a, b: asked.append(a) or (records[s] for s in range(a, b))   # noqa: E731
    assert [fill.run(25, cache, cache.at_or_before, records_of) for _ in range(10)] == [1] * 9 + [0]
    assert asked[0] == 12
    assert cache.steps() == [10, *range(11, 30)]
    assert all(cache.get(s) == states[s] for s in cache.steps())
    # records that stop short of the target end the replay (no endless loop)
    assert fill.run(12, cache, cache.at_or_before, lambda a, b: iter(())) == 0
    with pytest.raises(ValueError, match="depth and lead"):
        BackFill(depth=0)
    assert replay(states[10], (records[s] for s in range(11, 15)), 14) == states[14]
    with pytest.raises(ValueError, match="before step 20"):
        replay(states[10], (records[s] for s in range(11, 15)), 20)


def test_a_step_back_that_misses_keeps_the_next_steps_back(small_ring):
    """The first step back from a cached state replays from a state before it, and keeps the
    fill's ``lead`` steps it passes on the way: the next frames find their states."""
    source, states, _ = small_ring
    last = source.latest_step()
    source.states.clear()
    for s in (last - 12, last):
        source.states.add(states[s])
    source._fill = BackFill(budget_s=0.0, lead=6)        # the fill does next to nothing
    assert source.state_at(last - 1) == states[last - 1]
    assert set(range(last - 7, last + 1)) <= set(source.states.steps())
    assert all(source.states.get(s) == states[s] for s in source.states.steps())
    # a jump (no cached state just after it) keeps only its own state
    source.states.clear()
    source._fill.reset()
    source.states.add(states[last - 12])
    assert source.state_at(last - 3) == states[last - 3]
    assert source.states.steps() == [last - 12, last - 3]


def test_back_fill_stops_when_the_cache_is_full_below_the_cursor(small_ring):
    """A cache that holds fewer states than the fill's depth: a call stops at the first state
    evicted from below the cursor (no endless fill-and-evict), and the cache stays bounded."""
    source, states, reader = small_ring
    records = {r.step: r for r in reader.records(0, reader.latest_step() + 1)}
    size = max(state_nbytes(states[s]) for s in range(10, 30))
    cache = StateCache(max_bytes=4 * size)
    cache.cursor = 30
    cache.add(states[10])
    fill = BackFill(depth=16, budget_s=60.0, lead=16)
    made = fill.run(30, cache, cache.at_or_before, lambda a, b: (records[s] for s in range(a, b)))
    assert 1 <= made <= 5 and cache.evicted_below == 1
    assert cache.nbytes <= cache.max_bytes
    assert all(cache.get(s) == states[s] for s in cache.steps())


def test_a_scrub_back_the_fill_cannot_keep_up_with_stays_on_the_ring(small_ring, monkeypatch):
    """A loaded machine: the fill does next to nothing, so steps back miss the cache. Each is
    replayed from the recording's keyframe before it through the ring, never asked of the
    recording step by step (that decodes its records from the file and fills the reader's own
    scrub-back cache beside the live source's)."""
    source, states, _ = small_ring
    last = source.latest_step()
    ring_first = source.records(0, last + 1)[-live_source.RING_STEPS].step
    history = source._history()
    monkeypatch.setattr(history, "state_at", lambda k: pytest.fail(f"state_at({k}) asked"))
    keyframes = {s for (s,) in history.execute("SELECT step FROM keyframes")}
    source.states.clear()
    source._fill = BackFill(budget_s=0.0, lead=1)
    in_ring = [k for k in range(last - 1, ring_first, -1)
               if max(s for s in keyframes if s <= k) >= ring_first - 1]
    assert len(in_ring) > 8
    for k in in_ring:
        assert source.state_at(k) == states[k], k
    assert len(history._scrub.states) == 0 and not history._scrub.records
