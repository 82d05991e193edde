"""Mooncake ``hash_ids`` as shared token blocks: equal ids give equal tokens, scaled lengths keep the
sharing block-aligned, no id is dropped silently, and the ideal prefix-cache hit rates (hand-computed
on a small handmade trace; about 64% on the real one)."""
from __future__ import annotations

import json

import pytest
from tests.support.shared_traces import MOONCAKE, traces_dir  # noqa: F401

from app.cli import main
from recordings.file.open_reader import open_reader
from recordings.workloads.prefix_blocks import (PrefixCoverage, hash_block_tokens, ideal_prefix_hit_rate)
from recordings.workloads.traces import load_trace
from recordings.workloads.workload import build_workload
from tests.recordings.workloads.test_workload import CharTokenizer
from tests.support.jsonl_files import write_jsonl

# r0 and r4 are the same prompt; r1 shares r0's first two blocks; r2 its first; r3 nothing.
HANDMADE = [
    {"timestamp": 0, "input_length": 1300, "output_length": 5, "hash_ids": [0, 1, 2]},
    {"timestamp": 10, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 3]},
    {"timestamp": 20, "input_length": 600, "output_length": 4, "hash_ids": [0, 4]},
    {"timestamp": 30, "input_length": 100, "output_length": 2, "hash_ids": [5]},
    {"timestamp": 40, "input_length": 1300, "output_length": 6, "hash_ids": [0, 1, 2]},
]
# Hash blocks whose id was seen before: r1 2 of 3, r2 1 of 2, r4 3 of 3 -> 6 of 12.
HANDMADE_IDEAL = 6 / 12


@pytest.fixture
def handmade(tmp_path):
    return write_jsonl(tmp_path / "mooncake.jsonl", HANDMADE)


def test_ideal_hit_rate_of_a_handmade_trace(handmade):
    rows = load_trace(handmade).rows
    assert ideal_prefix_hit_rate(r.hash_ids for r in rows) == HANDMADE_IDEAL
    assert ideal_prefix_hit_rate([(), ()]) is None


def test_ideal_hit_rate_of_the_real_trace_is_about_64_percent(traces_dir):
    rows = load_trace(traces_dir / MOONCAKE).rows
    rate = ideal_prefix_hit_rate(r.hash_ids for r in rows)
    assert 0.63 < rate < 0.65        # the trace's README: "about 64% of blocks"


def shared_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_equal_hash_ids_give_equal_tokens_at_full_scale(handmade):
    wl = build_workload(load_trace(handmade).rows, None, block_size=16, seed=3)
    p = [list(r.prompt_token_ids) for r in wl.requests]
    assert [len(x) for x in p] == [o["input_length"] for o in HANDMADE]
    assert p[4] == p[0]
    assert shared_prefix(p[0], p[1]) == 1024 and shared_prefix(p[0], p[2]) == 512
    assert shared_prefix(p[0], p[3]) == 0
    # Hash id 0's block is the same 512 tokens wherever it appears, and other ids differ from it.
    assert p[1][:512] == p[2][:512] == p[0][:512]
    assert sum(a == b for a, b in zip(p[0][512:1024], p[2][512:1024])) < 20
    assert all(100 <= t <= 40000 for x in p for t in x)
    assert wl.prefix_sharing.trace_ideal_hit_rate == HANDMADE_IDEAL
    assert wl.prefix_sharing.num_hash_ids_unused == 0
    # Deterministic per seed; another seed gives other tokens but the same sharing.
    assert build_workload(load_trace(handmade).rows, None, block_size=16, seed=3) == wl
    other = [list(r.prompt_token_ids) for r in build_workload(load_trace(handmade).rows, None, seed=4).requests]
    assert other[0] != p[0] and shared_prefix(other[0], other[1]) == 1024


@pytest.mark.parametrize("prompt_scale, block_size, block_tokens", [
    (0.1, 16, 48), (1 / 12, 16, 48), (0.05, 8, 24), (0.001, 16, 16), (1.0, 64, 512)])
def test_scaled_blocks_stay_aligned_to_kv_blocks(handmade, prompt_scale, block_size, block_tokens):
    """A hash block becomes a whole number of KV blocks, and prompts share exactly the scaled
    blocks of the ids they share."""
    assert hash_block_tokens(prompt_scale, block_size) == block_tokens
    rows = load_trace(handmade).rows
    wl = build_workload(rows, None, prompt_scale=prompt_scale, block_size=block_size, min_prompt_tokens=1)
    p = [list(r.prompt_token_ids) for r in wl.requests]
    assert wl.prefix_sharing.hash_block_tokens == block_tokens
    for x, row in zip(p, rows):
        # round(L * block_tokens / 512), with at least one token in each of the row's hash blocks
        want = max(round(row.num_prompt_tokens * block_tokens / 512), (len(row.hash_ids) - 1) * block_tokens + 1)
        assert len(x) == want
    assert p[4] == p[0]
    assert shared_prefix(p[0], p[1]) == 2 * block_tokens
    assert shared_prefix(p[0], p[2]) == block_tokens
    assert (2 * block_tokens) % block_size == 0
    assert wl.prefix_sharing.num_hash_ids_unused == 0
    assert any(f"a 512-token hash block became {block_tokens} tokens" in n for n in wl.scaling_notes)


def test_rounding_never_loses_a_hash_id(tmp_path):
    # 513 tokens = one full block and 1 token of a second: at x8/512 the second still gets a token.
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 513, "output_length": 1, "hash_ids": [7, 8]}))
    wl = build_workload(load_trace(path).rows, None, prompt_scale=8 / 512, block_size=4, min_prompt_tokens=1)
    assert len(wl.requests[0].prompt_token_ids) == 9
    assert wl.prefix_sharing.num_hash_ids_unused == 0


def test_hash_ids_that_get_no_tokens_are_counted_in_the_notes(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 2048, "output_length": 1, "hash_ids": [0, 1, 2, 3]},
        {"timestamp": 1, "input_length": 100, "output_length": 1, "hash_ids": [0, 9, 10]},   # 2 ids past 100 tokens
        {"timestamp": 2, "input_length": 1500, "output_length": 1, "hash_ids": [0]},         # longer than its ids
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    wl = build_workload(load_trace(path).rows, None, max_prompt_tokens=1100, block_size=16)
    notes = "\n".join(wl.scaling_notes)
    assert [len(r.prompt_token_ids) for r in wl.requests] == [1100, 100, 1100]
    # Row 0 keeps ids 0, 1 and 76 tokens of id 2: id 3 is cut. Row 1 lists 2 ids past its length.
    assert "1 ids in 1 prompts fell past the clipped prompt length and were cut" in notes
    assert "2 ids in 1 rows were listed past the row's input_length" in notes
    assert "1 prompts are longer than their hash ids cover" in notes
    assert wl.prefix_sharing.num_hash_ids_unused == 3 and wl.prefix_sharing.num_hash_ids == 8
    p = [list(r.prompt_token_ids) for r in wl.requests]
    assert shared_prefix(p[0], p[1]) == 100 and shared_prefix(p[0], p[2]) == 512
    assert shared_prefix(p[2][512:], p[0][512:]) == 0           # the tail past its ids is its own


def test_with_a_tokenizer_blocks_are_corpus_windows(handmade):
    tok = CharTokenizer()
    corpus = "The quick brown fox jumps over the lazy dog. " * 3
    wl = build_workload(load_trace(handmade).rows, tok, prompt_scale=0.1, corpus=corpus, block_size=16)
    p = [r.prompt_token_ids for r in wl.requests]
    assert p[4] == p[0] and shared_prefix(p[0], p[1]) == 96
    for r in wl.requests:
        assert r.prompt_text == tok.decode(r.prompt_token_ids)
        assert set(r.prompt_text) <= set(corpus + "\n")                # windows of the corpus
    assert "fox" in wl.requests[0].prompt_text


def test_prefix_coverage_by_hand():
    """Ideal hits in tokens with 16-token blocks, whole blocks only, a full hit computes its last
    token."""
    cov = PrefixCoverage(block_tokens=512, block_size=16)
    assert cov.add([0, 1, 2], 1300) == 0
    assert cov.add([0, 1, 3], 1100) == 1024          # ids 0 and 1; id 2 is not id 3
    assert cov.add([0, 4], 600) == 512
    assert cov.add([5], 100) == 0
    # r0 cached 1296 tokens (81 whole blocks): the repeat hits those and computes the rest
    assert cov.add([0, 1, 2], 1300) == 1296
    assert cov.hit_rate == (1024 + 512 + 1296) / (1300 + 1100 + 600 + 100 + 1300)
    again = PrefixCoverage(block_tokens=32, block_size=16)
    assert again.add([7], 32) == 0
    assert again.add([7], 32) == 16                   # full hit: the last block is computed again
    assert again.add([7], 20) == 16                   # a shorter prompt: its whole block hits
    with pytest.raises(ValueError, match="multiple of block_size"):
        PrefixCoverage(block_tokens=40, block_size=16)


def test_run_summary_prints_the_ideal_hit_rate(handmade, tmp_path, capsys):
    rec = tmp_path / "run.sqlite"
    assert main(["run", "--trace", str(handmade), "--record", str(rec), "--executor", "sim",
                 "--clock", "virtual", "--prompt-scale", "0.1"]) == 0
    out = capsys.readouterr().out
    assert ("ideal prefix-cache hit rate (infinite cache, arrival order): 50.0% of the trace's "
            "512-token hash blocks; 62.1% of this workload's prompt tokens in 16-token blocks") in out
    sharing = open_reader(rec).run_info().trace["prefix_sharing"]
    assert sharing["trace_ideal_hit_rate"] == HANDMADE_IDEAL and sharing["hash_block_tokens"] == 48
    # 62.1%: lengths 122, 103, 56, 9, 122; hits 96 + 48 + 112 (r0 cached 112 tokens) of 412
    assert sharing["workload_ideal_hit_rate"] == (96 + 48 + 112) / (122 + 103 + 56 + 9 + 122)
