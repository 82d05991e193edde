"""Request ids stay unique within a run while memory follows the live requests
(``engine.request_ids``): without a recording finished ids are kept as 64-bit hashes, 8 bytes
each (stated growth); the ids of live requests are held exactly and dropped when they finish."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from engine.request_ids import IdHashes, RequestIds
from tests.support.fake_runner import NullRunner

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=64, max_num_seqs=8,
                      max_num_batched_tokens=64)


def test_hashes_have_no_false_negatives_across_merges():
    h = IdHashes()
    added = [f"id-{i}" for i in range(3 * IdHashes.MERGE + 17)]
    for name in added:
        h.add(name)
    assert len(h) == len(added) and h.nbytes == 8 * 3 * IdHashes.MERGE
    assert all(name in h for name in added)
    # fresh ids: each wrongly found with probability ~ len / 2**64
    assert not any(f"other-{i}" in h for i in range(5000))


def test_finished_ids_are_refused_without_a_recording_and_leave_the_live_dict():
    engine = LLMEngine(CONFIG, NullRunner(), CONFIG.num_gpu_blocks)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True), request_id="a")
    engine.add_request([1, 2], SamplingParams(max_tokens=2, n=3, ignore_eos=True), request_id="g")
    engine.add_request([1] * 100, SamplingParams(max_tokens=2), request_id="too-long")  # rejected
    assert set(engine._request_ids.live) == {"a", "g", "g#0", "g#1", "g#2"}
    engine.run_until_done()
    ids = engine._request_ids
    assert ids.live == {} and len(ids.hashes) == 6 and ids.lookups == []
    for rid in ("a", "g", "g#1", "too-long"):
        with pytest.raises(ValueError, match=f"duplicate request id '{rid}'"):
            engine.add_request([1], SamplingParams(max_tokens=1), request_id=rid)
    with pytest.raises(ValueError, match="duplicate request id 'g#0'"):
        engine.add_request([1], SamplingParams(max_tokens=1, n=2), request_id="g#0")  # its g#0#0 is fresh
    engine.add_request([1], SamplingParams(max_tokens=1, n=2), request_id="x")   # fresh ids: added
    engine.add_request([1], SamplingParams(max_tokens=1), request_id="a#0")      # "a" had no sequences
    assert engine.requests.keys() == {"x#0", "x#1", "a#0"}


def test_a_parallel_prompt_id_lives_until_its_last_sequence_finishes():
    ids = RequestIds()
    ids.add(["g", "g#0", "g#1"])
    ids.finish([("g#0", "g")])
    assert ids.live == {"g": 1, "g#1": 1} and len(ids.hashes) == 1
    with pytest.raises(ValueError, match="'g'"):
        ids.add(["g"])
    ids.finish([("g#1", "g")])
    assert ids.live == {} and len(ids.hashes) == 3
    with pytest.raises(ValueError, match="'g'"):
        ids.add(["g"])
