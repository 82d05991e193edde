"""The state timeline round trip: the state rebuilt from the step records alone equals the
engine's state after every step, and a timeline continued from any snapshot gives the same later
states (what a replay from a keyframe does). Random workloads with pauses, resumes, aborts,
preemptions, rejections and failing steps run through the real engine and the fake runner with
``check_invariants`` on; the timeline's spare capacity is varied so its growth and compaction run
in short workloads too."""
from __future__ import annotations

import random
from collections import defaultdict
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.state.timeline as timeline_module
from engine.config import EngineConfig
from engine.outputs import Arrival, BlockEvent, StepRecord, Transition
from engine.request import SamplingParams
from engine.state.state import EngineState
from engine.state.timeline import StateTimeline
from tests.support.engine_driver import ACTIONS, Action, EngineRun, distinct_prompt


@st.composite
def runs(draw):
    block_size = draw(st.sampled_from([1, 2, 4]))
    config = EngineConfig(
        block_size=block_size,
        num_gpu_blocks=draw(st.integers(max(2, 12 // block_size), 96 // block_size)),   # tight: preempts
        max_model_len=64,
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.integers(4, 48)),
        long_prefill_token_threshold=draw(st.sampled_from([0, 5])),
        check_invariants=True,
    )
    n = draw(st.integers(1, 30))
    requests = [(f"r{i}", draw(st.integers(0, 25)), draw(st.integers(0, 40)), draw(st.integers(0, 16)))
                for i in range(n)]                           # (id, arrive step, prompt len, max_tokens)
    actions = draw(st.lists(st.tuples(st.integers(0, 60), st.sampled_from(ACTIONS), st.integers(0, n - 1)),
                            max_size=20))
    fail_steps = draw(st.lists(st.integers(0, 80), max_size=2))
    min_capacity = draw(st.sampled_from([1, 2, 4, 64]))
    picks = draw(st.lists(st.integers(0, 10_000), min_size=3, max_size=6))   # snapshots to continue from
    return config, requests, actions, fail_steps, min_capacity, picks


def run_engine(config, requests, actions, fail_steps, max_steps: int = 600):
    """Step the engine to the end (``engine_driver.EngineRun``); returns (engine, initial
    snapshot, records, states after each step). Arrivals and actions happen just before their
    step, arrivals first, each in list order."""
    run = EngineRun.start(config, fail_steps=fail_steps)
    engine = run.engine
    initial = engine.timeline.snapshot()
    arriving, acting = defaultdict(list), defaultdict(list)
    for i, (rid, arrive, p, m) in enumerate(requests):
        arriving[arrive].append((i, rid, p, m))
    for s, kind, i in actions:
        acting[s].append(Action(s, kind, requests[i][0]))
    last = max([*arriving, *acting], default=0)
    for step in range(max_steps):
        for i, rid, p, m in arriving.get(step, ()):
            run.add(distinct_prompt(i, p), SamplingParams(max_tokens=m, ignore_eos=True), request_id=rid)
        for act in acting.get(step, ()):
            run.act(act)
        if step > last:
            for r in list(engine.scheduler.paused):
                engine.resume_request(r.request_id)
            if not engine.has_unfinished:
                break
        run.step()
    assert not engine.has_unfinished, "did not drain"
    return engine, initial, run.records, run.states


def assert_round_trip(initial: EngineState, records: list[StepRecord], states: list[EngineState],
                      picks: list[int]) -> None:
    # From the initial snapshot, record by record.
    tl = StateTimeline.from_state(initial)
    for rec, live in zip(records, states):
        tl.apply(rec)
        assert tl.snapshot() == live, f"replayed state differs at step {rec.step}"
    # From mid-run snapshots (keyframes), to the end.
    everything = [initial] + states
    starts = sorted({p % len(everything) for p in picks} | {0, len(everything) // 2, len(everything) - 1})
    for k in starts:
        tl = StateTimeline.from_state(everything[k])
        assert tl.snapshot() == everything[k]
        for rec, live in zip(records[k:], states[k:]):
            tl.apply(rec)
            assert tl.snapshot() == live, f"continued from step {k - 1}: differs at step {rec.step}"


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_state_from_records_equals_engine_state(run):
    config, requests, actions, fail_steps, min_capacity, picks = run
    with mock.patch.object(timeline_module, "_MIN_CAPACITY", min_capacity):
        engine, initial, records, states = run_engine(config, requests, actions, fail_steps)
        assert initial == StateTimeline(config.num_gpu_blocks, config.block_size, config.max_num_seqs).snapshot()
        assert_round_trip(initial, records, states, picks)
    # Snapshots are immutable: later steps never changed an earlier one (rebuilt afresh here).
    tl = StateTimeline(config.num_gpu_blocks, config.block_size, config.max_num_seqs)
    for rec, live in zip(records, states):
        tl.apply(rec)
        assert tl.snapshot() == live
        assert not live.block_owner.flags.writeable and not live.columns["status"].flags.writeable
    if states:
        assert len(states[-1]) == 0 and states[-1].num_used_blocks == 0


@pytest.mark.slow
def test_round_trip_over_thousands_of_finished_requests():
    """A long run (growth, compaction, many finished): every step round-trips, and continuing
    from snapshots all along the run gives the same states."""
    rng = random.Random(3)
    config = EngineConfig(block_size=4, num_gpu_blocks=60, max_model_len=64, max_num_seqs=16,
                          max_num_batched_tokens=64, check_invariants=True)
    requests = [(f"r{i}", i // 8, rng.randint(1, 24), rng.randint(1, 10)) for i in range(2500)]
    actions = [(rng.randint(0, 300), rng.choice(ACTIONS), rng.randrange(2500)) for _ in range(300)]
    engine, initial, records, states = run_engine(config, requests, actions, fail_steps=[50, 200],
                                                  max_steps=20_000)
    assert engine.scheduler.num_finished == 2500 and sum(r.num_preemptions for r in records) > 0
    assert_round_trip(initial, records, states, picks=[k * 397 for k in range(6)])
    capacity = len(engine.timeline._alive)        # rows allocated: bounded by the live peak
    assert capacity <= 4 * max(len(s) for s in states) + 64


def test_from_state_continues_across_growth():
    """A snapshot with more live requests than the default capacity continues correctly."""
    tl = StateTimeline(num_total_blocks=8, block_size=4, max_num_seqs=2)
    arrivals = [Arrival(f"r{i}", 0, 0.0, 3, 2) for i in range(150)]
    tl.apply_changes(arrivals, [BlockEvent("allocated", "r7", (3, 5))], [])
    snap = tl.snapshot()
    tl2 = StateTimeline.from_state(snap)
    more = [Arrival(f"s{i}", 1, 1.0, 3, 2) for i in range(300)]
    finish = [Transition(f"r{i}", "FINISHED_ABORTED", -1, 0, 0) for i in range(0, 150, 2)]
    for t in (tl, tl2):
        t.apply_changes(more, [BlockEvent("freed", "r7", (3, 5))], finish)
    assert tl.snapshot() == tl2.snapshot() and tl.num_live == 150 - 75 + 300 + 0
    assert snap.block_ids("r7") == (3, 5) and tl.snapshot().block_ids("r7") == ()
    assert list(tl.snapshot().columns["seq"]) == sorted(tl.snapshot().columns["seq"])


def test_corrupt_records_are_refused():
    tl = StateTimeline(num_total_blocks=4, block_size=2, max_num_seqs=1)
    tl.apply_changes([Arrival("a", 0, 0.0, 2, 1)], [], [])
    with pytest.raises(ValueError, match="twice"):
        tl.apply_changes([Arrival("a", 0, 0.0, 2, 1)], [], [])
    with pytest.raises(KeyError):
        tl.apply_changes([], [BlockEvent("allocated", "nobody", (0,))], [])
    with pytest.raises(ValueError, match="kind"):
        tl.apply_changes([], [BlockEvent("swapped", "a", (0,))], [])
    with pytest.raises(KeyError):
        tl.apply_changes([], [], [Transition("nobody", "RUNNING", 0, 0, 0)])
    snap = tl.snapshot()                      # nothing was half-applied
    assert snap.request_ids == ("a",) and np.all(snap.block_owner == -1) and snap.view("a").status == "WAITING"


def test_arrival_that_compacts_keeps_the_steps_rows_right():
    """Regression: an arrival that fills the capacity compacts the rows (finished ones dropped);
    the same step's batch entries and tokens must land on the compacted rows (they used a row
    map taken before the arrivals: wrong requests updated, or KeyError)."""
    from engine.outputs import BatchEntry, NewToken

    tl = StateTimeline(num_total_blocks=4, block_size=4, max_num_seqs=4)
    n = timeline_module._MIN_CAPACITY
    tl.apply_changes([Arrival(f"r{i}", 0, 0.0, 3, 2) for i in range(n)], [], [])
    finish = [Transition(f"r{i}", "FINISHED_ABORTED", -1, 0, 0) for i in range(n - 2)]
    tl.apply_changes([], [], finish)
    assert tl.num_live == 2
    a, b = f"r{n - 2}", f"r{n - 1}"
    tl.apply_changes([Arrival("new", 1, 1.0, 3, 2)], [], [],
                     scheduled=[BatchEntry(a, 0, 3, 0, True), BatchEntry(b, 1, 3, 0, True)],
                     new_tokens=[NewToken(b, 0, 5, "")], token_time=2.0)
    snap = tl.snapshot()
    assert snap.request_ids == (a, b, "new")
    assert [(v.status, v.slot, v.num_computed_tokens, v.num_output_tokens) for v in snap.views()] == [
        ("RUNNING", 0, 3, 0), ("RUNNING", 1, 3, 1), ("WAITING", None, 0, 0)]
    assert snap.view(b).ttft == 2.0
