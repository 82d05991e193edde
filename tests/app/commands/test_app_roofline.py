"""Runs record what their roofline efficiency is computed against: a model run the device's peaks
measured at start and its model's shape; a simulated run its simulated device, labelled so."""
from __future__ import annotations

import json

import numpy as np
import pytest

from app.cli import main
from engine.sim.cost_model import CostModel, CostParams
from engine.sim.hardware import measure_cpu
from engine.sim.model_shapes import ModelShape
from recordings.file.open_reader import open_reader
from recordings.metrics.roofline import roofline_of, step_floors, step_seconds
from recordings.metrics.summary_lines import summary_lines
from recordings.workloads.workload import DEMO_TRACE

SIM_RUN = ("run", "--trace", str(DEMO_TRACE), "--limit", "20", "--time-scale", "0.05", "--max-num-seqs", "8",
           "--num-gpu-blocks", "200", "--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "h200")


@pytest.mark.slow
def test_a_model_run_records_its_measured_peaks_and_its_shape(tiny_model, tmp_path, capsys):
    rec = tmp_path / "run.sqlite"
    assert main(["run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "6", "--device", "cpu",
                 "--max-prompt-tokens", "32", "--max-output-tokens", "6", "--num-gpu-blocks", "32",
                 "--record", str(rec)]) == 0
    info = open_reader(rec).run_info()
    config = json.loads((tiny_model / "config.json").read_text())
    shape = ModelShape.from_config(config, info.model["name"]).with_dtype("float32")
    assert info.roofline["model"] == shape.to_dict()
    assert info.roofline["device"] == measure_cpu().to_dict()     # this process's CPU measurement
    roofline = roofline_of(info)
    assert roofline.cost.shape == shape and not roofline.simulated
    capsys.readouterr()
    assert main(["summary", str(rec)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("roofline efficiency"))
    assert "% of the run's time (floor" in line


def test_a_simulated_runs_efficiency_is_its_cost_models_and_says_so(tmp_path):
    rec = tmp_path / "sim.sqlite"
    assert main([*SIM_RUN, "--record", str(rec)]) == 0
    reader = open_reader(rec)
    info = reader.run_info()
    roofline = roofline_of(info)
    assert roofline.simulated and roofline.cost.device.name == "h200"
    cols = reader.step_batches(0, reader.latest_step() + 1)
    eff = step_floors(roofline, cols) / step_seconds(cols, simulated=True)
    # the simulator's step = overheads + sum of max(compute / flops_eff, memory / bw_eff): the same
    # floor over it never reaches the larger efficiency factor
    params = CostParams.from_dict(info.sim["cost"])
    busy = np.diff(cols["batch_start"]) > 0
    assert busy.sum() > 10 and (eff[busy] > 0).all() and (eff < max(params.flops_efficiency, params.bw_efficiency)).all()
    sim = CostModel(roofline.cost.shape, roofline.cost.device, params)
    records = reader.records(0, reader.latest_step() + 1)
    no_swap = [i for i, r in enumerate(records) if not any(b.kind.startswith("swapped") for b in r.block_events)]
    assert eff[no_swap] == pytest.approx([roofline.cost.step_time(records[i].scheduled, len(records[i].new_tokens))
                                          / sim.step_time(records[i].scheduled, len(records[i].new_tokens))
                                          if records[i].scheduled else 0.0 for i in no_swap], rel=1e-6)
    text = "\n".join(summary_lines(reader))
    assert "simulated: the cost model's assumed efficiency on h200" in text and "sim s" in text


def test_a_run_where_every_request_is_rejected_summarizes_without_an_efficiency(tmp_path, capsys):
    rec = tmp_path / "rejected.sqlite"
    assert main([*SIM_RUN, "--max-model-len", "32", "--record", str(rec)]) == 1   # nothing served
    out = capsys.readouterr().out
    assert "roofline efficiency              n/a: no step computed a token" in out
    assert main(["summary", str(rec)]) == 0
    assert "n/a: no step computed a token" in capsys.readouterr().out


def test_a_simulated_run_on_the_virtual_clock_has_no_efficiency(tmp_path):
    rec = tmp_path / "virtual.sqlite"
    assert main([*SIM_RUN, "--clock", "virtual", "--record", str(rec)]) == 0
    roofline = roofline_of(open_reader(rec).run_info())
    assert roofline.cost is None and "virtual clock" in roofline.note
    assert any("roofline efficiency" in line and "n/a: a simulated run on the virtual clock" in line
               for line in summary_lines(open_reader(rec)))


@pytest.mark.slow
def test_threads_sets_torchs_cpu_threads_and_the_recording_says_so(tiny_model, tmp_path):
    import torch

    before = torch.get_num_threads()
    want = 2 if before != 2 else 1
    rec = tmp_path / "threads.sqlite"
    try:
        assert main(["run", "--model", str(tiny_model), "--trace", str(DEMO_TRACE), "--limit", "2", "--device", "cpu",
                     "--max-prompt-tokens", "16", "--max-output-tokens", "4", "--num-gpu-blocks", "16",
                     "--threads", str(want), "--record", str(rec)]) == 0
        assert torch.get_num_threads() == want
    finally:
        torch.set_num_threads(before)
    assert open_reader(rec).run_info().torch_threads == want
