"""``batchscope fit REC.sqlite -o FIT.json``: fit the simulated executor's overheads (per step, per
scheduled request) and efficiency factors to a real recording's per-step forward times (``forward_ns``), print the fit and
its relative errors (on that recording and on any ``--check`` recordings), save it as JSON for
``--sim-cost``. See docs/sim.md."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from engine.plural import plural
from engine.run_info import RunInfo
from engine.sim.cost_model import CostModel, CostParams
from engine.sim.fitting import (MIN_FIT_STEPS, fit_cost_params, fit_steps_problem, held_at_peak, predict,
                                relative_errors, roofline_terms)
from engine.sim.hardware import CPU, DEVICES, DevicePeaks, get_device
from engine.sim.model_shapes import DTYPE_BYTES, get_model_shape
from recordings.metrics.roofline import recorded_peaks

_CHUNK = 2048   # steps read per call


def num_sampled_of(record) -> int:
    """Rows sampled in the step: the requests that got a token."""
    return len({t.request_id for t in record.new_tokens})


def measured_steps(reader) -> tuple[list, np.ndarray]:
    """``([(scheduled, num_sampled), ...], forward seconds)`` of every step that ran a forward
    pass without error."""
    steps, times = [], []
    last = reader.latest_step()
    for start in range(0, last + 1, _CHUNK):
        for rec in reader.records(start, min(start + _CHUNK, last + 1)):
            sched = rec.scheduled
            if sched and not rec.error and rec.forward_ns > 0:
                steps.append((tuple(sched), num_sampled_of(rec)))
                times.append(rec.forward_ns / 1e9)
    return steps, np.asarray(times)


def model_spec_of(info: RunInfo) -> str:
    """The recording's model as a sim model spec: its name if known, else its config folder."""
    model = info.model or {}
    name = str(model.get("name") or "default")
    try:
        get_model_shape(name)
        return name
    except ValueError:
        return str(model.get("path") or name)


def device_name_of(info: RunInfo) -> str:
    """``cpu``, or the GPU of ``engine.sim.hardware.DEVICES`` named in the recording's ``device_name``."""
    if str(info.device or "").startswith("cpu"):
        return "cpu"
    text = str(info.device_name or "").lower()
    for name in DEVICES:
        if name in text:
            return name
    raise ValueError(f"cannot tell the sim device of {info.device_name!r}; pass --sim-device")


def fit_peaks(info: RunInfo, sim_device: str | None) -> tuple[DevicePeaks, str]:
    """The device peaks the fit's efficiencies are relative to, and where they come from.

    On a CPU, the peaks the recording holds (``run_info.roofline``, measured at the start of
    the run, on the machine and under the load the steps ran with) when it has them, else this
    CPU's measured now (a recording made before BatchScope measured them; another machine or
    load than the run's). A GPU's are its datasheet's (``--sim-device`` or the recording's
    device), the peaks ``--executor sim`` runs with (only a CPU fit keeps its own peaks:
    ``CostModel.build``). Raises ``ValueError`` for an unknown device."""
    name = (sim_device or device_name_of(info)).strip().lower()
    if name != CPU:
        return get_device(name), f"{name}'s datasheet, as --executor sim uses them"
    recorded = recorded_peaks(info) if str(info.device or "").startswith(CPU) else None
    if recorded is not None:
        peaks = DevicePeaks(CPU, recorded.peak_flops, recorded.mem_bandwidth, recorded.memory_bytes,
                            "this CPU", recorded.host_bandwidth)
        return peaks, "the recording's, measured at the run's start"
    return get_device(CPU), ("this CPU's, measured now: the recording holds no peaks (made before BatchScope "
                             "measured them at start); a busy machine measures low")


def error_line(label: str, predicted: np.ndarray, measured: np.ndarray) -> str:
    """The relative error of ``predicted`` step times against ``measured`` ones (seconds), with a
    warning when there are too few steps to judge a fit by."""
    err = relative_errors(predicted, measured)
    few = (f" (only {plural(len(err), 'step')}: too few to judge the fit by, {MIN_FIT_STEPS} at least)"
           if len(err) < MIN_FIT_STEPS else "")
    return (f"{label}: {plural(len(err), 'step')}, relative error median {np.median(err):.1%}, "
            f"p90 {np.percentile(err, 90):.1%}; measured {measured.sum():.1f} s, predicted {predicted.sum():.1f} s{few}")


def held_note(held: list[str], terms, times: np.ndarray) -> str:
    """Why the fit holds the efficiencies ``held`` at 1: the roofline at the peaks already takes
    longer than most steps did (the peaks understate the device), or the steps cannot tell the
    roofline from the overheads (the best fit would make the roofline take no time at all)."""
    names = " and ".join(held)
    vanish = " and ".join({"flops_efficiency": "compute", "bw_efficiency": "memory"}[k] for k in held)
    floor = predict(terms, CostParams.floor())
    if np.median(floor / times) > 1.0:
        why = ("most steps ran faster than these peaks allow: the peaks understate the device (a busy "
               "machine measures low)")
    else:
        why = ("this recording's steps cannot tell the roofline from the overheads (the best fit would "
               f"make the {vanish} time vanish, an efficiency far above 1: impossible); a longer "
               "recording with varied batches pins it")
    return f"note: {names} held at 1, the most a device reaches: {why}"


def run_fit(args: argparse.Namespace) -> int:
    """Fit, print, save. Returns 0, or 1 on bad input (message on stderr)."""
    from recordings.file.open_reader import open_reader
    from recordings.errors import RecordingError

    out = Path(args.output)          # app.usage checked it: new, or --force, in a folder that exists
    try:
        reader = open_reader(args.recording)
        info = real_run_info(reader, args.recording)
        dtype = str(info.dtype or "float32")
        shape = get_model_shape(args.sim_model or model_spec_of(info))
        shape = shape.with_dtype(dtype) if dtype in DTYPE_BYTES else shape
        device, source = fit_peaks(info, args.sim_device)
        model = CostModel(shape, device, CostParams())
        steps, times = measured_steps(reader)
        problem = fit_steps_problem(steps)
        if problem is not None:
            raise ValueError(f"{args.recording}: {problem}")
        terms = roofline_terms(model, steps)
        params = fit_cost_params(terms, times, device=device.name, peak_flops=device.peak_flops,
                                 mem_bandwidth=device.mem_bandwidth)
        checks = []
        for path in args.check or ():
            other = open_reader(path)
            real_run_info(other, path)
            other_steps, other_times = measured_steps(other)
            checks.append((path, predict(roofline_terms(model, other_steps), params), other_times))
    except (RecordingError, ValueError, OSError) as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 1
    print(f"model {shape.name} ({shape.num_parameters / 1e6:,.0f}M parameters, {shape.bytes_per_param} bytes each) "
          f"on {device.name}: {device.peak_flops / 1e12:,.3f} TFLOP/s, {device.mem_bandwidth / 1e9:,.1f} GB/s")
    print(f"peaks: {source}")
    print(f"fit: per_step_overhead_s {params.per_step_overhead_s:.6f}, per_seq_overhead_s "      # fixed point:
          f"{params.per_seq_overhead_s:.6f}, flops_efficiency {params.flops_efficiency:.3f}, "    # no exponents
          f"bw_efficiency {params.bw_efficiency:.3f}")
    print(error_line(f"fitted on {args.recording}", predict(terms, params), times))
    for path, predicted, measured in checks:
        print(error_line(f"predicted {path}", predicted, measured))
    held = held_at_peak(params)
    if held:
        print(held_note(held, terms, times))
    try:
        params.save(out)
    except OSError as e:
        print(f"batchscope: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"saved {out}; use it with: batchscope run --trace TRACE --record OUT.sqlite --executor sim "
          f"--sim-model {model_spec_of(info) if args.sim_model is None else args.sim_model} "
          f"--sim-device {device.name} --sim-cost {out}")
    return 0


def real_run_info(reader, path) -> RunInfo:
    """The run info of the recording at ``path``; raises ``ValueError`` for a simulated one (its
    step times are the cost model's own, nothing to fit or check against)."""
    info = reader.run_info()
    if info.executor == "sim":
        raise ValueError(f"{path} is a simulated recording; fit and --check need real runs")
    return info
