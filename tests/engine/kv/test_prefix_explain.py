"""The prefix-cache explainer: at each admission with prefix caching on, a ``prefix_cache`` event
says how many blocks hit and why the match stopped (every block matched, the next block differs,
it was evicted at a step, or the prompt is shorter than one block)."""
from __future__ import annotations

from engine.config import EngineConfig
from engine.kv.prefix_explain import (STOP_ALL, STOP_DIFFERS, STOP_EVICTED, STOP_SHORT, PrefixMatch,
                                   prefix_match)
from engine.request import SamplingParams
from tests.support.engine_driver import Arrival, distinct_prompt, run_workload


def matches(result) -> dict[str, list[tuple[int, PrefixMatch]]]:
    out: dict[str, list] = {}
    for rec in result.records:
        for e in rec.events:
            if e.kind == "prefix_cache":
                out.setdefault(e.request_id, []).append((rec.step, prefix_match(e.detail)))
    return out


def config(num_blocks: int) -> EngineConfig:
    return EngineConfig(block_size=4, num_gpu_blocks=num_blocks, max_model_len=64, max_num_seqs=2,
                        max_num_batched_tokens=64, enable_prefix_caching=True)


def params(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, ignore_eos=True)


def test_all_matched_differs_and_short():
    base = distinct_prompt(0, 12)
    arrivals = [Arrival("A", 0, base, params(2)),
                Arrival("same", 4, base, params(2)),                          # 2 of 2 lookable
                Arrival("fork", 4, base[:4] + distinct_prompt(1, 8), params(2)),  # differs at 4
                Arrival("tiny", 4, distinct_prompt(2, 3), params(2))]         # < 1 block + 1
    got = {rid: m for rid, ((_, m),) in matches(run_workload(config(32), arrivals)).items()}
    assert got["A"] == PrefixMatch(0, 2, 0, STOP_DIFFERS, 0, -1)
    assert got["same"] == PrefixMatch(2, 2, 8, STOP_ALL)
    assert got["fork"] == PrefixMatch(1, 2, 4, STOP_DIFFERS, 4, -1)
    assert got["tiny"].stop == STOP_SHORT
    assert "differs" in got["fork"].describe() and "token 4" in got["fork"].describe()


def test_evicted_names_the_step():
    """X's blocks are evicted by a later request that needs the whole (small) pool; a repeat of
    X then learns its first block was evicted, and at which step (the step of the ``evicted``
    block event)."""
    x = distinct_prompt(0, 8)
    arrivals = [Arrival("X", 0, x, params(1)), Arrival("Y", 3, distinct_prompt(1, 12), params(4)),
                Arrival("X2", 10, x, params(1))]
    result = run_workload(config(4), arrivals)
    (_, m), = matches(result)["X2"]
    evicted_steps = [rec.step for rec in result.records for e in rec.block_events if e.kind == "evicted"]
    assert m.stop == STOP_EVICTED and m.num_matched_blocks == 0 and m.at_token == 0
    assert m.evicted_step in evicted_steps
    assert f"evicted at step {m.evicted_step}" in m.describe()


def test_a_waiting_request_records_what_its_lookup_finds_each_step_it_is_not_admitted(tmp_path):
    """B shares A's 8-token prefix but waits for A's batch slot (max_num_seqs=1): while it waits
    it records what its lookup found, first nothing (A's blocks are not cached before A's step
    completes), then A's 2 blocks, each once (only changes are recorded), with the reason it
    was not admitted; at admission the usual prefix_cache event. Recorded, and read back."""
    from recordings.file.open_reader import open_reader
    from tests.support.engine_invariants import assert_recording_matches

    base = distinct_prompt(0, 8)
    cfg = EngineConfig(block_size=4, num_gpu_blocks=32, max_model_len=64, max_num_seqs=1,
                       max_num_batched_tokens=64, enable_prefix_caching=True)
    arrivals = [Arrival("A", 0, base + distinct_prompt(1, 3), params(6)),
                Arrival("B", 0, base + distinct_prompt(2, 3), params(2))]
    result = run_workload(cfg, arrivals, record_to=tmp_path / "w.sqlite")
    waiting = [(rec.step, prefix_match(e.detail)) for rec in result.records for e in rec.events
               if e.kind == "prefix_cache_waiting" and e.request_id == "B"]
    assert [(m.num_matched_blocks, m.num_matched_tokens, m.not_admitted) for _, m in waiting] == [
        (0, 0, "seq_cap"), (2, 8, "seq_cap")]
    assert [s for s, _ in waiting] == [0, 1]           # step 1: A's prefill completed in step 0
    assert "still waiting (seq_cap) with prefix cache: 2 of 2 blocks hit (8 tokens)" in waiting[1][1].describe()
    (_, admitted), = matches(result)["B"]
    assert admitted.num_matched_tokens == 8 and admitted.not_admitted == ""
    assert_recording_matches(result)
    with open_reader(tmp_path / "w.sqlite") as reader:
        kinds = [e.kind for e in reader.request_timeline("B")]
    assert kinds.count("prefix_cache_waiting") == 2
