"""Mooncake rows with keys the format does not define (a misspelt ``output_lenght``) are never
silently accepted: they are kept and reported once per key with their lines, and ``--strict``
refuses the trace (issue 18). BatchScope's JSONL format refuses such a line already."""
from __future__ import annotations

import pytest

from app.cli import main
from recordings.workloads.traces import TraceFormatError, load_mooncake_jsonl, load_trace
from tests.support.jsonl_files import write_jsonl

ROWS = [
    {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]},
    {"timestamp": 10, "input_length": 300, "output_length": 3, "output_lenght": 30},
    {"timestamp": 20, "input_length": 300, "output_length": 3},
    {"timestamp": 30, "input_length": 200, "output_length": 2, "output_lenght": 20, "priority": 1},
    {"timestamp": 40, "input_length": 200, "output_length": 2, "output_lenght": 20},
]


@pytest.fixture
def trace(tmp_path):
    return write_jsonl(tmp_path / "typo.jsonl", ROWS)


def test_unknown_keys_are_listed_with_their_lines_and_the_rows_kept(trace):
    load = load_trace(trace)
    assert len(load.rows) == 5 and not load.errors
    assert load.unknown_keys == {"output_lenght": [2, 4, 5], "priority": [4]}
    assert load.unknown_key_lines() == ["unknown key 'output_lenght' (3 rows, lines 2, 4, 5)",
                                        "unknown key 'priority' (line 4)"]
    assert load.unknown_key_lines(max_lines=1)[0] == "unknown key 'output_lenght' (3 rows, lines 2, ...)"


def test_strict_refuses_the_trace_naming_every_key_and_its_lines(trace):
    for load in (load_trace, load_mooncake_jsonl):
        with pytest.raises(TraceFormatError, match=r"--strict.*'output_lenght' \(3 rows, lines 2, 4, 5\).*"
                                                   r"'priority' \(line 4\)"):
            load(trace, strict=True)


def test_a_clean_trace_passes_strict(tmp_path):
    known = ("timestamp", "input_length", "output_length", "hash_ids")
    path = write_jsonl(tmp_path / "clean.jsonl", ({k: v for k, v in r.items() if k in known} for r in ROWS))
    load = load_trace(path, strict=True)
    assert len(load.rows) == 5 and load.unknown_keys == {}


SIM = ("--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100", "--max-num-seqs", "8",
       "--num-gpu-blocks", "400")


def test_run_reports_the_keys_once_and_strict_refuses(trace, tmp_path, capsys):
    assert main(["run", "--trace", str(trace), "--record", str(tmp_path / "a.sqlite"), *SIM]) == 0
    err = capsys.readouterr().err
    assert err.count("output_lenght") == 1 and "lines 2, 4, 5): ignored (--strict refuses the trace)" in err
    assert main(["run", "--trace", str(trace), "--record", str(tmp_path / "b.sqlite"), "--strict", *SIM]) == 2
    err = capsys.readouterr().err
    assert "refused under --strict" in err and "'output_lenght' (3 rows, lines 2, 4, 5)" in err
    assert not (tmp_path / "b.sqlite").exists()
    assert main(["summary", str(tmp_path / "a.sqlite")]) == 0
    assert "unknown keys in the trace's rows, ignored: 'output_lenght' (3 rows), 'priority' (1 row)" in \
        capsys.readouterr().out


def test_a_row_missing_a_key_names_the_misspelt_key_it_has(tmp_path):
    """A row whose ``output_length`` is only there misspelt is skipped as malformed, and its
    error says which unknown key it carried and which missing key that is close to."""
    rows = [ROWS[0], {"timestamp": 10, "input_length": 300, "output_lenght": 30, "colour": "red"},
            {"timestamp": 20, "input_length": 300, "priority": 1}, ROWS[2]]
    load = load_trace(write_jsonl(tmp_path / "misspelt.jsonl", rows))
    assert len(load.rows) == 2
    assert [str(e) for e in load.errors] == [
        "line 2: missing output_length; the row has keys the format does not define: "
        "'output_lenght' (output_length misspelt?), 'colour'",
        "line 3: missing output_length; the row has keys the format does not define: 'priority'"]
