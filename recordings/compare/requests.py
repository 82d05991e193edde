"""Per-request latency parts of one run and their changes between two runs of one workload.

A request's end-to-end latency (E2E, vLLM's ``e2e_request_latency``: arrival to its last token,
on the run's clock) is split into four parts that add up to it exactly:

- ``queue``: arrival to its first admission (``request_queue_time``: the start of the first step
  that scheduled it);
- ``preempted``: time spent preempted (from the end of the step that preempted it to the start of
  the step that admitted it again), summed;
- ``prefill``: first admission to its first token, less the preempted time in between (prefill
  chunks, and the steps between them);
- ``decode``: first to last token, less the preempted time in between (decode steps and any
  recompute after a preemption).

The delta of two runs' E2E for one request is the sum of the deltas of its parts; its *cause* is
the part that moved most in the direction of the delta, shown with the evidence the recording
holds (prefill steps, preemptions and the KV tokens they dropped, mean batch size and mean decode
step time over the steps it decoded in).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recordings.metrics.stats import STEPS_PER_QUERY
from recordings.file.reader import Reader
from recordings.numbers import number_text
from engine.vocab import RequestStatus

PARTS = ("queue", "preempted", "prefill", "decode")
CAUSES = {"queue": "queueing", "preempted": "preemption", "prefill": "prefill chunking",
          "decode": "decode (batch size / step time)"}
SERVED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH)      # a request with a whole latency to compare
UNCHANGED = 0.005      # an E2E change within 0.5% of run A's is "unchanged" (no cause named)


@dataclass(frozen=True)
class RequestTimes:
    """Per-request columns of one run, aligned by arrival order (``seq``). Times are on the
    run's clock; float columns are NaN for a request that was not served to the end
    (rejected, aborted, unfinished). ``e2e = queue + preempted + prefill + decode``.
    ``num_dropped_tokens``: KV tokens its recompute preemptions dropped (``PreemptionInfo.tokens``).
    ``mean_batch_size``: mean requests scheduled in the steps it decoded in; ``mean_decode_step``:
    mean duration of those steps (NaN without a decode step)."""

    request_ids: tuple[str, ...]
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray
    e2e: np.ndarray
    parts: dict[str, np.ndarray]
    num_prefill_steps: np.ndarray
    num_preemptions: np.ndarray
    num_dropped_tokens: np.ndarray
    mean_batch_size: np.ndarray
    mean_decode_step: np.ndarray

    def index(self) -> dict[str, int]:
        return {rid: i for i, rid in enumerate(self.request_ids)}


def _scan_batches(reader: Reader, n: int):
    """Step columns (ids, clock, token_time, requests scheduled) and, per request (``seq`` < n),
    its prefill steps and its decode steps' count, summed batch size and summed duration."""
    steps, clock, token_time, nsched = [], [], [], []
    prefill = np.zeros(n, np.int64)
    dec_n, dec_batch, dec_time = np.zeros(n, np.int64), np.zeros(n), np.zeros(n)
    (top,), = reader.execute("SELECT max(step) FROM steps")
    for lo in range(0, (top if top is not None else -1) + 1, STEPS_PER_QUERY):
        seqs, is_pre, batch, dur = [], [], [], []
        for (step, c, t, k), b in reader.batches(lo, lo + STEPS_PER_QUERY,
                                                 ("step", "clock", "token_time", "num_scheduled_requests")):
            steps.append(step), clock.append(c), token_time.append(t), nsched.append(k)
            seqs.append(b.seq), is_pre.append(b.is_prefill)
            batch.append(np.full(len(b.seq), k, np.float64)), dur.append(np.full(len(b.seq), t - c))
        if not seqs:
            continue
        s, f, bsz, d = (np.concatenate(x) for x in (seqs, is_pre, batch, dur))
        prefill += np.bincount(s[f], minlength=n)[:n]
        dec = ~f
        dec_n += np.bincount(s[dec], minlength=n)[:n]
        dec_batch += np.bincount(s[dec], bsz[dec], minlength=n)[:n]
        dec_time += np.bincount(s[dec], d[dec], minlength=n)[:n]
    cols = tuple(np.asarray(x, float) for x in (clock, token_time, nsched))
    return np.asarray(steps, np.int64), cols, prefill, (dec_n, dec_batch, dec_time)


def request_times(reader: Reader) -> RequestTimes:
    """The per-request latency parts and their evidence for the run in ``reader`` (see the
    module doc). Cost: one pass over the steps' batch arrays, ``STEPS_PER_QUERY`` steps a query."""
    rows = reader.execute("SELECT seq, request_id, num_prompt_tokens, arrival_time, status, ttft, mean_itl, "
                          "coalesce(num_output_tokens, 0) FROM requests ORDER BY seq")
    n = (rows[-1][0] + 1) if rows else 0
    ids = [""] * n
    prompt, out = np.zeros(n, np.int64), np.zeros(n, np.int64)
    arrival, first_tok, last_tok = (np.full(n, np.nan) for _ in range(3))
    for seq, rid, p, arr, status, ttft, itl, nout in rows:
        ids[seq], prompt[seq], out[seq], arrival[seq] = str(rid), p, nout, arr
        if status in SERVED and ttft is not None and nout >= 1:
            first_tok[seq] = arr + ttft
            last_tok[seq] = first_tok[seq] + (itl or 0.0) * (nout - 1)
    steps, (clock, token_time, nsched), num_prefill, (dec_n, dec_batch, dec_time) = _scan_batches(reader, n)
    last_row = max(len(steps) - 1, 0)
    at = lambda step: min(int(np.searchsorted(steps, step)), last_row)  # noqa: E731  (row of a step id)
    first_sched = np.full(n, np.nan)
    for seq, step in reader.execute("SELECT seq, min(step) FROM events WHERE kind = 'scheduled' GROUP BY seq"):
        if 0 <= seq < n:
            first_sched[seq] = clock[at(step)]
    pre_before, pre_after = np.zeros(n), np.zeros(n)
    num_pre, dropped = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for seq, step, tokens, back in reader.execute(
            "SELECT e.seq, e.step, CASE WHEN json_valid(e.detail) THEN json_extract(e.detail, '$.tokens') END, "
            "(SELECT min(s.step) FROM events s WHERE s.seq = e.seq AND s.kind = 'scheduled' AND s.step > e.step) "
            "FROM events e WHERE e.kind = 'preempted'"):
        if not 0 <= seq < n:
            continue
        num_pre[seq] += 1
        dropped[seq] += int(tokens or 0)
        if back is None:
            continue
        start, end = token_time[at(step)], clock[at(back)]
        if start < first_tok[seq]:
            pre_before[seq] += end - start
        else:
            pre_after[seq] += end - start
    served = np.isfinite(last_tok) & np.isfinite(first_sched)
    nan = lambda x: np.where(served, x, np.nan)  # noqa: E731
    parts = {"queue": nan(first_sched - arrival), "preempted": nan(pre_before + pre_after),
             "prefill": nan(first_tok - first_sched - pre_before),
             "decode": nan(last_tok - first_tok - pre_after)}
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_batch = np.where(dec_n > 0, dec_batch / np.maximum(dec_n, 1), np.nan)
        mean_step = np.where(dec_n > 0, dec_time / np.maximum(dec_n, 1), np.nan)
    return RequestTimes(tuple(ids), prompt, out, nan(last_tok - arrival), parts, num_prefill, num_pre,
                        dropped, mean_batch, mean_step)


@dataclass(frozen=True)
class RequestDelta:
    """How one request's E2E latency changed from run A to run B (``delta`` = B - A, on the
    clock), split into the deltas of its parts (``parts``: queue, preempted, prefill, decode; they
    sum to ``delta``), its ``cause`` (see :data:`CAUSES`) and the ``evidence`` behind it."""

    request_id: str
    num_prompt_tokens: int
    num_output_tokens: int
    e2e_a: float
    e2e_b: float
    parts: dict[str, float]
    cause: str
    evidence: str

    @property
    def delta(self) -> float:
        return self.e2e_b - self.e2e_a


def _evidence(part: str, a: RequestTimes, i: int, b: RequestTimes, j: int, unit: str) -> str:
    """The recorded facts behind a cause, A → B."""
    if part == "queue":
        return (f"first scheduled {number_text(a.parts['queue'][i])} → "
                f"{number_text(b.parts['queue'][j])} {unit} after arrival")
    if part == "preempted":
        return (f"preemptions {a.num_preemptions[i]} → {b.num_preemptions[j]}, KV tokens dropped "
                f"{a.num_dropped_tokens[i]} → {b.num_dropped_tokens[j]}")
    if part == "prefill":
        return f"prefill steps {a.num_prefill_steps[i]} → {b.num_prefill_steps[j]}"
    ms = 1000.0 if unit == "s" else 1.0
    step_unit = "ms" if unit == "s" else unit
    return (f"batch {a.mean_batch_size[i]:.1f} → {b.mean_batch_size[j]:.1f} requests, decode step "
            f"{number_text(a.mean_decode_step[i] * ms)} → {number_text(b.mean_decode_step[j] * ms)} {step_unit}")


def request_deltas(a: RequestTimes, b: RequestTimes, time_unit: str = "s") -> list[RequestDelta]:
    """A :class:`RequestDelta` per request served to the end in both runs (matched by request
    id), the most slowed-down first."""
    where_b = b.index()
    out = []
    for i, rid in enumerate(a.request_ids):
        j = where_b.get(rid)
        if j is None or not (np.isfinite(a.e2e[i]) and np.isfinite(b.e2e[j])):
            continue
        parts = {p: float(b.parts[p][j] - a.parts[p][i]) for p in PARTS}
        sign = 1.0 if b.e2e[j] >= a.e2e[i] else -1.0
        top = max(PARTS, key=lambda p: sign * parts[p])
        if abs(b.e2e[j] - a.e2e[i]) <= UNCHANGED * a.e2e[i]:
            cause, evidence = "unchanged", ""
        else:
            cause, evidence = CAUSES[top], _evidence(top, a, i, b, j, time_unit)
        out.append(RequestDelta(rid, int(a.num_prompt_tokens[i]), int(a.num_output_tokens[i]), float(a.e2e[i]),
                                float(b.e2e[j]), parts, cause, evidence))
    out.sort(key=lambda d: d.delta, reverse=True)
    return out
