"""``batchscope run --executor sim`` and ``batchscope fit`` as a user runs them (in-process)."""
from __future__ import annotations

import json

import pytest

from app.cli import main
from engine.sim.cost_model import CostParams
from recordings.file.open_reader import open_reader
from recordings.workloads.workload import DEMO_TRACE

SIM_RUN = ("run", "--trace", str(DEMO_TRACE), "--limit", "30", "--time-scale", "0.05", "--max-num-seqs", "8",
           "--num-gpu-blocks", "200", "--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100")


def _rows(path) -> list:
    return [(r.clock, r.token_time, r.scheduled, r.new_tokens, r.block_events, r.transitions)
            for r in open_reader(path).records(0, 100_000)]


def test_sim_run_is_recorded_as_simulated_and_is_deterministic(tmp_path, capsys):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    assert main([*SIM_RUN, "--record", str(a)]) == 0
    assert main([*SIM_RUN, "--record", str(b)]) == 0
    info = open_reader(a).run_info()
    assert info.executor == "sim" and info.simulated is True and info.device == "sim:a100"
    assert info.config["clock"] == "sim" and info.sim["model"]["name"] == "llama-3.2-1b"
    assert info.sim["cost"] == CostParams().to_dict()
    # synthetic prompt ids are not stored (the provenance says how to rebuild them); lengths are
    reader = open_reader(a)
    assert "not stored: synthetic ids" in info.prompt_token_ids
    assert reader.execute("SELECT count(*) FROM requests WHERE prompt_token_ids IS NOT NULL") == [(0,)]
    assert reader.execute("SELECT min(num_prompt_tokens) FROM requests")[0][0] >= 1
    rows = _rows(a)
    assert rows == _rows(b) and len(rows) > 10
    assert rows[-1][0] > 0 and all(r0[0] <= r1[0] for r0, r1 in zip(rows, rows[1:]))   # the sim clock moves


def test_fit_on_a_real_recording_then_simulate_with_it(tiny_model, tmp_path, capsys):
    real, fit, sim = tmp_path / "real.sqlite", tmp_path / "fit.json", tmp_path / "sim.sqlite"
    assert main(["run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "16", "--clock",
                 "virtual", "--max-prompt-tokens", "48", "--max-output-tokens", "12", "--num-gpu-blocks", "64",
                 "--max-num-seqs", "4", "--record", str(real)]) == 0
    capsys.readouterr()
    assert main(["fit", str(real), "-o", str(fit), "--check", str(real)]) == 0
    out = capsys.readouterr().out
    assert "relative error median" in out and f"predicted {real}" in out
    params = CostParams.load(fit)
    assert params.device == "cpu" and params.peak_flops > 0
    assert json.loads(fit.read_text())["bw_efficiency"] > 0
    assert main(["run", "--trace", str(DEMO_TRACE), "--limit", "8", "--executor", "sim", "--sim-model",
                 str(tiny_model), "--sim-device", "cpu", "--sim-cost", str(fit), "--record", str(sim)]) == 0
    info = open_reader(sim).run_info()
    assert info.sim["cost"] == params.to_dict() and info.sim["device"]["peak_flops"] == params.peak_flops
    assert main(["fit", str(sim), "-o", str(tmp_path / "again.json")]) == 1
    assert "simulated recording" in capsys.readouterr().err
    assert main(["fit", str(real), "-o", str(tmp_path / "again.json"), "--check", str(sim)]) == 1
    assert f"{sim} is a simulated recording; fit and --check need real runs" in capsys.readouterr().err
    assert not (tmp_path / "again.json").exists()
    assert main(["fit", str(real), "-o", str(fit)]) == 2                      # never overwritten unasked
    assert "exists (--force overwrites)" in capsys.readouterr().err
    assert main(["fit", str(real), "-o", str(tmp_path / "nodir" / "f.json")]) == 2
    assert f"folder {tmp_path / 'nodir'} does not exist" in capsys.readouterr().err
    assert main(["fit", str(real), "-o", str(fit), "--force"]) == 0
    saved = capsys.readouterr().out
    assert f"--executor sim --sim-model {tiny_model} --sim-device cpu --sim-cost {fit}" in saved
    assert "--trace TRACE --record OUT.sqlite" in saved
    other = tmp_path / "h100.sqlite"                      # a CPU fit does not hold for another device
    assert main(["run", "--trace", str(DEMO_TRACE), "--limit", "8", "--executor", "sim", "--sim-model",
                 str(tiny_model), "--sim-device", "h100", "--sim-cost", str(fit), "--record", str(other)]) == 2
    assert "was fitted on device 'cpu', but this run simulates 'h100'" in capsys.readouterr().err
    assert not other.exists()


@pytest.mark.parametrize("argv, message", [
    (("--executor", "sim", "--sim-device", "tpu"), "known devices are a100, h100, h200, l40s, cpu"),
    (("--executor", "sim", "--sim-model", "gpt-9"), "known models are llama-3.1-8b"),
    (("--sim-model", "llama-3.1-8b"), "--sim-model needs --executor sim"),
    (("--clock", "sim"), "--clock sim needs --executor sim"),
])
def test_bad_sim_flags_name_the_known_values(argv, message, tmp_path, capsys):
    assert main(["run", "--trace", str(DEMO_TRACE), "--record", str(tmp_path / "x.sqlite"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_recorder_failure_stops_recording_not_serving(tmp_path, capsys, monkeypatch):
    """A writer error (a full disk, say) mid-run: the CLI says so and exits 1 and the file reads
    up to its last committed step (that the engine serves on is tests/recordings' check)."""
    from tests.support.disk_full import fill_disk_at

    fill_disk_at(monkeypatch, 40)
    out = tmp_path / "full.sqlite"
    assert main([*SIM_RUN, "--record", str(out)]) == 1
    captured = capsys.readouterr()
    assert "recording stopped" in captured.err and "No space left on device" in captured.err
    reader = open_reader(out)
    assert -1 <= reader.latest_step() < 40 and not reader.is_complete()   # its batch was rolled back
    reader.state_at(reader.latest_step())          # readable up to its last committed step
