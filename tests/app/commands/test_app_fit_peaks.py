"""``batchscope fit`` on a CPU recording fits against the peaks the run measured at its start
(stored in the recording), says so, and measures this CPU only for a recording without them,
saying that too."""
from __future__ import annotations

import json
import re
import sqlite3

import pytest

import engine.sim.hardware as hardware
from app.cli import main
from engine.sim.cost_model import CostParams
from engine.sim.hardware import DevicePeaks
from recordings.file.open_reader import open_reader
from recordings.workloads.workload import DEMO_TRACE


@pytest.fixture(scope="module")
def real(tiny_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("fit") / "real.sqlite"
    assert main(["run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "12", "--clock",
                 "virtual", "--max-prompt-tokens", "48", "--max-output-tokens", "8", "--num-gpu-blocks", "64",
                 "--max-num-seqs", "4", "--record", str(path)]) == 0
    return path


def _no_measuring(*_a, **_k):
    raise AssertionError("measured this CPU although the recording holds its peaks")


def fit(path, tmp_path, capsys, *flags) -> tuple[str, CostParams]:
    """Run ``batchscope fit`` on ``path``: what it printed and the saved fit."""
    out = tmp_path / "fit.json"
    capsys.readouterr()
    assert main(["fit", str(path), "-o", str(out), *flags]) == 0
    return capsys.readouterr().out, CostParams.load(out)


def test_fit_uses_the_peaks_the_recording_holds(real, tmp_path, monkeypatch, capsys):
    recorded = open_reader(real).run_info().roofline["device"]
    monkeypatch.setattr(hardware, "measure_cpu", _no_measuring)
    printed, params = fit(real, tmp_path, capsys)
    assert "peaks: the recording's, measured at the run's start" in printed
    assert params.device == "cpu"            # --sim-device cpu --sim-cost reuses them
    assert (params.peak_flops, params.mem_bandwidth) == (recorded["peak_flops"], recorded["mem_bandwidth"])


def test_without_recorded_peaks_fit_measures_this_cpu_and_says_so(real, tmp_path, monkeypatch, capsys):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(real) as src, sqlite3.connect(old) as dst:
        src.backup(dst)
        info = json.loads(dst.execute("SELECT run_info_json FROM runs").fetchone()[0])
        del info["roofline"]                                       # as recorded before peaks were
        dst.execute("UPDATE runs SET run_info_json = ?", (json.dumps(info),))
    measured = DevicePeaks("cpu", 1.5e10, 7e9, 1 << 30, "this CPU, measured")
    monkeypatch.setattr(hardware, "measure_cpu", lambda *a, **k: measured)
    printed, params = fit(old, tmp_path, capsys)
    assert "peaks: this CPU's, measured now: the recording holds no peaks" in printed
    assert (params.peak_flops, params.mem_bandwidth) == (measured.peak_flops, measured.mem_bandwidth)


def test_a_gpu_device_fits_against_its_datasheet(real, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hardware, "measure_cpu", _no_measuring)
    printed, params = fit(real, tmp_path, capsys, "--sim-device", "a100")
    assert "peaks: a100's datasheet, as --executor sim uses them" in printed
    assert params.peak_flops == hardware.DEVICES["a100"].peak_flops


def test_the_printed_fit_has_no_exponent_and_no_efficiency_above_one(real, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(hardware, "measure_cpu", _no_measuring)
    printed, params = fit(real, tmp_path, capsys)
    assert not re.search(r"\de[+-]?\d", printed), printed
    assert params.flops_efficiency <= 1 and params.bw_efficiency <= 1


def test_a_recording_too_short_to_fit_is_refused_and_says_why(tiny_model, tmp_path, capsys):
    short = tmp_path / "short.sqlite"
    assert main(["run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "1", "--clock",
                 "virtual", "--max-prompt-tokens", "16", "--max-output-tokens", "3", "--num-gpu-blocks", "16",
                 "--record", str(short)]) == 0
    capsys.readouterr()
    assert main(["fit", str(short), "-o", str(tmp_path / "fit.json")]) == 1
    assert "too few steps to fit: 3 with a forward pass, at least 16 needed" in capsys.readouterr().err
    assert not (tmp_path / "fit.json").exists()
