"""Fuzzing BatchScope's JSONL workload importer (``recordings.workloads.jsonl``, through
``load_trace`` as the CLI reads it) with hypothesis: good lines mixed with bad ones (huge and
negative numbers, wrong types, unknown fields, deep JSON, duplicate request ids, control
characters, invalid UTF-8, 10^7-token prompts), then truncated and bit-flipped files. Nothing but
``TraceFormatError`` escapes; every non-blank line is a row or an error with its number; every
good line is kept; memory stays within a bound of the file's size."""
from __future__ import annotations

import pytest

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_files import load_bounded, mutated
from recordings.workloads.traces import MAX_TRACE_TOKENS, load_trace

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def good_lines(draw, index: int):
    """A valid line: arrival, one prompt field, one length field, some sampling fields."""
    obj: dict = {"arrival": draw(st.floats(0, 1e6, allow_nan=False))}
    prompt = draw(st.sampled_from(["prompt", "prompt_tokens", "prompt_token_ids"]))
    obj[prompt] = {"prompt": draw(st.text(min_size=1, max_size=30)),
                   "prompt_tokens": draw(st.sampled_from([1, 7, 10**7, MAX_TRACE_TOKENS])),
                   "prompt_token_ids": draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=8))}[prompt]
    obj[draw(st.sampled_from(["max_tokens", "output_tokens"]))] = draw(st.integers(1, 4096))
    if draw(st.booleans()):
        obj.update(temperature=draw(st.floats(0, 2)), top_p=draw(st.floats(0.01, 1)), n=draw(st.integers(1, 4)))
    obj["request_id"] = f"q{index}"                       # distinct: duplicates are drawn as bad lines
    return json.dumps(obj)


BAD_LINES = st.sampled_from([
    '{"arrival": -1, "prompt_tokens": 5, "max_tokens": 5}',
    '{"arrival": 1e400, "prompt_tokens": 5, "max_tokens": 5}',
    '{"arrival": NaN, "prompt_tokens": 5, "max_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": 100000000000000000000, "max_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": 16777217, "max_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": "5", "max_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": true, "max_tokens": 5}',
    '{"arrival": 0, "prompt": "x", "prompt_tokens": 5, "max_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 5, "evil": "__import__(\'os\')"}',
    '{"arrival": 0, "prompt_token_ids": [-1], "max_tokens": 5}',
    '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 5, "request_id": "a b"}',
    '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 5, "request_id": "q0"}',     # q0 is taken
    '{"arrival": 0, "prompt_tokens": 5, "max_tokens": 5, "n": 100000}',
    '{"arrival": 0, "prompt": "", "max_tokens": 5}',
    "[" * 100_000 + "]" * 100_000, "{", "null", "[1]", '"str"', "\x00\x1b[31m\u202e",
])


def check_partition(load, raw: bytes):
    lines = raw.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    data = {i for i, line in enumerate(lines, 1) if line.removesuffix(b"\r").strip()}
    rows, errors = [r.line_no for r in load.rows], [e.line_no for e in load.errors]
    assert len(set(rows)) == len(rows) and len(set(errors)) == len(errors)
    assert set(rows) | set(errors) == data and not set(rows) & set(errors)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(load.rows, load.rows[1:]))
    assert all(str(e).startswith(f"line {e.line_no}: ") for e in load.errors)


@SETTINGS
@given(data=st.data(), num_good=st.integers(1, 25), bad=st.lists(st.tuples(st.integers(0, 30), BAD_LINES), max_size=8),
       invalid_utf8=st.booleans())
@pytest.mark.slow
def test_good_and_bad_lines(tmp_path, data, num_good, bad, invalid_utf8):
    good = [data.draw(good_lines(i)) for i in range(num_good)]
    lines = [g.encode() for g in good]
    for at, line in bad:
        lines.insert(min(max(at, 1), len(lines)), line.encode())    # the first line stays good
    if invalid_utf8:
        lines.insert(len(lines) // 2 + 1, b'{"arrival": 0, "prompt": "\xff\xfe", "max_tokens": 5}')
    raw = b"\n".join(lines) + b"\n"
    path = tmp_path / "w.jsonl"
    path.write_bytes(raw)
    load = load_trace(path)
    assert load.format == "batchscope-jsonl"
    check_partition(load, raw)
    assert sorted(r.spec.request_id for r in load.rows) == sorted(f"q{i}" for i in range(num_good))
    assert len(load.errors) == len(bad) + invalid_utf8


@SETTINGS
@given(data=st.data())
def test_truncated_and_bit_flipped_files(tmp_path, data):
    good = [data.draw(good_lines(i)) for i in range(data.draw(st.integers(1, 15)))]
    raw = mutated(data, "\n".join(good) + "\n", max_flips=8)
    load = load_bounded(tmp_path / "w.jsonl", raw, slack_bytes=4_000_000)
    if load is None:
        return
    if load.format == "batchscope-jsonl":
        check_partition(load, raw)
