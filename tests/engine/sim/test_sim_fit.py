"""Fitting the cost parameters: recovers known parameters from steps generated with them."""
from __future__ import annotations

import random

import numpy as np
import pytest

from engine.outputs import ScheduledRequest
from engine.sim.cost_model import CostModel, CostParams
from engine.sim.fitting import (MIN_FIT_STEPS, fit_cost_params, fit_steps_problem, held_at_peak, predict,
                                relative_errors, roofline_terms)
from engine.sim.hardware import DEVICES, DevicePeaks
from engine.sim.model_shapes import get_model_shape


def _random_steps(n: int, seed: int = 0) -> list:
    """A mix of decode-only batches, big prefills and mixed steps, as a scheduler makes them."""
    rng = random.Random(seed)
    steps = []
    for k in range(n):
        sched = [ScheduledRequest(f"d{i}", i, 1, rng.randint(10, 3000), False, ())
                 for i in range(rng.randint(1, 128))]
        if k % 3 == 0:
            sched.append(ScheduledRequest("p", 200, rng.randint(64, 4096), rng.choice([0, 512]), True, ()))
        steps.append((sched, len(sched) - (k % 6 == 0)))
    return steps


@pytest.mark.parametrize("truth", [CostParams(0.003, 2e-5, 0.55, 0.75), CostParams(0.0005, 1e-4, 0.3, 0.9)])
def test_fit_recovers_known_parameters(truth):
    model = CostModel(get_model_shape("llama-3.1-8b"), DEVICES["h100"], truth)
    steps = _random_steps(300)
    rng = np.random.default_rng(1)
    times = np.array([model.step_time(s, k) for s, k in steps]) * rng.normal(1.0, 0.01, len(steps))
    terms = roofline_terms(model, steps)
    fit = fit_cost_params(terms, times, device="h100")
    # overheads to within 2% of the median step time (they are small next to most steps)
    tol = 0.02 * float(np.median(times))
    assert fit.per_step_overhead_s == pytest.approx(truth.per_step_overhead_s, abs=tol)
    assert fit.per_seq_overhead_s * 64 == pytest.approx(truth.per_seq_overhead_s * 64, abs=tol)
    assert fit.flops_efficiency == pytest.approx(truth.flops_efficiency, rel=0.03)
    assert fit.bw_efficiency == pytest.approx(truth.bw_efficiency, rel=0.03)
    assert fit.device == "h100"
    assert np.median(relative_errors(predict(terms, fit), times)) < 0.02


def test_predict_matches_the_cost_model():
    params = CostParams(0.001, 5e-5, 0.4, 0.6)
    model = CostModel(get_model_shape("qwen2.5-7b"), DEVICES["l40s"], params)
    steps = _random_steps(20, seed=5)
    expected = [model.step_time(s, k) for s, k in steps]
    assert predict(roofline_terms(model, steps), params) == pytest.approx(expected, rel=1e-9)


def test_too_few_steps_or_bad_times():
    model = CostModel(get_model_shape("default"), DEVICES["h100"])
    terms = roofline_terms(model, _random_steps(4))
    with pytest.raises(ValueError, match="at least 4"):
        fit_cost_params(terms, [0.1, 0.1])
    with pytest.raises(ValueError, match="> 0"):
        fit_cost_params(terms, [0.1, 0.0, 0.1, 0.1])


def test_an_efficiency_the_steps_cannot_pin_is_held_at_one_not_printed_impossible():
    """Decode steps of 1-3 requests whose time is all per-request overhead (a small model on a
    CPU): the memory term, the weights read once per step, is the same in every step, so the
    unconstrained best fit makes it vanish (bw_efficiency ~1e3 on a live SmolLM2 recording)."""
    cpu = DevicePeaks("cpu", 0.124e12, 40.8e9, 1 << 34, "the peaks of a live run's recording")
    model = CostModel(get_model_shape("smollm2-135m").with_dtype("float32"), cpu)
    rng = random.Random(2)
    steps = [([ScheduledRequest(f"d{i}", i, 1, 40 + k, False, ()) for i in range(1 + k % 3)], 1 + k % 3)
             for k in range(40)]
    steps += [([ScheduledRequest("p", 0, 64, 0, True, ())], 1)] * 4
    times = [0.035 * len(s) * rng.uniform(0.95, 1.05) for s, _ in steps]
    fit = fit_cost_params(roofline_terms(model, steps), times)
    assert 0 < fit.flops_efficiency <= 1 and 0 < fit.bw_efficiency <= 1
    assert "bw_efficiency" in held_at_peak(fit)
    assert held_at_peak(CostParams(0.001, 1e-5, 0.5, 0.8)) == []


def test_steps_that_cannot_be_fitted_are_named():
    decode = ([ScheduledRequest("d", 0, 1, 10, False, ())], 1)
    prefill = ([ScheduledRequest("p", 1, 32, 0, True, ())], 1)
    assert "too few steps to fit: 4 with a forward pass" in fit_steps_problem([decode, prefill] * 2)
    assert fit_steps_problem([prefill] * MIN_FIT_STEPS).startswith("no decode-only steps")
    assert fit_steps_problem([decode] * MIN_FIT_STEPS).startswith("no steps with a prefill")
    assert fit_steps_problem([decode, prefill] * MIN_FIT_STEPS) is None
