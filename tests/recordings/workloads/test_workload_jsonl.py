"""BatchScope's JSONL workload format: valid rows become requests as written, every bad row is
reported with its line number and the field and limit, and the good rows are kept."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recordings.workloads.traces import MOONCAKE, TraceFormatError, load_trace
from recordings.workloads.workload import build_workload
from recordings.workloads.jsonl import FORMAT, MAX_ARRIVAL_S, load_workload_jsonl


class CharTokenizer:
    """One token per character (id = code point)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(map(chr, token_ids))


def write(tmp_path, lines, name="w.jsonl") -> "Path":  # noqa: F821
    path = tmp_path / name
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines))
    return path


GOOD = [
    '{"arrival": 0.5, "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, '
    '"top_k": 20, "seed": 3, "n": 2, "priority": -1, "request_id": "greeting"}',
    '{"arrival": 0, "prompt_tokens": 1100, "output_tokens": 20, "hash_ids": [7, 8, 9]}',
    '{"arrival": 2.25, "prompt_token_ids": [5, 6, 7], "max_tokens": 4}',
]


def test_valid_rows_become_requests_as_written(tmp_path):
    load = load_trace(write(tmp_path, GOOD))
    assert load.format == FORMAT and load.errors == []
    # sorted by arrival (stable), times kept as written
    assert [(r.line_no, r.arrival_s) for r in load.rows] == [(2, 0.0), (1, 0.5), (3, 2.25)]
    wl = build_workload(load.rows, CharTokenizer(), block_size=16)
    by_line = {r.source_line: r for r in wl.requests}
    hello = by_line[1]
    assert hello.request_id == "greeting" and hello.prompt_text == "Hello"
    assert list(hello.prompt_token_ids) == [ord(c) for c in "Hello"]
    assert (hello.max_tokens, hello.ignore_eos, hello.priority) == (8, False, -1)
    assert hello.sampling == {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 3, "n": 2,
                              "priority": -1}
    lengths = by_line[2]
    assert len(lengths.prompt_token_ids) == 1100 and lengths.max_tokens == 20 and lengths.ignore_eos
    assert wl.prefix_sharing.num_hash_ids == 3 and wl.prefix_sharing.num_hash_ids_unused == 0
    ids = by_line[3]
    assert list(ids.prompt_token_ids) == [5, 6, 7] and ids.prompt_text == "\x05\x06\x07"
    assert len({r.request_id for r in wl.requests}) == 3
    assert any("2 prompts given as text or token ids" in n for n in wl.scaling_notes)


BAD = [
    ('{"arrival": 1e400, "prompt_tokens": 10, "max_tokens": 2}', "arrival", "finite"),
    ('{"arrival": -1, "prompt_tokens": 10, "max_tokens": 2}', "arrival", "greater than or equal to 0"),
    (f'{{"arrival": {MAX_ARRIVAL_S * 2}, "prompt_tokens": 10, "max_tokens": 2}}', "arrival",
     "less than or equal to 10000000"),
    ('{"arrival": 0, "prompt_tokens": 123456789012345678901234567890, "max_tokens": 2}',
     "prompt_tokens", "less than or equal to 16777216"),
    ('{"arrival": 0, "prompt_tokens": 0, "max_tokens": 2}', "prompt_tokens", "greater than or equal to 1"),
    ('{"arrival": 0, "prompt_tokens": 10}', "", "exactly one of max_tokens, output_tokens"),
    ('{"arrival": 0, "prompt": "x", "prompt_tokens": 3, "max_tokens": 1}', "",
     "exactly one of prompt, prompt_tokens, prompt_token_ids (found prompt, prompt_tokens)"),
    ('{"arrival": 0, "prompt_token_ids": [1, -2], "max_tokens": 1}', "prompt_token_ids.1",
     "greater than or equal to 0"),
    ('{"arrival": 0, "prompt_token_ids": [], "max_tokens": 1}', "prompt_token_ids", "at least 1"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": true}', "max_tokens", "valid integer"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": "3"}', "max_tokens", "valid integer"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1, "top_p": 0}', "top_p", "greater than 0"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1, "temperature": NaN}', "temperature", "finite"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1, "n": 1000}', "n", "less than or equal to 256"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1, "hash_ids": [1]}', "", "hash_ids need prompt_tokens"),
    ('{"arrival": 0, "prompt_tokens": 9, "max_tokens": 1, "hash_ids": [-1]}', "hash_ids.0", ">= 0"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1, "temprature": 1}', "temprature", "unknown field"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1, "request_id": "a#1"}', "request_id", "'#'"),
    ('{"arrival": 0, "prompt": "x", "max_tokens": 1', "", "not valid JSON"),
    ('[1, 2]', "", "expected a JSON object, found list"),
    (b'{"arrival": 0, "prompt": "\xff\xfe", "max_tokens": 1}', "", "not UTF-8"),
]


def test_every_bad_row_is_reported_with_its_line_and_field_and_good_rows_are_kept(tmp_path):
    lines = [GOOD[0]] + [line for line, _, _ in BAD] + [GOOD[2]]
    load = load_trace(write(tmp_path, lines))
    assert load.format == FORMAT
    assert [r.line_no for r in load.rows] == [1, len(lines)]
    assert [e.line_no for e in load.errors] == list(range(2, 2 + len(BAD)))
    for error, (_, field, limit) in zip(load.errors, BAD):
        assert limit.replace(">= 0", "greater than or equal to 0") in error.message, error
        if field:
            assert error.message.startswith(f"{field}: "), error
        assert str(error).startswith(f"line {error.line_no}: ")


def test_duplicate_ids_unsorted_times_blank_lines_and_limit(tmp_path):
    lines = ['{"arrival": 3, "prompt_tokens": 5, "max_tokens": 1, "request_id": "a"}',
             '',
             '{"arrival": 1, "prompt_tokens": 5, "max_tokens": 1, "request_id": "a"}',
             '{"arrival": 2, "prompt_tokens": 5, "max_tokens": 1, "request_id": "b"}\r',
             '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 1}']
    load = load_workload_jsonl(write(tmp_path, lines))
    assert [str(e) for e in load.errors] == ["line 3: request_id: 'a' is already used on line 1"]
    assert [(r.line_no, r.arrival_s) for r in load.rows] == [(5, 0.0), (4, 2.0), (1, 3.0)]
    assert [r.line_no for r in load_workload_jsonl(write(tmp_path, lines), limit=2).rows] == [4, 1]
    # numbered ids step around a row's own id
    rows = load_workload_jsonl(write(tmp_path, [
        '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 1, "request_id": "r0001"}',
        '{"arrival": 1, "prompt_tokens": 5, "max_tokens": 1}'])).rows
    assert [r.request_id for r in build_workload(rows, None).requests] == ["r0001", "r0001_"]


def test_autodetect_tells_our_jsonl_from_mooncake(tmp_path):
    ours = write(tmp_path, [GOOD[1]], "ours.jsonl")
    mooncake = write(tmp_path, ['{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}'],
                     "m.jsonl")
    assert load_trace(ours).format == FORMAT
    assert load_trace(mooncake).format == MOONCAKE
    neither = write(tmp_path, ['{"time": 0, "tokens": 5}'], "x.jsonl")
    with pytest.raises(TraceFormatError, match="BatchScope JSONL workload"):
        load_trace(neither)


def test_rows_the_engine_cannot_serve_are_skipped_and_said(tmp_path):
    rows = load_trace(write(tmp_path, [
        '{"arrival": 0, "prompt": "text needs a tokenizer", "max_tokens": 2}',
        '{"arrival": 0, "prompt_token_ids": [1, 500], "max_tokens": 2}',
        '{"arrival": 0, "prompt_token_ids": [1, 2], "max_tokens": 2}'])).rows
    wl = build_workload(rows, None, vocab_size=100)
    assert [r.source_line for r in wl.requests] == [3]
    assert not any(n.startswith("prompt tokens: random ids") for n in wl.scaling_notes)   # none drawn
    note = next(n for n in wl.scaling_notes if "rows skipped" in n)
    assert note.startswith("2 rows skipped")
    assert "line 1: prompt is text but this engine has no tokenizer" in note
    assert "line 2: prompt_token_ids has id 500, over the model's vocabulary (ids 0..99)" in note
    one = build_workload(rows[1:], None, vocab_size=100).scaling_notes
    assert any(n.startswith("1 row skipped: line 2:") for n in one), one


def test_a_huge_file_of_bad_rows_keeps_going(tmp_path):
    bad = json.dumps({"arrival": 0, "prompt_tokens": 10 ** 30, "max_tokens": 1})
    deep = "[" * 5000 + "]" * 5000
    load = load_trace(write(tmp_path, [GOOD[2]] + [bad] * 500 + [deep, GOOD[1]]))
    assert len(load.rows) == 2 and len(load.errors) == 501


def test_trace_counts_over_the_limit_are_bad_rows(tmp_path):
    path = write(tmp_path, ['{"timestamp": 0, "input_length": 5, "output_length": 1}',
                            '{"timestamp": 1, "input_length": 1000000000000, "output_length": 1}',
                            '{"timestamp": 2, "input_length": 5, "output_length": 1, "hash_ids": [1e30]}',
                            '{"timestamp": 3, "input_length": 5, "output_length": 1, '
                            '"hash_ids": [100000000000000000000]}'], "m.jsonl")
    load = load_trace(path)
    assert [r.line_no for r in load.rows] == [1]
    assert [e.line_no for e in load.errors] == [2, 3, 4]
    assert "input_length 1000000000000 is over the limit of 16777216 tokens" in load.errors[0].message
    assert "hash_ids is not a list of integers in [0, 9223372036854775807]" in load.errors[2].message


def test_a_bad_first_row_does_not_hide_the_format(tmp_path):
    load = load_trace(write(tmp_path, ['{"arrival": 0, "max_tokens": 3}', GOOD[2]]))
    assert load.format == FORMAT and [r.line_no for r in load.rows] == [2]
    assert "exactly one of prompt, prompt_tokens, prompt_token_ids" in load.errors[0].message


_FIELDS = ["arrival", "prompt", "prompt_tokens", "prompt_token_ids", "max_tokens", "output_tokens",
           "priority", "temperature", "top_p", "top_k", "seed", "n", "hash_ids", "request_id", "x"]
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                     | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=6).map(json.dumps),
                          st.binary(max_size=40)), min_size=1, max_size=12))
def test_any_lines_give_rows_or_line_errors_never_an_exception(tmp_path, lines):
    lines = [line if isinstance(line, bytes) else line.encode() for line in lines]
    lines = [line.replace(b"\n", b" ") for line in lines]
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join([GOOD[2].encode()] + lines))
    load = load_workload_jsonl(path)
    non_blank = 1 + sum(1 for line in lines if line.removesuffix(b"\r").strip())
    assert len(load.rows) + len(load.errors) == non_blank
    assert all(e.line_no >= 2 and e.message for e in load.errors)
    assert [r.arrival_s for r in load.rows] == sorted(r.arrival_s for r in load.rows)
    for row in load.rows:                      # every kept row is servable as far as fields go
        assert 0 <= row.arrival_s <= MAX_ARRIVAL_S and row.num_output_tokens >= 1
