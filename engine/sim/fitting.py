"""Fitting :class:`CostParams` to measured step times (numpy only).

Model: ``t_n = o + s n_n + sum_k max(F_nk / (P ef), B_nk / (W eb))`` for step n with ``n_n``
scheduled requests and operator k, with the ideal times ``f_nk = F_nk / P`` and ``m_nk = B_nk / W``
from the roofline (efficiency 1, no overhead). With ``r = ef / eb`` and ``c = 1 / eb`` this is
``t_n = o + s n_n + c z_n(r)``, ``z_n(r) = sum_k max(f_nk / r, m_nk)``: linear in (o, s, c) for a
fixed r. So we scan log r (then refine it by golden-section search) and, for each r, find the
non-negative (o, s, c) that minimise the absolute *relative* error ``sum_n |prediction_n - t_n| / t_n``
(iteratively reweighted least squares). Then ``eb = 1 / c`` and ``ef = r / c``. The L1 loss keeps
steps slowed down by other processes on the machine (they only ever add time) from dragging the fit,
as a squared loss would. Neither efficiency may exceed 1 (``c >= max(1, r)``): a step cannot run
faster than the peaks the cost model runs with. Where the data would push one past 1 (the
roofline term explains nothing the overheads do not, e.g. decode steps whose memory term, the
weights read once per step, is the same in every step, as the per-step overhead is), it is held at
1 and :func:`held_at_peak` names it.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, NamedTuple, Sequence

import numpy as np

from engine.sim.cost_model import CostModel, CostParams, Scheduled

Step = tuple[Sequence[Scheduled], int]   # (scheduled chunks, number of sampled rows)
MIN_FIT_STEPS = 16     # steps with a forward pass a fit needs: 4 parameters and noisy step times


class StepTerms(NamedTuple):
    """``ideal[steps, operators, 2]``: ideal compute and memory seconds; ``num_seqs[steps]``."""

    ideal: np.ndarray
    num_seqs: np.ndarray


def roofline_terms(model: CostModel, steps: Iterable[Step]) -> StepTerms:
    """The roofline terms of each step at efficiency 1 (what the fit scales)."""
    ideal = model.with_params(CostParams(0.0, 0.0, 1.0, 1.0))
    rows, seqs = [], []
    for sched, sampled in steps:
        sched = list(sched)
        rows.append([(op.compute_s, op.memory_s) for op in ideal.breakdown(sched, sampled).values()])
        seqs.append(len(sched))
    return StepTerms(np.asarray(rows, dtype=float).reshape(len(rows), -1, 2), np.asarray(seqs, dtype=float))


def predict(terms: StepTerms, params: CostParams) -> np.ndarray:
    """Step times in seconds for ``terms`` (from :func:`roofline_terms`) under ``params``."""
    ideal = terms.ideal
    t = np.maximum(ideal[:, :, 0] / params.flops_efficiency, ideal[:, :, 1] / params.bw_efficiency)
    return params.per_step_overhead_s + params.per_seq_overhead_s * terms.num_seqs + t.sum(axis=1)


def relative_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """``|predicted - measured| / measured`` per step."""
    return np.abs(np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured)


def _nnls(a: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative x minimising sum w (a x - b)^2 (few columns: the unconstrained solution, else
    the best of every active set)."""
    sw = np.sqrt(w)
    aw, bw = a * sw[:, None], b * sw
    x, *_ = np.linalg.lstsq(aw, bw, rcond=None)
    if np.all(x >= 0):
        return x
    best, best_x = float(np.sum(w * b ** 2)), np.zeros(a.shape[1])      # x = 0 is allowed too
    for k in range(1, a.shape[1]):
        for cols in itertools.combinations(range(a.shape[1]), k):
            sol, *_ = np.linalg.lstsq(aw[:, cols], bw, rcond=None)
            if np.all(sol >= 0):
                x = np.zeros(a.shape[1])
                x[list(cols)] = sol
                loss = float(np.sum(w * (a @ x - b) ** 2))
                if loss < best:
                    best, best_x = loss, x
    return best_x


def _l1_fit(a: np.ndarray, b: np.ndarray, iters: int = 12) -> tuple[float, np.ndarray]:
    """Non-negative x minimising sum |a x - b| by iteratively reweighted least squares; (loss, x)."""
    w = np.ones(len(a))
    for _ in range(iters):
        x = _nnls(a, w, b)
        w = 1.0 / np.maximum(np.abs(a @ x - b), 1e-3)
    return float(np.sum(np.abs(a @ x - b))), x


def fit_steps_problem(steps: Sequence[Step]) -> str | None:
    """Why ``steps`` (the steps of a recording that ran a forward pass) cannot be fitted, or None:
    fewer than :data:`MIN_FIT_STEPS`, no decode-only step (every scheduled chunk one token: what
    pins the memory efficiency), no step with a prefill chunk (more than one token: what pins
    the compute efficiency)."""
    if len(steps) < MIN_FIT_STEPS:
        return (f"too few steps to fit: {len(steps)} with a forward pass, at least {MIN_FIT_STEPS} needed "
                "(4 parameters from noisy step times); record a longer run")
    if not any(all(c.num_tokens == 1 for c in sched) for sched, _ in steps):
        return "no decode-only steps: nothing tells the memory efficiency from the overheads"
    if not any(any(c.num_tokens > 1 for c in sched) for sched, _ in steps):
        return "no steps with a prefill: nothing tells the compute efficiency from the overheads"
    return None


def held_at_peak(params: CostParams) -> list[str]:
    """The efficiencies a :func:`fit_cost_params` result holds at 1, the most it allows (the
    data pushed them higher: see the module doc)."""
    return [k for k in ("flops_efficiency", "bw_efficiency") if getattr(params, k) >= 1.0 - 1e-9]


def fit_cost_params(terms: StepTerms, times_s: Sequence[float], *, device: str | None = None,
                    peak_flops: float | None = None, mem_bandwidth: float | None = None) -> CostParams:
    """The overheads and two efficiencies that best explain ``times_s`` (seconds, one per step of
    ``terms``) in relative error, neither efficiency above 1 (:func:`held_at_peak` names one held
    there). ``device`` and the peaks are stored in the result for provenance.
    Raises ``ValueError`` with fewer than 4 steps or non-positive times."""
    t = np.asarray(times_s, dtype=float)
    if len(t) < 4 or len(t) != len(terms.ideal):
        raise ValueError(f"need at least 4 steps with a time each, got {len(t)} times for {len(terms.ideal)} steps")
    if not np.all(t > 0):
        raise ValueError("step times must be > 0 seconds")
    ideal = terms.ideal

    def solve(log_r: float) -> tuple[float, np.ndarray]:
        z = np.maximum(ideal[:, :, 0] / math.exp(log_r), ideal[:, :, 1]).sum(axis=1)
        floor = max(1.0, math.exp(log_r))       # c >= 1 and c >= r: eb = 1 / c <= 1, ef = r / c <= 1
        loss, (o, s, extra) = _l1_fit(np.stack([1.0 / t, terms.num_seqs / t, z / t], axis=1), 1.0 - floor * z / t)
        return loss, np.array([o, s, floor + extra])

    grid = np.linspace(math.log(1e-4), math.log(1e4), 81)
    k = int(np.argmin([solve(g)[0] for g in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(40):                                    # golden-section search on [lo, hi]
        a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
        if solve(a)[0] <= solve(b)[0]:
            hi = b
        else:
            lo = a
    log_r = min((lo + hi) / 2, float(grid[k]), key=lambda g: solve(g)[0])
    o, s, c = (float(v) for v in solve(log_r)[1])
    return CostParams(per_step_overhead_s=o, per_seq_overhead_s=s,
                      flops_efficiency=min(math.exp(log_r) / c, 1.0), bw_efficiency=min(1.0 / c, 1.0),
                      device=device, peak_flops=peak_flops, mem_bandwidth=mem_bandwidth)
