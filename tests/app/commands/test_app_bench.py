"""``batchscope bench``: usage errors before torch, the anchor workload, and figures that agree with
the cost model and with the recording of the same run (tiny random model on the CPU)."""
from __future__ import annotations
from tests.support.paths import REPO

import json
import subprocess
import sys

import pytest

from app.cli import main, parse_args

ROOT = REPO
HEAVY = ("torch", "transformers", "PySide6", "pyqtgraph", "tqdm")
TINY_RUN = ["bench", "--small", "--device", "cpu", "--limit", "3"]


def test_bad_flags_exit_2_before_heavy_imports(tmp_path):
    existing = tmp_path / "old.sqlite"
    existing.write_text("")
    cases = {
        "shape": ["--model-shape", "gpt-17"],
        "small and model": ["--small", "--model", "default"],
        "shape and model": ["--model-shape", "tiny", "--model", "default"],
        "sim": ["--executor", "sim"],
        "clock": ["--clock", "virtual"],
        "limit": ["--limit", "0"],
        "anchor scaled": ["--prompt-scale", "0.5"],
        "knob": ["--max-num-seqs", "0"],
        "record exists": ["--record", str(existing)],
        "json folder": ["--json", str(tmp_path / "no" / "x.json")],
        "trace missing": ["--trace", str(tmp_path / "missing.csv")],
    }
    code = ("import contextlib, io, json, sys\nfrom app.cli import main\nout = {}\n"
            f"for name, argv in {cases!r}.items():\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        rc = main(['bench', *argv])\n"
            "    out[name] = (rc, err.getvalue())\n"
            f"out['heavy'] = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
            "print(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out.pop("heavy") == []
    for name, (rc, err) in out.items():
        assert rc == 2, (name, err)
        assert err.startswith("batchscope: ") and err.count("\n") == 1, (name, err)


def test_help_explains_each_figure_and_what_suits_the_cpu(capsys):
    with pytest.raises(SystemExit):
        parse_args(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for figure in ("output tokens/s", "TTFT p50/p99", "TPOT p50/p99", "steps/s", "roofline efficiency"):
        assert figure in out
    assert "on a CPU: use --small" in out


def test_small_runs_the_first_16_anchor_requests_unless_limit_says():
    from app.commands.bench.command import anchor_limit

    assert anchor_limit(parse_args(["bench", "--small"])) == 16
    assert anchor_limit(parse_args(["bench", "--small", "--limit", "3"])) == 3
    assert anchor_limit(parse_args(["bench"])) is None


def test_the_anchor_workload_is_the_benchmark_readmes():
    from app.commands.bench.workload import anchor_requests

    reqs = anchor_requests(vocab_size=128256)
    assert len(reqs) == 512
    assert sum(len(r.prompt_token_ids) for r in reqs) == 272_018
    assert sum(r.max_tokens for r in reqs) == 77_888
    assert max(r.max_tokens for r in reqs) == 512
    assert all(10 <= t <= 128256 - 10 for r in reqs for t in r.prompt_token_ids)
    assert [r.prompt_token_ids for r in anchor_requests(128256, 3)] == [r.prompt_token_ids for r in reqs[:3]]


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    rec, out = d / "run.sqlite", d / "run.json"
    assert main([*TINY_RUN, "--record", str(rec), "--json", str(out)]) == 0
    return rec, json.loads(out.read_text())


def test_efficiency_is_the_floor_of_the_recorded_steps_over_the_measured_time(recorded_run):
    from engine.sim.cost_model import CostModel, CostParams
    from engine.sim.hardware import DevicePeaks
    from engine.sim.model_shapes import ModelShape
    from recordings.file.open_reader import open_reader

    rec, out = recorded_run
    fig = out["figures"]
    assert 0 < fig["roofline_efficiency"] <= 1
    # the tiny shape of ../shared/bench/hf_peer.py --tiny, fp32; the peaks the run measured
    shape = ModelShape("tiny", 2, 128, 256, 4, 2, 32, 1000, bytes_per_param=4)
    peaks = DevicePeaks("cpu", out["peaks"]["peak_flops"], out["peaks"]["mem_bandwidth"], 1)
    cost = CostModel(shape, peaks, CostParams(0.0, 0.0, 1.0, 1.0))
    reader = open_reader(rec)
    steps = reader.records(0, reader.latest_step() + 1)
    floor = sum(cost.step_time(s.scheduled, len(s.new_tokens)) for s in steps)
    assert floor > 0
    assert fig["roofline_floor_s"] == pytest.approx(floor, rel=1e-9)
    assert fig["roofline_efficiency"] == pytest.approx(floor / fig["duration_s"], rel=1e-9)
    assert fig["num_steps"] == len(steps)
    assert fig["steps_per_s"] == pytest.approx(len(steps) / fig["duration_s"])


def test_figures_match_the_recordings_summary(recorded_run):
    from recordings.file.open_reader import open_reader
    from recordings.metrics.run_metrics import summarize

    rec, out = recorded_run
    fig = out["figures"]
    s = summarize(open_reader(rec))
    assert fig["num_output_tokens"] == s.num_output_tokens == sum(
        [77, 212, 46])                                    # the first 3 anchor requests' output lengths
    assert fig["num_finished"] == s.num_finished == 3
    assert fig["ttft_p50_s"] == pytest.approx(s.ttft.p50, rel=1e-9)
    assert fig["ttft_p99_s"] == pytest.approx(s.ttft.p99, rel=1e-9)
    assert fig["output_tokens_per_s"] == pytest.approx(fig["num_output_tokens"] / fig["duration_s"])
    assert open_reader(rec).run_info().trace["name"] == "anchor"


def test_recording_off_schedules_the_same_steps(recorded_run, tmp_path, capsys):
    out = tmp_path / "off.json"
    assert main([*TINY_RUN, "--no-record", "--json", str(out)]) == 0
    off, on = json.loads(out.read_text())["figures"], recorded_run[1]["figures"]
    assert off["num_steps"] == on["num_steps"] and off["num_output_tokens"] == on["num_output_tokens"]
    assert json.loads(out.read_text())["recording"] is None
    printed = capsys.readouterr().out
    assert "roofline efficiency" in printed and "recording off" in printed


def test_the_recording_gives_the_benchs_floor_and_peaks(recorded_run):
    """The recording names the shape and the peaks the bench measured, so its summary's floor is
    the bench's; its run time (first step to last) lies inside the bench's measured time."""
    from recordings.file.open_reader import open_reader
    from recordings.metrics.roofline import summarize_roofline

    rec, out = recorded_run
    fig = out["figures"]
    run = summarize_roofline(open_reader(rec))
    assert run.roofline.cost.device.peak_flops == out["peaks"]["peak_flops"]
    assert run.roofline.cost.shape.bytes_per_param == 4                 # float32 on the CPU
    assert run.floor_s == pytest.approx(fig["roofline_floor_s"], rel=1e-9)
    assert 0 < run.run_s <= fig["duration_s"] and run.efficiency >= fig["roofline_efficiency"]
    assert run.num_steps == fig["num_steps"] and run.per_step.num_samples > 0
