"""Live knobs changed between steps (the window does it while paused): ``max_num_seqs``,
``max_num_batched_tokens`` and the usable KV pool. Each change preempts what it must, is recorded
with the next step, and the run still ends with every output equal to the reference run."""
from __future__ import annotations

import numpy as np
import pytest

from engine.config import ConfigError, EngineConfig
from engine.engine import LLMEngine
from engine.sched.preemption import preemption_info
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from engine.state.state import RESERVED
from tests.support.engine_driver import distinct_prompt
from tests.support.fake_runner import FakeRunner, reference_output
from engine.vocab import PreemptionReason

BLOCKS = 40


def make_engine(tmp_path=None, **kw):
    config = EngineConfig(block_size=4, num_gpu_blocks=BLOCKS, max_model_len=128, max_num_seqs=6,
                          max_num_batched_tokens=32, check_invariants=True, **kw)
    writer = None
    if tmp_path is not None:
        from recordings.file.writer import RecordingWriter
        writer = RecordingWriter(tmp_path / "knobs.sqlite", {"config": config.to_dict()}, keyframe_interval=8)
    runner = FakeRunner(BLOCKS, 4, num_cpu_blocks=config.num_cpu_blocks)
    engine = LLMEngine(config, runner, BLOCKS, recorder=writer)
    done = engine.collect_finished()
    prompts = {f"r{i}": distinct_prompt(i, 6 + 3 * i) for i in range(6)}
    for rid, p in prompts.items():
        engine.add_request(list(p), SamplingParams(max_tokens=20, ignore_eos=True), request_id=rid)
    return engine, done, prompts, writer


def preemptions(records, reason):
    return [e.request_id for r in records for e in r.events
            if e.kind == "preempted" and preemption_info(e.detail).reason == reason]


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_shrinking_the_pool_preempts_holders_and_outputs_stay_right(tmp_path, mode):
    kw = {"preemption_mode": "swap", "num_cpu_blocks": 40} if mode == "swap" else {}
    engine, done, prompts, writer = make_engine(tmp_path, **kw)
    records = [engine.step() for _ in range(4)]
    holders = engine.scheduler.kv.blocks_held_outside(12)
    assert holders, "the workload should hold blocks above 12 by now"
    assert engine.set_knobs(num_usable_blocks=12) == [("num_usable_blocks", 12)]
    state = engine.state()                            # visible before the next step
    assert np.count_nonzero(state.block_owner == RESERVED) == BLOCKS - 12
    assert not (state.block_owner[12:] >= 0).any()
    records.append(engine.step())
    assert records[-1].knobs == (("num_usable_blocks", 12),)
    assert set(preemptions(records, PreemptionReason.POOL_SHRUNK)) == holders
    for _ in range(60):
        records.append(engine.step())
        assert max((b for t in engine.scheduler.kv.block_tables.values() for b in t), default=0) < 12
    engine.set_knobs(num_usable_blocks=BLOCKS)       # grow back
    records += engine.run_until_done(max_steps=500)
    writer.close()
    assert {rid: r.output_token_ids for rid, r in done.items()} == {
        rid: reference_output(p, 20) for rid, p in prompts.items()}
    from recordings.file.open_reader import open_reader
    with open_reader(tmp_path / "knobs.sqlite") as reader:
        assert reader.records(0, len(records)) == records
        final = reader.state_at(len(records) - 1)
    assert final == engine.state() and not (final.block_owner == RESERVED).any()


def test_lowering_max_num_seqs_preempts_the_cut_slots():
    engine, done, prompts, _ = make_engine()
    for _ in range(3):
        engine.step()
    slots = {r.request_id: r.slot for r in engine.scheduler.running}
    engine.set_knobs(max_num_seqs=2)
    assert engine.state().max_num_seqs == 2
    cut = {rid for rid, slot in slots.items() if slot >= 2}
    rec = engine.step()
    assert set(preemptions([rec], PreemptionReason.SLOTS_CUT)) == cut and rec.knobs == (("max_num_seqs", 2),)
    assert all(r.slot < 2 for r in engine.scheduler.running) and len(engine.scheduler.running) <= 2
    engine.run_until_done(max_steps=500)
    assert {rid: r.output_token_ids for rid, r in done.items()} == {
        rid: reference_output(p, 20) for rid, p in prompts.items()}


def test_a_request_that_no_longer_fits_fails_with_the_knob_named():
    engine, done, _, _ = make_engine()
    engine.add_request(list(distinct_prompt(9, 60)), SamplingParams(max_tokens=30, ignore_eos=True),
                       request_id="big")                 # 90 tokens: 23 blocks
    engine.set_knobs(num_usable_blocks=10)
    assert "big" not in engine.requests
    engine.step()                                        # handed over with the next step
    assert done["big"].status is RequestStatus.FINISHED_ERROR
    assert "num_usable_blocks was lowered to 10" in done["big"].error


def test_bad_knob_values_name_the_knob_and_change_nothing():
    engine, _, _, _ = make_engine()
    engine.step()
    before = engine.state()
    with pytest.raises(ConfigError, match="max_num_seqs must be >= 1"):
        engine.set_knobs(max_num_seqs=0)
    with pytest.raises(ValueError, match=r"num_usable_blocks must be in \[1, 40\]"):
        engine.set_knobs(num_usable_blocks=41)
    assert engine.state() == before and engine.config.max_num_seqs == 6
