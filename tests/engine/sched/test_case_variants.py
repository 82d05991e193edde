"""Variants of the scheduler fault cases (``tests/data/cases/scheduler-case-variants.json``): the
cases of ``scheduler-cases.json`` are a sample of the kinds checked on every release, so each kind
is restated with other block sizes, exact-fit and one-block-short cache sizes, more requests and
other arrival orders, prefix-sharing chains, swap vs recompute, chunked prefill on and off, every
policy, parallel sampling, pauses / resumes / aborts at awkward steps, ``max_model_len`` edges,
token budgets below a block, one-token prompts and zero ``max_tokens``.

Each variant runs through ``case_runner.run_case``: G1-G6 every step from the engine and from the
records, G7 against the reference run, the run recorded and re-checked from the file (states,
records, the summary's metrics), the case kinds' general expectations, and the variant's own
``checks``. Variants that once failed are regression tests of the fix named in their ``expect``.
"""
from __future__ import annotations
from tests.support.paths import TESTS

import json

import pytest

from tests.support.case_runner import build_workload, run_case
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.engine_cases import CASES
from tests.support.engine_driver import distinct_prompt
from tests.support.fake_runner import FakeRunner

VARIANTS_FILE = TESTS / "data" / "cases" / "scheduler-case-variants.json"
VARIANTS = json.loads(VARIANTS_FILE.read_text())["cases"]


@pytest.mark.parametrize("variant", VARIANTS, ids=[v["id"] for v in VARIANTS])
def test_variant(variant, tmp_path):
    run_case(variant, tmp_path)


# Variants also run on a real model (the tiny random Llama through the real ModelRunner: paged
# attention, swap and copy-on-write copies of real KV), one or more per kind, chosen cheap.
ON_MODEL = ["full-hit-after-preemption", "same-step-small-budget", "edge-parallel-sampling",
            "pressure-shared-prefix", "abort-shared-mid-prefill", "parked-while-others-swapped",
            "recompute-prefix-on", "metrics-swap", "swap-parallel-sampling"]


@pytest.mark.parametrize("variant_id", ON_MODEL)
def test_variant_on_the_tiny_model(variant_id, tmp_path, tiny_llama_1k):
    """The variant's run and its reference run through the real ``ModelRunner`` (fp32, CPU):
    outputs equal (G7), with every other check of ``run_case``."""
    import copy

    from engine.runner.model_runner import ModelRunner

    variant = next(v for v in VARIANTS if v["id"] == variant_id)
    result = run_case(variant, tmp_path,
                      make_runner=lambda config: ModelRunner.from_config(copy.deepcopy(tiny_llama_1k), config))
    assert isinstance(result.runner, ModelRunner)


@pytest.fixture(scope="module")
def tiny_llama_1k(one_torch_thread):
    """The tiny random Llama with a 1,024-token vocabulary (the cases' prompt ids are < 1,000)."""
    from engine.model.tiny_model import tiny_llama

    return tiny_llama(seed=0, vocab_size=1024)


def test_every_case_kind_has_variants():
    """Each case of the sample has at least one variant, and each variant names a real case of
    the same kind (so the file cannot drift from the cases it restates)."""
    if not CASES:
        pytest.skip("the scheduler cases ship in tests/data/cases")
    varied = {v["variant_of"] for v in VARIANTS}
    assert set(CASES) - {"stop-string-across-tokens"} <= varied, sorted(set(CASES) - varied)
    for v in VARIANTS:
        assert CASES[v["variant_of"]]["kind"] == v["kind"], v["id"]
    ids = [v["id"] for v in VARIANTS]
    assert len(ids) == len(set(ids)) and not set(ids) & set(CASES)


def test_variants_are_well_formed():
    """Every variant builds (known knobs, prompt phrases and actions) and has plain-language
    expectations next to its checks."""
    for v in VARIANTS:
        config, arrivals, _ = build_workload(v)
        assert isinstance(config, EngineConfig) and arrivals and v["expect"], v["id"]


def test_duplicate_request_id_is_refused_and_the_engine_stays_up():
    """edge-inputs kind: a second request with a live id (or a sequence id of a live
    parallel-sampling prompt) is refused with an error naming the id; the first one is
    untouched and finishes; a finished request's id is refused too."""
    config = EngineConfig(block_size=4, num_gpu_blocks=32, max_num_seqs=4, max_num_batched_tokens=64)
    engine = LLMEngine(config, FakeRunner(32, 4), 32)
    done = engine.collect_finished()
    sp = SamplingParams(max_tokens=3, ignore_eos=True)
    engine.add_request(list(distinct_prompt(0, 8)), sp, request_id="A")
    engine.add_request(list(distinct_prompt(1, 8)), SamplingParams(max_tokens=2, n=2), request_id="G")
    engine.step()
    for rid, params in (("A", sp), ("G#1", sp), ("G", sp)):
        with pytest.raises(ValueError, match=rid):
            engine.add_request(list(distinct_prompt(2, 8)), params, request_id=rid)
    assert engine.requests["A"].num_computed_tokens == 8 and engine.requests["A"].num_output_tokens == 1
    engine.run_until_done()
    assert done["A"].status is RequestStatus.FINISHED_LENGTH and done["A"].num_output_tokens == 3
    assert {done[f"G#{k}"].status for k in range(2)} == {RequestStatus.FINISHED_LENGTH}
    with pytest.raises(ValueError, match="A"):
        engine.add_request(list(distinct_prompt(3, 8)), sp, request_id="A")
    assert engine.scheduler.kv.num_free_blocks == 32 and not engine.has_unfinished
