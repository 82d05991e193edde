"""Trace importers on the real Azure and Mooncake files, and on small hand-broken files."""
from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest
from tests.support.shared_traces import (AZURE_CODE, AZURE_CONV, MOONCAKE, SLICE_OF, SLICE_ROWS, SLICES,  # noqa: F401
                           traces_dir)

from recordings.workloads.traces import (AZURE, MOONCAKE as MOONCAKE_FORMAT, TraceFormatError, TraceRow,
                               load_azure_csv, load_mooncake_jsonl, load_trace)

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write(tmp_path, name: str, lines: list[str], newline: str = "\r\n", final: bool = False):
    path = tmp_path / name
    path.write_bytes((newline.join(lines) + (newline if final else "")).encode())
    return path


# --- the real files -----------------------------------------------------------------------------

def check_azure_file(path, num_rows: int) -> None:
    """``path`` loads completely: every row, in order, its arrival in seconds from the first row
    (7 fractional digits exact) and its lengths, as the csv module reads them."""
    data = path.read_bytes()
    assert data.rstrip(b"\r\n").count(b"\n") == num_rows              # header + rows
    load = load_azure_csv(path)
    assert load.errors == []
    assert len(load.rows) == num_rows
    assert load.format == AZURE
    assert load.sha256 == hashlib.sha256(data).hexdigest()
    assert [r.line_no for r in load.rows] == list(range(2, num_rows + 2))
    arrivals = np.array([r.arrival_s for r in load.rows])
    assert arrivals[0] == 0.0
    assert np.all(np.diff(arrivals) >= 0)

    with open(path, newline="") as f:
        reference = list(csv.DictReader(f))
    stamps = np.array([np.datetime64(r["TIMESTAMP"].replace(" ", "T"), "ns") for r in reference])
    expected = (stamps - stamps[0]).astype(np.int64) / 1e9
    np.testing.assert_allclose(arrivals, expected, rtol=0, atol=1e-9)
    assert [r.num_prompt_tokens for r in load.rows] == [int(r["ContextTokens"]) for r in reference]
    assert [r.num_output_tokens for r in load.rows] == [int(r["GeneratedTokens"]) for r in reference]


def check_mooncake_file(path, num_rows: int) -> None:
    """``path`` loads completely: arrivals in seconds from the first row, lengths, and one hash id
    per 512-token prompt block."""
    load = load_trace(path)
    assert load.format == MOONCAKE_FORMAT and load.errors == []
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(load.rows) == len(raw) == num_rows
    for row, obj in zip(load.rows, raw):
        assert row.arrival_s == (obj["timestamp"] - raw[0]["timestamp"]) / 1000
        assert row.num_prompt_tokens == obj["input_length"]
        assert row.hash_ids == tuple(obj["hash_ids"])
        assert len(row.hash_ids) == -(-obj["input_length"] // 512)


@pytest.mark.parametrize("name, num_rows", [(AZURE_CONV, 19_366), (AZURE_CODE, 8_819)])
def test_real_azure_trace_loads_completely(traces_dir, name, num_rows):
    assert not (traces_dir / name).read_bytes().endswith(b"\n")        # the originals: no final EOL
    check_azure_file(traces_dir / name, num_rows)


@pytest.mark.parametrize("name", ["azure_conv_300.csv", "azure_code_300.csv"])
def test_shipped_azure_slices_load_completely(name):
    check_azure_file(SLICES / name, SLICE_ROWS)


def test_shipped_mooncake_slice_loads_completely():
    check_mooncake_file(SLICES / "mooncake_300.jsonl", SLICE_ROWS)


@pytest.mark.parametrize("name", sorted(SLICE_OF))
def test_shipped_slices_are_byte_prefixes_of_the_real_traces(traces_dir, name):
    data = (SLICES / name).read_bytes()
    assert (traces_dir / SLICE_OF[name]).read_bytes().startswith(data)
    assert data.endswith(b"\n")                        # whole lines only


def test_real_azure_conv_spans_about_an_hour(traces_dir):
    rows = load_azure_csv(traces_dir / AZURE_CONV).rows
    assert rows[1] == TraceRow(line_no=3, arrival_s=4.314579, num_prompt_tokens=396,
                               num_output_tokens=109)
    assert 55 * 60 < rows[-1].arrival_s < 60 * 60
    assert max(r.num_output_tokens for r in rows) == 1000  # conv outputs are capped at 1,000


def test_real_mooncake_trace(traces_dir):
    check_mooncake_file(traces_dir / MOONCAKE, 3_993)


def test_limit_keeps_the_first_rows():
    load = load_trace(SLICES / "azure_conv_300.csv", limit=64)
    assert len(load.rows) == 64 and load.rows[-1].line_no == 65


# --- small files, broken on purpose -------------------------------------------------------------

def test_seven_fractional_digits_are_exact(tmp_path):
    path = write(tmp_path, "t.csv", [HEADER, "2023-11-16 23:59:59.9999999,10,5",
                                     "2023-11-17 00:00:00.0000001,11,6"])
    rows = load_azure_csv(path).rows
    assert rows[1].arrival_s == 2e-7
    assert rows[0] == TraceRow(2, 0.0, 10, 5)


def test_malformed_rows_are_reported_and_the_rest_kept(tmp_path):
    lines = [HEADER,
             "2023-11-16 18:00:00.0000000,100,10",  # 2 ok
             "2023-11-16 18:00:01.5000000,abc,10",  # 3 not a number
             "2023-11-16 18:00:02.0000000,100,-4",  # 4 negative
             "2023-13-16 18:00:03.0000000,100,10",  # 5 month 13
             "yesterday,100,10",                    # 6 not a timestamp
             "2023-11-16 18:00:04.0000000,100",     # 7 two fields
             "",                                    # 8 blank: skipped, not an error
             "2023-11-16 18:00:05.0000000,7,3,9",   # 9 four fields
             "2023-11-16 18:00:06.2500000,12.5,3",  # 10 not whole
             "2023-11-16 18:00:07.0000000,200,20"]  # 11 ok
    load = load_azure_csv(write(tmp_path, "bad.csv", lines))
    assert [(r.line_no, r.arrival_s) for r in load.rows] == [(2, 0.0), (11, 7.0)]
    by_line = {e.line_no: e for e in load.errors}
    assert sorted(by_line) == [3, 4, 5, 6, 7, 9, 10]
    assert "ContextTokens" in by_line[3].message and "'abc'" in by_line[3].message
    assert "GeneratedTokens is negative" in by_line[4].message
    assert "month" in by_line[5].message
    assert "TIMESTAMP" in by_line[6].message
    assert "expected 3 fields" in by_line[7].message and "found 2" in by_line[7].message
    assert "found 4" in by_line[9].message
    assert by_line[10].raw == lines[9]
    assert str(by_line[3]).startswith("line 3: ")


def test_times_are_relative_to_the_first_valid_row(tmp_path):
    path = write(tmp_path, "t.csv", [HEADER, "not-a-time,1,1", "2023-11-16 18:00:10.0,5,5",
                                     "2023-11-16 18:00:12.5,6,6"], newline="\n", final=True)
    load = load_azure_csv(path)
    assert [r.arrival_s for r in load.rows] == [0.0, 2.5]
    assert [e.line_no for e in load.errors] == [2]


def test_rows_out_of_time_order_are_sorted_by_arrival(tmp_path):
    path = write(tmp_path, "t.csv", [HEADER, "2023-11-16 18:00:05.0,1,1", "2023-11-16 18:00:03.0,2,2"])
    rows = load_azure_csv(path).rows
    assert [(r.line_no, r.arrival_s) for r in rows] == [(3, 0.0), (2, 2.0)]


@pytest.mark.parametrize("content, expected", [
    (b"time,prompt,output\r\n2023-11-16 18:00:05.0,1,1", "found 'time,prompt,output'"),
    (b"", "the file is empty"),
    (b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n', "expected the CSV header"),
])
def test_wrong_header_is_a_format_error(tmp_path, content, expected):
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=expected) as info:
        load_azure_csv(path)
    assert str(path) in str(info.value) and HEADER in str(info.value)


def test_binary_file_is_a_format_error(tmp_path):
    path = tmp_path / "blob.csv"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TraceFormatError, match="not a text trace"):
        load_trace(path)


def test_mooncake_malformed_lines(tmp_path):
    lines = ['{"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}',
             '{"timestamp": 1500, "input_length": 600',                       # 2 broken JSON
             '{"timestamp": 1600, "output_length": 3}',                       # 3 missing key
             '{"timestamp": 1700, "input_length": -1, "output_length": 3}',   # 4 negative
             '{"timestamp": true, "input_length": 5, "output_length": 3}',    # 5 bool timestamp
             '[1, 2, 3]',                                                     # 6 not an object
             '{"timestamp": 1800, "input_length": 5, "output_length": 3, "hash_ids": ["a"]}',  # 7
             '{"timestamp": 2250, "input_length": 5, "output_length": 3}']    # 8 ok, no hash_ids
    load = load_mooncake_jsonl(write(tmp_path, "m.jsonl", lines, newline="\n", final=True))
    assert [(r.line_no, r.arrival_s, r.hash_ids) for r in load.rows] == [(1, 0.0, (0, 1)),
                                                                          (8, 1.25, ())]
    messages = {e.line_no: e.message for e in load.errors}
    assert sorted(messages) == [2, 3, 4, 5, 6, 7]
    assert "not valid JSON" in messages[2]
    assert "missing input_length" in messages[3]
    assert "input_length is not a non-negative integer" in messages[4]
    assert "timestamp" in messages[5]
    assert "JSON object" in messages[6]
    assert "hash_ids" in messages[7]


def test_mooncake_loader_refuses_a_csv(tmp_path):
    path = write(tmp_path, "x.jsonl", [HEADER, "2023-11-16 18:00:05.0,1,1"])
    with pytest.raises(TraceFormatError, match="not a Mooncake trace") as info:
        load_mooncake_jsonl(path)
    assert str(path) in str(info.value)


def test_load_trace_dispatches_on_content(tmp_path):
    azure = write(tmp_path, "a.txt", [HEADER, "2023-11-16 18:00:05.0,1,1"])
    mooncake = write(tmp_path, "m.txt", ['{"timestamp": 0, "input_length": 5, "output_length": 1}'])
    assert load_trace(azure).format == AZURE
    assert load_trace(mooncake).format == MOONCAKE_FORMAT
    other = write(tmp_path, "s.csv", ["num_prefill_tokens,num_decode_tokens", "10,5"])
    with pytest.raises(TraceFormatError, match="unrecognised trace format") as info:
        load_trace(other)
    assert "Azure" in str(info.value) and "Mooncake" in str(info.value)
