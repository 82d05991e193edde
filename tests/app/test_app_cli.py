"""``batchscope run`` / ``summary`` / ``--help`` as a user runs them (tiny model, CPU)."""
from __future__ import annotations
from tests.support.paths import REPO

import subprocess
import sys

import pytest

from app.cli import build_parser, main
from recordings.file.open_reader import open_reader
from recordings.metrics.run_metrics import summarize
from recordings.workloads.workload import DEMO_TRACE

ROOT = REPO


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_help_names_the_knobs_and_commands(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for word in ("demo", "run", "replay", "summary"):
        assert word in out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for knob in ("--max-num-batched-tokens", "--max-num-seqs", "--block-size", "--num-gpu-blocks",
                 "--time-scale", "--max-prompt-tokens", "--max-output-tokens", "--record", "--limit",
                 "--enable-prefix-caching"):
        assert knob in out


def test_prefix_caching_flag_reaches_the_engine_config():
    from app.cli import engine_config

    base = ["run", "--trace", "t.csv", "--record", "r.sqlite"]
    assert engine_config(build_parser().parse_args(base)).enable_prefix_caching is False
    on = engine_config(build_parser().parse_args([*base, "--enable-prefix-caching"]))
    assert on.enable_prefix_caching is True
    sim = engine_config(build_parser().parse_args([*base, "--enable-prefix-caching", "--executor", "sim"]))
    assert sim.enable_prefix_caching is True


def test_no_command_means_the_live_demo():
    args = build_parser().parse_args(["demo"])
    assert args.command == "demo" and args.trace is None and args.clock == "wall"
    assert args.num_gpu_blocks is not None          # the demo picks a cache small enough to see pressure


@pytest.mark.slow
def test_run_replays_a_trace_records_it_and_prints_a_summary(tiny_model, tmp_path):
    rec = tmp_path / "run.sqlite"
    out = run_cli("run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "24",
                  "--record", str(rec), "--clock", "virtual", "--max-prompt-tokens", "48",
                  "--max-output-tokens", "12", "--num-gpu-blocks", "24", "--max-num-seqs", "6")
    assert out.returncode == 0, out.stderr[-3000:]
    for field in ("requests", "steps", "output tokens/s", "TTFT p50/p90/p99", "ITL p50/p90/p99",
                  "preemptions"):
        assert field in out.stdout
    assert "prompt lengths" in out.stdout and "clipped" in out.stdout   # says what was scaled
    reader = open_reader(rec)
    final = reader.state_at(reader.latest_step())
    assert len(final) == 0                     # nothing left live at the end
    ids = reader.request_ids()
    assert len(ids) == 24 and all(reader.request_info(r).is_finished for r in ids)
    assert summarize(reader).num_requests == 24
    assert reader.run_info().trace["num_rows"] == 24
    # the recorded run is reproducible: same workload, virtual clock -> same schedule
    rec2 = tmp_path / "run2.sqlite"
    out2 = run_cli("run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "24",
                   "--record", str(rec2), "--clock", "virtual", "--max-prompt-tokens", "48",
                   "--max-output-tokens", "12", "--num-gpu-blocks", "24", "--max-num-seqs", "6")
    assert out2.returncode == 0
    r2 = open_reader(rec2)
    assert r2.latest_step() == reader.latest_step()
    strip = lambda recs: [(r.scheduled, r.new_tokens, r.block_events, r.transitions)  # noqa: E731
                          for r in recs]
    assert strip(r2.records(0, 10_000)) == strip(reader.records(0, 10_000))
    summary = run_cli("summary", str(rec))
    assert summary.returncode == 0 and "requests" in summary.stdout


@pytest.mark.slow
def test_malformed_rows_are_reported_by_line_and_the_rest_is_served(tiny_model, tmp_path):
    lines = DEMO_TRACE.read_bytes().split(b"\r\n")[:9]
    lines[4] = b"2023-11-16 18:15:51.3910170,not-a-number,16"
    trace = tmp_path / "bad.csv"
    trace.write_bytes(b"\r\n".join(lines))
    rec = tmp_path / "bad.sqlite"
    out = run_cli("run", "--model", str(tiny_model), "--trace", str(trace), "--record", str(rec),
                  "--clock", "virtual", "--max-output-tokens", "4", "--max-prompt-tokens", "32")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "line 5" in out.stdout + out.stderr
    assert len(open_reader(rec).request_ids()) == 7


@pytest.mark.parametrize("problem", ["missing-model", "existing-record", "bad-trace", "bad-knob",
                                     "missing-trace", "record-folder", "limit", "time-scale", "clip"])
def test_bad_input_gives_a_clear_error_and_exit_code(problem, tiny_model, tmp_path, capsys):
    """A bad command line (a flag, a file named on it) exits 2; a model that does not load, 1."""
    rec = tmp_path / "x.sqlite"
    args = ["run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--record", str(rec), "--limit", "2"]
    if problem == "missing-model":
        args[2] = str(tmp_path / "nope")
        expect = "nope"
    elif problem == "existing-record":
        rec.write_bytes(b"x")
        expect = "exists"
    elif problem == "bad-trace":
        bad = tmp_path / "t.csv"
        bad.write_text("a,b\n1,2\n")
        args[4] = str(bad)
        expect = "t.csv"
    elif problem == "bad-knob":
        args += ["--max-num-seqs", "0"]
        expect = "max_num_seqs"
    elif problem == "missing-trace":
        args[4] = str(tmp_path / "gone.csv")
        expect = "gone.csv"
    elif problem == "record-folder":
        args[6] = str(tmp_path / "no-such-dir" / "x.sqlite")
        expect = "no-such-dir"
    elif problem == "limit":
        args[8] = "0"
        expect = "--limit"
    elif problem == "time-scale":
        args += ["--time-scale", "-1"]
        expect = "time_scale"
    else:
        args += ["--max-prompt-tokens", "2"]
        expect = "max_prompt_tokens"
    code = main(args)
    err = capsys.readouterr().err
    assert code == (1 if problem == "missing-model" else 2)
    assert expect in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_rejected_requests_are_explained_and_all_rejected_is_a_failure(tiny_model, tmp_path):
    rec = tmp_path / "rej.sqlite"
    out = run_cli("run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "3",
                  "--record", str(rec), "--clock", "virtual", "--max-model-len", "64")
    assert out.returncode == 1
    assert "3 of 3 requests failed or were rejected" in out.stdout
    assert "max_model_len 64" in out.stdout and "--max-prompt-tokens" in out.stdout


def test_sim_run_names_its_model_and_explains_rejections_once(tmp_path, capsys):
    """A simulated run of the default model says which model it simulates (not 'default'), and
    the requests refused at admission are reported once, with the limit they broke."""
    from tests.support.jsonl_files import write_jsonl

    trace = write_jsonl(tmp_path / "w.jsonl", [
        {"arrival": i * 0.1, "prompt_tokens": 100 if i in (1, 3) else 10, "output_tokens": 4}
        for i in range(5)])
    rec = tmp_path / "r.sqlite"
    assert main(["run", "--trace", str(trace), "--record", str(rec), "--executor", "sim",
                 "--sim-device", "h100", "--max-model-len", "64", "--num-gpu-blocks", "32"]) == 0
    captured = capsys.readouterr()
    assert "simulating smollm2-135m on h100" in captured.err and "simulating default" not in captured.err
    assert captured.out.count("requests failed or were rejected at admission") == 1
    assert "2 of 5 requests failed or were rejected at admission:" in captured.out
    assert "exceeds max_model_len 64  [r0001, r0003]" in captured.out
