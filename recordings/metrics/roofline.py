"""Roofline efficiency of a recorded run: per step and for the whole run.

A step's roofline floor is the least time the device could take for the work the step scheduled:
``engine.sim.cost_model.CostModel.work_time`` under ``CostParams.floor()`` (both peaks fully
reached, no overhead: the sum over the step's operators of ``max(FLOPs / peak_flops, bytes /
mem_bandwidth)``; Williams et al., CACM 2009) of its batch, i.e. each scheduled request's tokens
this step and ``num_computed_tokens`` before it (the ``steps.batch_num_tokens_json`` /
``batch_num_computed_json`` arrays; nothing new is stored), with ``num_new_tokens`` sampled
rows. It is the floor ``batchscope bench`` sums (``app.commands.bench.figures.floor_s``), by the same cost
model as the simulated executor. A step's efficiency is its floor / its measured time
(``end_ns - start_ns``; a simulated run's ``token_time - clock``, its simulated duration), in
[0, 1]; a step that scheduled nothing has efficiency 0.

What the floor is computed against comes from the run's provenance (``run_info``), see
:func:`roofline_of`:

- ``roofline``: ``{"model": ModelShape fields, "device": DevicePeaks fields, "peaks": how they were
  obtained}``, written by model runs (``app.factory.build_engine`` measures the device's peaks at
  start) and by ``batchscope bench`` (:func:`roofline_info`); ``{"error": ...}`` when the model's
  config is not one the cost model has a shape for;
- a simulated run (``simulated``: its ``sim`` model and device): its step times came from this
  cost model with efficiency factors and overheads, so its "efficiency" restates the simulator's
  assumptions (at most ``max(flops_efficiency, bw_efficiency)``), it is no measurement, and is
  labelled so;
- a ``batchscope bench`` recording made before ``roofline`` was stored: its ``bench.peaks`` and the
  shape of a known model name;
- anything else: no efficiency, and :attr:`Roofline.note` says why.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from engine.run_info import RunInfo
from engine.sim.cost_model import CostModel, CostParams, StepWork
from engine.sim.hardware import DevicePeaks
from engine.sim.model_shapes import ModelShape, get_model_shape
from recordings.metrics.stats import Percentiles
from engine.vocab import Clock
from recordings.numbers import number_text

MEASURED = "peaks measured at start"
CHUNK_STEPS = 512         # steps read per query when a whole run is summed (a chunk of 256-request
#                           steps decodes to ~30 kB of Python objects per step: 4,096 of them were 120 MB)


def roofline_info(shape: ModelShape, peaks: DevicePeaks, how: str = MEASURED) -> dict[str, Any]:
    """The provenance entry ``RunInfo.roofline`` of a run of ``shape`` (its dtype's
    ``bytes_per_param``) on a device of ``peaks``; ``how`` says where the peaks came from."""
    return {"model": shape.to_dict(), "device": peaks.to_dict(), "peaks": how}


@dataclass(frozen=True)
class Roofline:
    """What a run's floor is computed against: ``cost`` (a :class:`CostModel` under
    ``CostParams.floor()``; None when the provenance lacks the shape or the peaks), whether the
    run was ``simulated``, and ``note``: the basis in words, or why there is no efficiency."""

    cost: CostModel | None
    simulated: bool
    note: str

    def floors_s(self, num_tokens: np.ndarray, num_computed_tokens: np.ndarray, batch_start: np.ndarray,
                 num_sampled: np.ndarray) -> np.ndarray:
        """Floor seconds (float64) of each of several steps, their batches concatenated as
        aligned integer arrays (tokens this step, ``num_computed_tokens`` before it), step ``k``'s
        at ``batch_start[k]:batch_start[k + 1]``, and each step's number of sampled rows. Raises
        ``ValueError`` when there is no cost model."""
        if self.cost is None:
            raise ValueError(f"no roofline: {self.note}")
        return self.cost.work_times(StepWork.of_batches(num_tokens, num_computed_tokens, batch_start, num_sampled))


def _peaks(device: Mapping) -> DevicePeaks:
    known = {f.name for f in dataclasses.fields(DevicePeaks)}
    return DevicePeaks(**{k: v for k, v in device.items() if k in known})


def _cost(model: Mapping, device: Mapping) -> CostModel:
    known = {f.name for f in dataclasses.fields(ModelShape)}     # a newer recording's extra keys
    return CostModel(ModelShape(**{k: v for k, v in model.items() if k in known}), _peaks(device),
                     CostParams.floor())


def recorded_peaks(run_info: RunInfo) -> DevicePeaks | None:
    """The device peaks a run recorded in its provenance (``run_info.roofline["device"]``:
    measured at the start of a model run or of the bench), or None when it has none (recorded
    before BatchScope measured them, or a simulated run). Raises ``ValueError`` for a malformed
    entry."""
    r = run_info.roofline
    if not isinstance(r, Mapping) or not isinstance(r.get("device"), Mapping):
        return None
    try:
        return _peaks(r["device"])
    except TypeError as e:
        raise ValueError(f"the run info's roofline peaks do not read: {e}") from None


def _describe(peaks: DevicePeaks) -> str:
    return f"{peaks.peak_flops / 1e12:.3g} TFLOP/s, {peaks.mem_bandwidth / 1e9:,.4g} GB/s"


def roofline_of(run_info: RunInfo) -> Roofline:
    """The :class:`Roofline` of a run from its provenance (see the module doc for the order)."""
    try:
        if isinstance(run_info.roofline, Mapping):
            r = run_info.roofline
            if "error" in r:
                return Roofline(None, False, f"the cost model has no shape for this model: {r['error']}")
            cost = _cost(r["model"], r["device"])
            return Roofline(cost, False, f"{r.get('peaks') or MEASURED} ({_describe(cost.device)}), "
                                         f"{cost.shape.name} shape")
        if run_info.simulated and isinstance(run_info.sim, Mapping):
            clock = run_info.config.get("clock", "sim")
            if clock != Clock.SIM:
                return Roofline(None, True, f"a simulated run on the {clock} clock: its steps' times "
                                            f"are not the cost model's durations (use --clock sim)")
            cost = _cost(run_info.sim["model"], run_info.sim["device"])
            return Roofline(cost, True, f"simulated: the cost model's assumed efficiency on "
                                        f"{cost.device.name} ({_describe(cost.device)}), not a measurement")
        bench = run_info.bench
        if isinstance(bench, Mapping) and isinstance(bench.get("peaks"), Mapping):
            name = str(run_info.model_name or "").removeprefix("random ")
            try:
                shape = get_model_shape(name).with_dtype(str(run_info.dtype))
            except ValueError:
                return Roofline(None, False, f"the bench recorded its peaks but not the shape of "
                                             f"model {name or '?'!r} (recorded before BatchScope stored it)")
            cost = _cost(shape.to_dict(), bench["peaks"])
            return Roofline(cost, False, f"{MEASURED} by the bench ({_describe(cost.device)}), "
                                         f"{shape.name} shape")
    except (KeyError, TypeError, ValueError) as e:
        return Roofline(None, False, f"the recording's roofline provenance is unreadable ({type(e).__name__}: {e})")
    return Roofline(None, False, "the run names no device peaks and model shape (recorded before "
                                 "BatchScope measured them, or not a model run)")


def step_seconds(cols: Mapping[str, np.ndarray], simulated: bool) -> np.ndarray:
    """Each step's measured seconds (float64) from ``Reader.step_batches`` columns: wall
    ``end_ns - start_ns``, or for a simulated run its simulated ``token_time - clock``."""
    if simulated:
        return np.asarray(cols["token_time"], float) - np.asarray(cols["clock"], float)
    return (np.asarray(cols["end_ns"], np.int64) - np.asarray(cols["start_ns"], np.int64)) * 1e-9


def step_floors(roofline: Roofline, cols: Mapping[str, Any]) -> np.ndarray:
    """Each step's floor seconds (float64) from ``Reader.step_batches`` columns (or
    ``recordings.file.reader.batch_columns``). Raises ``ValueError`` without a cost model."""
    return roofline.floors_s(cols["num_tokens"], cols["num_computed_tokens"], cols["batch_start"],
                             cols["num_new_tokens"])


@dataclass(frozen=True)
class RunRoofline:
    """A run's roofline figures: ``floor_s`` (sum of its steps' floors), ``step_s`` (sum of their
    measured times), ``run_s`` (first step start to last step end, less pauses: what
    ``batchscope bench`` divides by; sim seconds for a simulated run) and ``per_step`` (the
    percentiles of floor / time over the steps that scheduled work; ``num_above_peak`` of them
    beat the floor, which means the peaks understate the device). ``roofline.cost`` None:
    no figures (``roofline.note`` says why), the numbers are 0."""

    roofline: Roofline
    num_steps: int = 0
    floor_s: float = 0.0
    step_s: float = 0.0
    run_s: float = 0.0
    per_step: Percentiles = Percentiles(None, None, None, 0)
    num_above_peak: int = 0

    @property
    def efficiency(self) -> float | None:
        """Floor / run time (``batchscope bench``'s figure), None without either."""
        ok = self.roofline.cost is not None and self.run_s > 0 and self.step_s > 0
        return self.floor_s / self.run_s if ok else None

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in ``RunSummary.format_table``'s two-column style."""
        name = f"{'roofline efficiency':<{width}}  "
        if self.efficiency is None:
            why = (self.roofline.note if self.roofline.cost is None else
                   "no step computed a token (every request was rejected)" if self.num_steps and not self.floor_s
                   else "no steps with a measured time")
            return [f"{name}n/a: {why}"]
        p = self.per_step
        unit = "sim s" if self.roofline.simulated else "s"
        pct = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
        return [f"{name}{self.efficiency:.2%} of the run's time (floor {number_text(self.floor_s)} {unit} / "
                f"{number_text(self.run_s)} {unit}); {self.floor_s / self.step_s:.2%} of the step time",
                f"{'  per step p50/p90/p99':<{width}}  {pct(p.p50)} / {pct(p.p90)} / {pct(p.p99)}  "
                f"(floor / step time, n={p.num_samples})",
                f"{'  peaks':<{width}}  {self.roofline.note}"] + ([
                f"{'  above 100%':<{width}}  {self.num_above_peak} steps ran faster than the floor: "
                f"{self._above_peak_cause()}; compare efficiencies only between runs with the same peaks"]
                if self.num_above_peak else [])

    def _above_peak_cause(self) -> str:
        if self.roofline.simulated:
            return ("the cost model's efficiency factors exceed 1 (a --sim-cost fit made against peaks "
                    "that understate the device it was fitted on)")
        return "the peaks measured at start understate this device (a loaded machine measures low)"


def summarize_roofline(reader, chunk: int = CHUNK_STEPS) -> RunRoofline:
    """:class:`RunRoofline` of the recording ``reader`` (a ``recordings.file.reader.Reader``), reading its
    steps ``chunk`` at a time. Raises :class:`recordings.errors.RecordingError` if the file cannot be read."""
    from recordings.metrics.wall_clock import wall_clock

    info = reader.run_info()
    roofline = roofline_of(info)
    if roofline.cost is None:
        return RunRoofline(roofline)
    floors, seconds, busy = [], [], []
    first_clock = last_time = None
    last = reader.latest_step()
    for start in range(0, last + 1, chunk):
        cols = reader.step_batches(start, min(start + chunk, last + 1))
        if not len(cols["step"]):
            continue
        floors.append(step_floors(roofline, cols))
        seconds.append(step_seconds(cols, roofline.simulated))
        busy.append(np.diff(cols["batch_start"]) > 0)
        first_clock = float(cols["clock"][0]) if first_clock is None else first_clock
        last_time = float(cols["token_time"][-1])
    if not floors:
        return RunRoofline(roofline)
    floor, sec, busy_steps = np.concatenate(floors), np.concatenate(seconds), np.concatenate(busy)
    if roofline.simulated:
        run_s = last_time - first_clock
    else:
        wall = wall_clock(reader)
        run_s = wall.span_s - wall.paused_s
    ok = busy_steps & (sec > 0)
    eff = floor[ok] / sec[ok]
    return RunRoofline(roofline, len(floor), float(floor.sum()), float(sec.sum()), float(run_s),
                       Percentiles.of(eff), int((eff > 1.0).sum()))
