"""Parallel sampling through ``LLMEngine`` and the fake paged runner, with G1-G6 checked every
step (``engine_invariants``): each sequence's output equals a run of its own (greedy: the
single-sequence output; seeded: a solo run with ``seed + k``) under preemption, swapping and
prefix caching; the recording replays the live state step by step; the prompt's id aborts and
pauses the whole group."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.engine_driver import (Action, Arrival, assert_outputs_match, distinct_prompt,
                                         reference_outputs, run_workload, solo_arrivals)
from tests.support.engine_invariants import assert_recording_matches
from tests.support.fake_runner import FakeRunner, reference_output
from engine.vocab import BlockEventKind
from tests.support.block_event_rows import block_events, replace_block_event

SEEDED = SamplingParams(max_tokens=14, n=3, temperature=1.0, seed=40, ignore_eos=True)


def workload(params: SamplingParams) -> list[Arrival]:
    """Two groups and two single requests over a tight cache (prompts 10 and 13 tokens: a
    partial last block of 4)."""
    return [Arrival("g", 0, distinct_prompt(0, 10), params),
            Arrival("s", 0, distinct_prompt(1, 9), SamplingParams(max_tokens=14, ignore_eos=True)),
            Arrival("h", 2, distinct_prompt(2, 13), params),
            Arrival("t", 3, distinct_prompt(3, 6), SamplingParams(max_tokens=10, ignore_eos=True))]


CONFIGS = {
    "recompute": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=6, max_num_batched_tokens=32),
    "swap": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=6, max_num_batched_tokens=32,
                         preemption_mode="swap", num_cpu_blocks=12),
    "prefix-caching": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=6,
                                   max_num_batched_tokens=32, enable_prefix_caching=True),
    "no-chunking": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=6, max_model_len=64,
                                max_num_batched_tokens=64, enable_chunked_prefill=False),
    "priority": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=6, max_num_batched_tokens=32,
                             policy="priority"),
    "static": EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=6, max_num_batched_tokens=32,
                           policy="static"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_seeded_sequence_equals_a_solo_run_with_its_seed(name):
    config = CONFIGS[name]
    arrivals = workload(SEEDED)
    result = run_workload(config, arrivals)
    outs = result.outputs()
    assert set(outs) == {"g#0", "g#1", "g#2", "s", "h#0", "h#1", "h#2", "t"}
    assert len({tuple(outs[f"g#{k}"]) for k in range(3)}) == 3       # the seeds make them differ
    assert_outputs_match(result, reference_outputs(config, solo_arrivals(arrivals)))
    events = {ev.kind for r in result.records for ev in r.events}
    assert "forked" in events and result.runner.num_copied_blocks > 0
    if name in ("recompute", "swap", "prefix-caching"):
        assert result.num_preemptions > 0
    if name == "swap":
        assert any('"mode":"swap"' in ev.detail for r in result.records for ev in r.events)


def test_greedy_sequences_all_equal_the_single_sequence_output():
    config = CONFIGS["recompute"]
    arrivals = workload(SamplingParams(max_tokens=14, n=3, ignore_eos=True))
    result = run_workload(config, arrivals)
    for a in arrivals:
        want = reference_output(a.prompt, a.params.max_tokens)
        ids = [a.request_id] if a.params.n == 1 else [f"{a.request_id}#{k}" for k in range(a.params.n)]
        assert [result.requests[rid].output_token_ids for rid in ids] == [want] * len(ids)


@pytest.mark.parametrize("name", ["recompute", "swap", "prefix-caching"])
def test_recording_replays_a_run_with_groups(tmp_path, name):
    result = run_workload(CONFIGS[name], workload(SEEDED), record_to=tmp_path / "run.sqlite",
                          keyframe_interval=4)
    assert any(ev.kind == "forked" for r in result.records for ev in r.block_events)
    assert any(len(st.shared_block) for st in result.states)
    assert_recording_matches(result)


def test_the_prompt_id_aborts_and_pauses_the_group():
    config = CONFIGS["recompute"]
    arrivals = workload(SEEDED)
    actions = [Action(3, "pause", "g"), Action(6, "resume", "g"), Action(8, "abort", "h")]
    result = run_workload(config, arrivals, actions)
    assert all(ok for _, ok in result.action_results)
    assert [result.requests[f"h#{k}"].status for k in range(3)] == [RequestStatus.FINISHED_ABORTED] * 3
    paused = {ev.request_id for r in result.records for ev in r.events if ev.kind == "paused"}
    assert paused == {"g#0", "g#1", "g#2"}
    assert_outputs_match(result, reference_outputs(config, solo_arrivals(arrivals)))


def test_one_sequence_aborts_alone_and_ids_stay_unique():
    engine = LLMEngine(CONFIGS["recompute"], FakeRunner(16, 4), 16)
    done = engine.collect_finished()
    assert engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=6, n=2), request_id="a") == "a"
    assert set(engine.requests) == {"a#0", "a#1"}
    for rid, n in (("a", 1), ("a#1", 1), ("b", 1)):
        if rid != "b":
            with pytest.raises(ValueError, match="duplicate request id"):
                engine.add_request([1], SamplingParams(n=n), request_id=rid)
    engine.add_request([1, 2], SamplingParams(max_tokens=2), request_id="c#1")
    with pytest.raises(ValueError, match="duplicate request id 'c#1'"):
        engine.add_request([1], SamplingParams(n=3), request_id="c")
    engine.step()
    assert engine.abort_request("a#1") and set(engine.requests) == {"a#0", "c#1"}
    engine.run_until_done()
    assert done["a#0"].status is RequestStatus.FINISHED_LENGTH
    assert done["a#1"].status is RequestStatus.FINISHED_ABORTED
    assert not engine.abort_request("a")                 # nothing of the group is live


def test_live_knobs_that_make_a_group_impossible_fail_it():
    engine = LLMEngine(CONFIGS["recompute"], FakeRunner(16, 4), 16)
    done = engine.collect_finished()
    engine.add_request(list(range(1, 11)), SamplingParams(max_tokens=6, n=3), request_id="a")
    engine.step()
    engine.set_knobs(max_num_seqs=2)
    assert not engine.requests
    engine.step(run_batch=False)
    assert {done[f"a#{k}"].error for k in range(3)} == {
        "n=3 sequences take 3 batch slots but max_num_seqs is 2 (max_num_seqs was set to 2)"}


def test_a_recording_checks_group_sharing_and_flags_other_sharing(tmp_path):
    """``recordings.check.invariants`` accepts a group's shared prompt blocks (no prefix caching, no hash)
    and reports the same fork handed to a request outside the group (G2)."""
    import sqlite3


    from recordings.file.open_reader import open_reader
    from recordings.check.invariants import check_recording

    path = tmp_path / "run.sqlite"
    run_workload(CONFIGS["swap"], workload(SEEDED), record_to=path)
    with open_reader(path) as reader:
        assert check_recording(reader) == []
    db = sqlite3.connect(path)
    step, ord_, forked = next((step, i, ev) for step, i, ev in block_events(db) if ev.kind == BlockEventKind.FORKED)
    seq_of_s = db.execute("SELECT seq FROM requests WHERE request_id = 's'").fetchone()[0]
    replace_block_event(db, step, ord_, forked._replace(request_id=str(seq_of_s)))
    db.close()
    with open_reader(path) as reader:
        problems = check_recording(reader)
    assert any(p.step == step and p.invariant == "G2" and "nor a group's prompt" in p.message
                             for p in problems), problems


def test_head_aborted_while_swapped_hands_its_shared_blocks_over(tmp_path):
    """The group's head is aborted while the group is swapped out: its CPU copies of the shared
    prompt blocks pass to the next sequence, which swaps back in with them; outputs, state and
    recording stay right."""
    config = CONFIGS["swap"]
    # the group arrives last: it is the newest, so it is swapped out when the cache runs out
    arrivals = [Arrival("s", 0, distinct_prompt(1, 9), SamplingParams(max_tokens=14, ignore_eos=True)),
                Arrival("g", 1, distinct_prompt(0, 10), SEEDED)]
    first = run_workload(config, arrivals)
    swapped = [(k, v.request_id) for k, st in enumerate(first.states) for v in st.queue("swapped")
               if v.request_id.endswith("#0")]
    assert swapped, "no group is swapped out"
    step, head = swapped[0][0] + 1, swapped[0][1]
    heir = head[:-1] + "1"
    result = run_workload(config, arrivals, [Action(step, "abort", head)], record_to=tmp_path / "run.sqlite")
    assert result.requests[head].status is RequestStatus.FINISHED_ABORTED
    (rec,) = [r for r in result.records if r.step == step]
    assert [ev.kind for ev in rec.block_events if ev.request_id in (head, heir)][:3] == [
        "swapped_in", "swapped_in", "swapped_out"]
    assert_recording_matches(result)
    assert_outputs_match(result, reference_outputs(config, solo_arrivals(arrivals)))
