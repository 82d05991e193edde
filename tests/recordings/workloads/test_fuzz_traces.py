"""Fuzzing the Azure and Mooncake importers (hypothesis): random and mutated files (truncated,
bit-flipped, huge numbers, negative and unsorted times, duplicate lines, 10^7-token prompts, deep
JSON, control characters) never raise anything but ``TraceFormatError`` for a file that is not a
trace at all; every non-blank line is a row or a reported error with its line number; every good
line is kept, in arrival order; memory stays within a bound of the file's size."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_files import load_bounded, mutated
from recordings.workloads.traces import (AZURE_HEADER, MAX_TRACE_TOKENS, TraceFormatError, load_azure_csv,
                               load_mooncake_jsonl)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
counts = st.integers(0, MAX_TRACE_TOKENS)
# numbers no row may hold: negative, over the per-row limit, 10^400, not integers
bad_counts = st.one_of(st.integers(-10**30, -1), st.integers(MAX_TRACE_TOKENS + 1, 10**30), st.just(10**400),
                       st.sampled_from(["1e999", "NaN", "0x10", "", "1.5", "null", "true"]))
bad_stamps = st.one_of(st.just(10**400), st.integers(2**62 + 1, 2**70),
                       st.sampled_from(["1e999", "NaN", "true", '"1"', "null", "[]"]))


@st.composite
def azure_rows(draw):
    """(line, expected (seconds since 1970, prompt, output)) of a valid Azure row."""
    seconds = draw(st.integers(0, 4_000_000_000))
    frac = draw(st.integers(0, 9_999_999))
    p, o = draw(counts), draw(counts)
    import datetime as dt
    stamp = (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp}.{frac:07d},{p},{o}", (seconds * 10**9 + frac * 100, p, o)


@st.composite
def mooncake_rows(draw):
    ms = draw(st.integers(-10**12, 10**12))
    p, o = draw(counts), draw(counts)
    hashes = draw(st.lists(st.integers(0, 10**6), max_size=5))
    return json.dumps({"timestamp": ms, "input_length": p, "output_length": o, "hash_ids": hashes}), (ms, p, o)


@st.composite
def bad_lines(draw, fmt):
    """A line that is not a valid row of ``fmt``."""
    n = draw(bad_counts)
    if fmt == "azure":
        return draw(st.sampled_from([
            f"2023-11-16 18:15:46.6805900,{n},5", f"2023-13-45 99:99:99,{5},{5}", "a,b,c,d",
            f"{n},{n},{n}", "2023-11-16 18:15:46.6805900,5", "\x00\x1b[31m,\u202e,5",
            "2023-11-16 18:15:46.6805900," + "9" * 5000 + ",1", '"unterminated,1,2']))
    return draw(st.sampled_from([
        '{"timestamp": 1, "input_length": ' + (str(n) or "null") + ', "output_length": 1}',
        '{"timestamp": ' + str(draw(bad_stamps)) + ', "input_length": 1, "output_length": 1}',
        "[" * 50_000 + "]" * 50_000, "{", "null", "[1, 2]", '{"timestamp": 1}', "1e999",
        '{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [-1]}',
        '{"timestamp": true, "input_length": 1, "output_length": 1}', "\x00\x1b\u202e"]))


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path


def check_partition(load, text, header_lines):
    """Every non-blank data line is exactly one of: a row, an error (both with its number)."""
    lines = text.split("\n")
    data = {i for i, line in enumerate(lines, 1) if line.strip() and i > header_lines}
    rows = [r.line_no for r in load.rows]
    errors = [e.line_no for e in load.errors]
    assert len(set(rows)) == len(rows) and len(set(errors)) == len(errors)
    assert set(rows) | set(errors) == data and not set(rows) & set(errors)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(load.rows, load.rows[1:]))
    assert all(0 <= r.num_prompt_tokens <= MAX_TRACE_TOKENS and 0 <= r.num_output_tokens <= MAX_TRACE_TOKENS
               for r in load.rows)
    assert all(str(e).startswith(f"line {e.line_no}: ") for e in load.errors)


@SETTINGS
@given(good=st.lists(azure_rows(), max_size=30), bad=st.lists(st.tuples(st.integers(0, 30), st.data()), max_size=8),
       shuffle=st.randoms())
def test_azure_rows_good_and_bad(tmp_path, good, bad, shuffle):
    lines = [g[0] for g in good]
    shuffle.shuffle(lines)                                  # unsorted timestamps, duplicates allowed
    for at, data in bad:
        at = min(at, len(lines))
        lines.insert(at, data.draw(bad_lines("azure")))
    text = ",".join(AZURE_HEADER) + "\n" + "\n".join(lines) + "\n"
    load = load_azure_csv(write(tmp_path, "t.csv", text))
    check_partition(load, text, 1)
    kept = sorted((r.num_prompt_tokens, r.num_output_tokens) for r in load.rows)
    assert kept == sorted((p, o) for _, (_, p, o) in good)  # every good row, no bad one
    assert len(load.errors) == len(bad)
    if good:                                                # exact times, relative to the earliest
        base = min(ns for _, (ns, _, _) in good)
        assert sorted(r.arrival_s for r in load.rows) == sorted((ns - base) / 10**9 for _, (ns, _, _) in good)


@SETTINGS
@given(good=st.lists(mooncake_rows(), max_size=30), bad=st.lists(st.tuples(st.integers(0, 30), st.data()), max_size=8))
def test_mooncake_rows_good_and_bad(tmp_path, good, bad):
    lines = [g[0] for g in good]
    for at, data in bad:
        lines.insert(min(at, len(lines)), data.draw(bad_lines("mooncake")))
    text = "\n".join(lines)
    path = write(tmp_path, "t.jsonl", text)
    try:
        load = load_mooncake_jsonl(path)
    except TraceFormatError:
        assert not good or lines[0] != good[0][0]           # only when the first line is bad
        return
    check_partition(load, text, 0)
    got = sorted((r.num_prompt_tokens, r.num_output_tokens) for r in load.rows)
    want = sorted((p, o) for _, (_, p, o) in good)
    assert all(x in got for x in want)                      # nothing good dropped
    assert len(got) == len(want)                             # and no bad line kept as a row
    if good:
        base = min(ms for _, (ms, _, _) in good)
        assert sorted(r.arrival_s for r in load.rows) == sorted((ms - base) / 1000 for _, (ms, _, _) in good)


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(["azure", "mooncake"]))
def test_truncated_and_bit_flipped_files(tmp_path, data, kind):
    rows = data.draw(st.lists(azure_rows() if kind == "azure" else mooncake_rows(), min_size=1, max_size=20))
    text = ((",".join(AZURE_HEADER) + "\n") if kind == "azure" else "") + "\n".join(r[0] for r in rows) + "\n"
    raw = mutated(data, text, max_flips=6)
    load = load_bounded(tmp_path / "t.trace", raw, slack_bytes=2_000_000)
    if load is None:
        return
    check_partition(load, raw.decode("utf-8-sig"), 1 if load.format == "azure-csv" else 0)


def test_a_ten_million_token_prompt_is_a_row_and_a_huge_one_a_reported_error(tmp_path):
    text = (",".join(AZURE_HEADER) + "\n2023-11-16 18:15:46.6805900,10000000,5\n"
            "2023-11-16 18:15:47.6805900,100000000000000000000,5\n")
    load = load_azure_csv(write(tmp_path, "t.csv", text))
    assert [(r.line_no, r.num_prompt_tokens) for r in load.rows] == [(2, 10**7)]
    assert [e.line_no for e in load.errors] == [3] and "over the limit" in load.errors[0].message
