"""Roofline efficiency from a recording: each step's floor (the cost model at full peaks, fed the
step's recorded tokens and context lengths) over its measured time, the run's totals in
``batchscope summary``, and the reason given when the provenance lacks peaks or a shape."""
from __future__ import annotations
from engine.run_info import RunInfo
from tests.support.paths import FIXTURES


import numpy as np
import pytest

from engine.sim.cost_model import CostModel, CostParams
from engine.sim.hardware import DevicePeaks
from engine.sim.model_shapes import ModelShape, get_model_shape
from tests.support.engine_driver import SMALL_SEED, run_engine
from recordings.file.open_reader import open_reader
from recordings.export.summary_json import summary_dict
from recordings.metrics.roofline import roofline_info, roofline_of, step_floors, step_seconds, summarize_roofline
from recordings.metrics.summary_lines import summary_lines

SHAPE = ModelShape("toy", 2, 64, 128, 4, 2, 16, 1000, bytes_per_param=4)
PEAKS = DevicePeaks("cpu", 2e10, 1e10, 1 << 30, "a made-up CPU")
V1_FIXTURE = FIXTURES / "v1_small.sqlite"


@pytest.fixture(scope="module")
def with_peaks(tmp_path_factory):
    path = tmp_path_factory.mktemp("roofline") / "run.sqlite"
    run_engine(path, seed=SMALL_SEED, run_info={"roofline": roofline_info(SHAPE, PEAKS)}, keep_states=False)
    return path


def expected(path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(floor seconds, wall seconds, scheduled something) per step, from the decoded records and
    the cost model directly: not through the batch arrays the module reads."""
    cost = CostModel(SHAPE, PEAKS, CostParams(per_step_overhead_s=0.0, per_seq_overhead_s=0.0,
                                              flops_efficiency=1.0, bw_efficiency=1.0))
    reader = open_reader(path)
    records = reader.records(0, reader.latest_step() + 1)
    floor = np.array([cost.step_time(r.scheduled, len(r.new_tokens)) for r in records])
    seconds = np.array([(r.end_ns - r.start_ns) * 1e-9 for r in records])
    return floor, seconds, np.array([bool(r.scheduled) for r in records])


def test_each_steps_efficiency_is_its_floor_over_its_time(with_peaks):
    reader = open_reader(with_peaks)
    roofline = roofline_of(reader.run_info())
    assert roofline.cost is not None and not roofline.simulated and "measured at start" in roofline.note
    cols = reader.step_batches(0, reader.latest_step() + 1)
    floor, seconds, busy = expected(with_peaks)
    assert busy.sum() > 20 and (floor[busy] > 0).all() and (floor[~busy] == 0).all()
    np.testing.assert_allclose(step_floors(roofline, cols), floor, rtol=1e-12)
    np.testing.assert_allclose(step_seconds(cols, simulated=False), seconds, rtol=1e-12)


def test_the_runs_figures_sum_and_rank_the_steps(with_peaks):
    reader = open_reader(with_peaks)
    floor, seconds, busy = expected(with_peaks)
    run = summarize_roofline(reader, chunk=7)              # several chunks: the sums carry over
    assert run.num_steps == len(floor)
    assert run.floor_s == pytest.approx(floor.sum(), rel=1e-12)
    assert run.step_s == pytest.approx(seconds.sum(), rel=1e-12)
    (first, last), = reader.execute("SELECT min(start_ns), max(end_ns) FROM steps")
    assert run.run_s == pytest.approx((last - first) * 1e-9)      # virtual clock: no pause is counted
    assert run.efficiency == pytest.approx(floor.sum() / run.run_s)
    eff = floor[busy] / seconds[busy]
    assert run.per_step.num_samples == busy.sum()
    assert run.per_step.p50 == pytest.approx(np.percentile(eff, 50))
    assert run.per_step.p99 == pytest.approx(np.percentile(eff, 99))
    text = "\n".join(summary_lines(reader))
    assert f"{run.efficiency:.2%} of the run's time" in text and "per step p50/p90/p99" in text
    assert "peaks measured at start (0.02 TFLOP/s, 10 GB/s), toy shape" in text
    as_json = summary_dict(reader)["roofline"]                     # batchscope summary --json
    assert as_json["efficiency"] == run.efficiency and as_json["per_step"]["p50"] == run.per_step.p50
    assert run.num_above_peak == int((eff > 1).sum())
    assert ("above 100%" in text) == bool(run.num_above_peak)


def test_steps_faster_than_the_floor_are_counted_and_explained(tmp_path):
    """Peaks far below the device's (as measured on a loaded machine): steps beat the floor,
    and the summary says the peaks understate the device instead of printing >100% silently."""
    path = tmp_path / "low.sqlite"
    low = DevicePeaks("cpu", 1e3, 1e3, 1 << 30, "a far too low measurement")
    run_engine(path, seed=SMALL_SEED, run_info={"roofline": roofline_info(SHAPE, low)}, keep_states=False)
    reader = open_reader(path)
    run = summarize_roofline(reader)
    assert run.per_step.p50 > 1 and run.num_above_peak == run.per_step.num_samples
    assert f"{run.num_above_peak} steps ran faster than the floor" in "\n".join(summary_lines(reader))


def test_without_peaks_the_summary_says_why():
    reader = open_reader(V1_FIXTURE)                                    # an old file: no peaks, no shape
    lines = [line for line in summary_lines(reader) if line.startswith("roofline efficiency")]
    assert len(lines) == 1 and "n/a: the run names no device peaks and model shape" in lines[0]
    assert summarize_roofline(reader).efficiency is None
    as_json = summary_dict(reader)["roofline"]
    assert as_json["efficiency"] is None and "names no device peaks" in as_json["basis"]


def test_simulated_runs_are_labelled_as_the_simulators_assumption():
    info = {"simulated": True, "sim": {"model": get_model_shape("llama-3.2-1b").to_dict(),
                                       "device": DevicePeaks("h200", 989.4e12, 4.8e12, 141 * 10**9).to_dict(),
                                       "cost": CostParams().to_dict()}}
    r = roofline_of(RunInfo.from_json(info))
    assert r.simulated and r.cost.shape.name == "llama-3.2-1b" and r.cost.params == CostParams.floor()
    assert "simulated" in r.note and "not a measurement" in r.note


def test_bench_recordings_made_before_the_shape_was_stored_use_a_known_models_shape():
    peaks = PEAKS.to_dict()
    old = {"bench": {"peaks": peaks}, "model": {"name": "random llama-3.2-1b"}, "dtype": "bfloat16"}
    r = roofline_of(RunInfo.from_json(old))
    assert r.cost.shape == get_model_shape("llama-3.2-1b").with_dtype("bfloat16") and r.cost.device == PEAKS
    tiny = roofline_of(RunInfo.from_json({**old, "model": {"name": "random tiny"}}))
    assert tiny.cost is None and "'tiny'" in tiny.note


@pytest.mark.parametrize("info, reason", [
    ({"roofline": {"error": "gpt2: not a Llama-family transformers config"}}, "no shape for this model: gpt2"),
    ({"roofline": {"model": {"layers": 2}, "device": PEAKS.to_dict()}}, "unreadable (TypeError"),
    ({"roofline": {"model": SHAPE.to_dict()}}, "unreadable (KeyError"),
    ({"model": "fake"}, "names no device peaks"),
])
def test_unusable_provenance_gives_a_reason_not_a_number(info, reason):
    r = roofline_of(RunInfo.from_json(info))
    assert r.cost is None and reason in r.note
    with pytest.raises(ValueError, match="no roofline"):
        r.floors_s(np.ones(1, int), np.zeros(1, int), np.array([0, 1]), np.ones(1, int))
