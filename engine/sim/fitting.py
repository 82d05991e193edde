"""Fitting :class:`CostParams` to measured step times (numpy only).

Model: ``t_n = o + sum_k max(F_nk / (P ef), B_nk / (W eb))`` for step n and operator k, with the
ideal times ``f_nk = F_nk / P`` and ``m_nk = B_nk / W`` from the roofline (efficiency 1, no overhead).
With ``r = ef / eb`` and ``c = 1 / eb`` this is ``t_n = o + c z_n(r)``, ``z_n(r) = sum_k max(f_nk / r, m_nk)``:
linear in (o, c) for a fixed r. So we scan log r (then refine it by golden-section search) and, for
each r, solve the non-negative weighted least squares in (o, c) that minimises the squared
*relative* error ``sum_n ((o + c z_n - t_n) / t_n)^2``. Then ``eb = 1 / c`` and ``ef = r / c``.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from engine.sim.cost_model import CostModel, CostParams, Scheduled

Step = tuple[Sequence[Scheduled], int]   # (scheduled chunks, number of sampled rows)


def roofline_terms(model: CostModel, steps: Iterable[Step]) -> np.ndarray:
    """Array ``[steps, operators, 2]`` of ideal compute and memory seconds (efficiency 1)."""
    ideal = model.with_params(CostParams(0.0, 1.0, 1.0))
    rows = [[(op.compute_s, op.memory_s) for op in ideal.breakdown(sched, sampled).values()]
            for sched, sampled in steps]
    return np.asarray(rows, dtype=float).reshape(len(rows), -1, 2)


def predict(terms: np.ndarray, params: CostParams) -> np.ndarray:
    """Step times in seconds for ``terms`` (from :func:`roofline_terms`) under ``params``."""
    t = np.maximum(terms[:, :, 0] / params.flops_efficiency, terms[:, :, 1] / params.bw_efficiency)
    return params.per_step_overhead_s + t.sum(axis=1)


def relative_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """``|predicted - measured| / measured`` per step."""
    return np.abs(np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured)


def _solve(z: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """Non-negative (o, c) minimising sum(((o + c z - t) / t)^2); returns (loss, o, c)."""
    a = np.stack([1.0 / t, z / t], axis=1)          # rows of the weighted system a @ (o, c) = 1
    (o, c), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if o < 0 or c <= 0:
        cands = [(0.0, max(float(a[:, 1].sum() / np.dot(a[:, 1], a[:, 1])), 1e-12)),   # o = 0
                 (float(a[:, 0].sum() / np.dot(a[:, 0], a[:, 0])), 1e-12)]             # c -> 0
        o, c = min(cands, key=lambda oc: float(np.sum((a @ np.array(oc) - 1.0) ** 2)))
    loss = float(np.sum((a @ np.array([o, c]) - 1.0) ** 2))
    return loss, float(o), float(c)


def fit_cost_params(terms: np.ndarray, times_s: Sequence[float], *, device: str | None = None,
                    peak_flops: float | None = None, mem_bandwidth: float | None = None) -> CostParams:
    """The overhead and two efficiencies that best explain ``times_s`` (seconds, one per row of
    ``terms``) in relative error. ``device`` and the peaks are stored in the result for provenance.
    Raises ``ValueError`` with fewer than 3 steps or non-positive times."""
    t = np.asarray(times_s, dtype=float)
    if len(t) < 3 or len(t) != len(terms):
        raise ValueError(f"need at least 3 steps with a time each, got {len(t)} times for {len(terms)} steps")
    if not np.all(t > 0):
        raise ValueError("step times must be > 0 seconds")

    def loss_at(log_r: float) -> tuple[float, float, float]:
        r = math.exp(log_r)
        z = np.maximum(terms[:, :, 0] / r, terms[:, :, 1]).sum(axis=1)
        return _solve(z, t)

    grid = np.linspace(math.log(1e-4), math.log(1e4), 161)
    losses = [loss_at(g)[0] for g in grid]
    k = int(np.argmin(losses))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(60):                                    # golden-section search on [lo, hi]
        a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
        if loss_at(a)[0] <= loss_at(b)[0]:
            hi = b
        else:
            lo = a
    log_r = min((lo + hi) / 2, float(grid[k]), key=lambda g: loss_at(g)[0])
    _, o, c = loss_at(log_r)
    r = math.exp(log_r)
    return CostParams(per_step_overhead_s=o, flops_efficiency=r / c, bw_efficiency=1.0 / c,
                      device=device, peak_flops=peak_flops, mem_bandwidth=mem_bandwidth)
