"""``batchscope run`` with ``--request-rate``, ``--lengths sharegpt``, a JSONL workload and SLOs,
as a user runs it (in-process, simulated executor: no model)."""
from __future__ import annotations

import numpy as np
import pytest

from app.cli import main
from recordings.file.open_reader import open_reader
from recordings.workloads.workload import DEMO_TRACE

SIM = ("--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100", "--max-num-seqs", "16",
       "--num-gpu-blocks", "4000", "--max-num-batched-tokens", "4096", "--max-model-len", "8192")


def test_sharegpt_lengths_with_poisson_arrivals(tmp_path, capsys):
    out = tmp_path / "sg.sqlite"
    assert main(["run", "--lengths", "sharegpt", "--num-requests", "40", "--request-rate", "4", "--seed", "2",
                 "--max-prompt-tokens", "2048", "--record", str(out), *SIM,
                 "--slo-ttft", "500", "--slo-tpot", "50"]) == 0
    text = capsys.readouterr()
    reader = open_reader(out)
    arrivals = [t for (t,) in reader.execute("SELECT arrival_time FROM requests ORDER BY seq")]
    gaps = np.random.default_rng(2).exponential(1 / 4, 39)         # vLLM's generator, written out
    assert arrivals == pytest.approx([0.0, *np.cumsum(gaps)])
    trace = reader.run_info().trace
    assert trace["format"] == "length-table:sharegpt" and trace["request_rate"] == 4.0
    assert any("Poisson process at 4 requests/s" in n and "seed 2" in n for n in trace["scaling"])
    assert any("ShareGPT" in n and "Sarathi-Serve" in n for n in trace["scaling"])
    for label in ("E2E latency p50/p90/p99 (sim s)", "queue time p50/p90/p99 (sim s)",
                  "requests/s (sim s)", "prefill / decode time (sim s)", "goodput req/s (sim s)"):
        assert label in text.out
    assert "met TTFT <= 500 ms and TPOT <= 50 ms" in text.out
    # summary recomputes the same lines from the file, with another SLO
    assert main(["summary", str(out), "--slo-tpot", "1"]) == 0
    assert "met TPOT <= 1 ms" in capsys.readouterr().out


def test_request_rate_replaces_a_trace_timestamps_and_keeps_hash_ids(tmp_path, capsys):
    trace = tmp_path / "m.jsonl"
    trace.write_text("\n".join(
        f'{{"timestamp": {1000 * i}, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, {i + 3}]}}'
        for i in range(12)))
    out = tmp_path / "m.sqlite"
    assert main(["run", "--trace", str(trace), "--request-rate", "inf", "--record", str(out), *SIM]) == 0
    err = capsys.readouterr().err
    assert "all 12 requests arrive at t=0 (--request-rate inf); replaces the trace's timestamps" in err
    assert "hash_ids: kept with each row's lengths through the Poisson resampling" in err
    reader = open_reader(out)
    assert reader.execute("SELECT max(arrival_time) FROM requests") == [(0.0,)]
    sharing = reader.run_info().trace["prefix_sharing"]
    assert sharing["num_hash_ids"] == 36 and sharing["num_hash_ids_unused"] == 0


def test_jsonl_workload_runs_with_its_own_ids_and_priorities(tmp_path, capsys):
    wl = tmp_path / "w.jsonl"
    wl.write_text('{"arrival": 0, "prompt_tokens": 300, "output_tokens": 5, "request_id": "late", "priority": 1}\n'
                  '{"arrival": 0, "prompt_tokens": 20, "output_tokens": 3, "request_id": "urgent"}\n'
                  '{"arrival": 0.5, "prompt": "text, but the simulator has no tokenizer", "max_tokens": 3}\n'
                  '{"arrival": "soon", "prompt_tokens": 20, "output_tokens": 3}\n')
    out = tmp_path / "w.sqlite"
    assert main(["run", "--trace", str(wl), "--policy", "priority", "--record", str(out), *SIM]) == 0
    err = capsys.readouterr().err
    assert "line 4: arrival: Input should be a valid number" in err
    assert "line 3: prompt is text but this engine has no tokenizer" in err
    rows = open_reader(out).execute("SELECT request_id, num_prompt_tokens, num_output_tokens, status FROM requests "
                               "ORDER BY request_id")
    assert rows == [("late", 300, 5, "FINISHED_LENGTH"), ("urgent", 20, 3, "FINISHED_LENGTH")]
    # under fcfs the priority row is refused before anything runs (as LLMEngine.add_request refuses it)
    assert main(["run", "--trace", str(wl), "--record", str(tmp_path / "fcfs.sqlite"), *SIM]) == 2
    captured = capsys.readouterr()
    assert ("1 request carries a nonzero priority (first: line 1, priority 1): only --policy priority "
            "honours it") in captured.err
    assert not (tmp_path / "fcfs.sqlite").exists()


@pytest.mark.parametrize("argv, message", [
    (("--trace", str(DEMO_TRACE), "--lengths", "sharegpt"), "--trace PATH or --lengths sharegpt, not both"),
    ((), "needs a workload: --trace PATH or --lengths sharegpt"),
    (("--trace", str(DEMO_TRACE), "--num-requests", "5"), "--num-requests goes with --lengths"),
    (("--lengths", "sharegpt", "--num-requests", "0"), "--num-requests must be >= 1, got 0"),
    (("--lengths", "sharegpt", "--request-rate", "0"), "--request-rate must be > 0 requests/s"),
    (("--lengths", "sharegpt", "--slo-ttft", "-3"), "--slo-ttft must be a positive number of milliseconds"),
])
def test_bad_source_flags_name_the_flag_and_limit(argv, message, tmp_path, capsys):
    assert main(["run", *argv, "--record", str(tmp_path / "x.sqlite"), *SIM]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.sqlite").exists()


def test_a_workload_without_one_valid_row_is_refused_naming_its_lines(tmp_path, capsys):
    wl = tmp_path / "bad.jsonl"
    wl.write_text('{"arrival": -1, "prompt_tokens": 5, "max_tokens": 1}\n{"arrival": 0}\n')
    assert main(["run", "--trace", str(wl), "--record", str(tmp_path / "x.sqlite"), *SIM]) == 2          # bad input (app.commands.run: a malformed trace is a usage error)
    err = capsys.readouterr().err
    assert f"{wl}: no request to serve: all 2 rows were refused (line 1: arrival:" in err
    assert "line 2: give exactly one of prompt, prompt_tokens, prompt_token_ids" in err
    assert not (tmp_path / "x.sqlite").exists()


EMPTY_WORKLOADS = {   # every row refused: malformed, or not servable by the engine
    "azure.csv": ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n", "line 2: bad TIMESTAMP"),
    "mooncake.jsonl": ('{"timestamp": 5, "input_length": -1, "output_length": 1}\n',
                       "line 1: input_length is not a non-negative integer"),
    "malformed.jsonl": ('{"arrival": -1, "prompt_tokens": 5, "max_tokens": 1}\n', "line 1: arrival:"),
    "text.jsonl": ('{"arrival": 0, "prompt": "hello", "max_tokens": 2}\n'
                   '{"arrival": 1, "prompt": "again", "max_tokens": 2}\n', "line 1: prompt is text but"),
    "ids.jsonl": ('{"arrival": 0, "prompt_token_ids": [1, 99999999], "max_tokens": 2}\n',
                  "line 1: prompt_token_ids has id 99999999, over the model's vocabulary"),
}


@pytest.mark.parametrize("name, executor", [   # the simulated executor has no vocabulary: any id serves
    (name, executor) for name in sorted(EMPTY_WORKLOADS) for executor in ("sim", "model")
    if (name, executor) != ("ids.jsonl", "sim")])
def test_an_empty_workload_exits_2_with_one_message(name, executor, tmp_path, capsys, request):
    text, reason = EMPTY_WORKLOADS[name]
    engine = SIM if executor == "sim" else ("--model", str(request.getfixturevalue("tiny_model")),
                                            "--device", "cpu", "--num-gpu-blocks", "64")
    wl = tmp_path / name
    wl.write_text(text)
    out = tmp_path / "x.sqlite"
    assert main(["run", "--trace", str(wl), "--record", str(out), *engine]) == 2
    err = capsys.readouterr().err
    assert f"batchscope: {wl}: no request to serve: " in err and reason in err
    assert not out.exists()


def test_summary_refuses_a_bad_slo_as_a_usage_error(tmp_path, capsys):
    assert main(["summary", str(tmp_path / "none.sqlite"), "--slo-tpot", "0"]) == 2
    assert "--slo-tpot must be a positive number" in capsys.readouterr().err


@pytest.mark.parametrize("header, hinted", [
    ("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio", True),   # Sarathi-Serve's file
    ("num_prefill_tokens,num_decode_tokens", True),                             # the shipped table's
    ("prompt,output", False)])
def test_a_length_table_given_as_trace_points_to_lengths(header, hinted, tmp_path, capsys):
    """``--trace`` on a table of lengths without arrivals (the ShareGPT one of ../shared/traces)
    is refused as no trace, and the message says how to use it: ``--lengths sharegpt``."""
    table = tmp_path / "lengths.csv"
    table.write_text(f"{header}\n120,30,150,4.0\n80,12,92,6.7\n")
    assert main(["run", "--trace", str(table), "--record", str(tmp_path / "x.sqlite"), *SIM]) == 2
    err = capsys.readouterr().err
    assert "unrecognised trace format" in err and str(table) in err
    assert ("lengths.csv is a table of request lengths without arrival times, not a trace: draw "
            "requests from the shipped copy with --lengths sharegpt --num-requests N" in err) is hinted
    assert not (tmp_path / "x.sqlite").exists()
