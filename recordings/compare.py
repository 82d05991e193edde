"""Comparing recorded runs of one workload: headline metrics and their ratios, a workload
fingerprint that refuses to compare different workloads, and per-request latency deltas with
their causes.

Headline metrics come from :mod:`recordings.metrics` (never recomputed here). A request's
end-to-end latency (E2E, vLLM's ``e2e_request_latency``: arrival to its last token, on the run's
clock) is split into four parts that add up to it exactly:

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
holds (prefill steps, preemptions and the KV tokens they dropped, mean batch size and mean decode step
time over the steps it decoded in).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recordings.errors import RecordingError
from recordings.fairness import Bucket, bucket_edges, jain_index, latency_by_prompt_bucket
from recordings.metrics import STEPS_PER_QUERY, summarize, summarize_batching
from recordings.reader import Reader

PARTS = ("queue", "preempted", "prefill", "decode")
CAUSES = {"queue": "queueing", "preempted": "preemption", "prefill": "prefill chunking",
          "decode": "decode (batch size / step time)"}
SERVED = ("FINISHED_STOPPED", "FINISHED_LENGTH")      # a request with a whole latency to compare
UNCHANGED = 0.005      # an E2E change within 0.5% of run A's is "unchanged" (no cause named)


class WorkloadMismatch(ValueError):
    """Two recordings hold different workloads (the message names the first difference)."""


# --- headline --------------------------------------------------------------------------------
# (attribute, label, higher is better, format)
HEADLINE_FIELDS = (
    ("output_tokens_per_s", "output tokens/s", True, ",.1f"),
    ("requests_per_s", "requests/s", True, ",.2f"),
    ("ttft_p50", "TTFT p50", False, ".4g"),
    ("ttft_p99", "TTFT p99", False, ".4g"),
    ("tpot_p50", "TPOT p50", False, ".4g"),
    ("tpot_p99", "TPOT p99", False, ".4g"),
    ("slot_occupancy", "slot occupancy %", True, ".1f"),
)


@dataclass(frozen=True)
class Headline:
    """One run's headline numbers (``None`` where the run has no sample). Latencies are in
    ``time_unit`` (``s``, or ``steps`` under the virtual clock); throughputs are per second of
    the run's duration (simulated seconds for a simulated run); ``slot_occupancy`` in percent
    (running / ``max_num_seqs``, mean over steps)."""

    name: str
    path: str
    clock: str
    time_unit: str
    simulated: bool
    num_requests: int
    num_served: int
    duration_s: float
    output_tokens_per_s: float | None
    requests_per_s: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    slot_occupancy: float | None

    def value(self, attr: str) -> float | None:
        return getattr(self, attr)


def headline(reader: Reader, name: str) -> Headline:
    """The :class:`Headline` of the run in ``reader`` (from ``recordings.metrics``). Raises
    :class:`recordings.RecordingError` for an unreadable recording."""
    s, b = summarize(reader), summarize_batching(reader)
    served = sum(n for reason, n in s.num_finished_by_reason.items() if reason in ("stop", "length"))
    dur = s.wall_duration_s
    return Headline(
        name=name, path=str(reader.path), clock=s.clock, time_unit=s.time_unit,
        simulated=bool(reader.run_info().get("simulated")), num_requests=s.num_requests,
        num_served=served, duration_s=dur, output_tokens_per_s=s.output_tokens_per_s,
        requests_per_s=served / dur if dur > 0 else None, ttft_p50=s.ttft.p50, ttft_p99=s.ttft.p99,
        tpot_p50=b.tpot.p50, tpot_p99=b.tpot.p99,
        slot_occupancy=None if b.slot_occupancy is None else 100.0 * b.slot_occupancy)


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, None when either is missing or ``base`` is 0."""
    if value is None or base is None or base == 0:
        return None
    return value / base


# --- workload fingerprint --------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadFingerprint:
    """What a workload is, as recorded: request ids in arrival order, arrivals relative to the
    first one (float64 [n], on the run's clock), prompt lengths and requested output lengths
    (``max_tokens``; int64 [n]), and the run's clock. ``digest``: sha256 over all of it
    (arrivals rounded to 1 ms / 0.001 step)."""

    clock: str
    request_ids: tuple[str, ...]
    arrival: np.ndarray
    num_prompt_tokens: np.ndarray
    max_tokens: np.ndarray

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.clock.encode())
        h.update("\0".join(self.request_ids).encode())
        h.update(np.round(self.arrival, 3).tobytes())
        h.update(self.num_prompt_tokens.tobytes())
        h.update(self.max_tokens.tobytes())
        return h.hexdigest()[:16]


def workload_fingerprint(reader: Reader) -> WorkloadFingerprint:
    """The :class:`WorkloadFingerprint` of the requests recorded in ``reader``."""
    rows = reader.execute("SELECT request_id, arrival_time, num_prompt_tokens, max_tokens FROM requests "
                          "ORDER BY seq")
    arrival = np.array([r[1] for r in rows], np.float64)
    clock = str(reader.run_info().get("config", {}).get("clock", "virtual"))
    return WorkloadFingerprint(clock, tuple(str(r[0]) for r in rows),
                               arrival - (arrival.min() if len(arrival) else 0.0),
                               np.array([r[2] for r in rows], np.int64), np.array([r[3] for r in rows], np.int64))


def check_same_workload(a: WorkloadFingerprint, b: WorkloadFingerprint, name_a: str = "A",
                        name_b: str = "B", arrival_tolerance: float = 1e-3) -> None:
    """Raise :class:`WorkloadMismatch` naming the first difference between two recordings'
    workloads: their clock, number of requests, ids, arrivals (beyond ``arrival_tolerance`` on
    the clock: seconds or steps), prompt lengths or ``max_tokens``."""
    def fail(what: str) -> None:
        raise WorkloadMismatch(f"{name_a} and {name_b} are not runs of one workload: {what}")

    if a.clock != b.clock:
        fail(f"clock {a.clock} vs {b.clock} (times on different clocks do not compare)")
    if len(a.request_ids) != len(b.request_ids):
        fail(f"{len(a.request_ids)} vs {len(b.request_ids)} requests")
    for what, x, y in (("request id", np.array(a.request_ids, object), np.array(b.request_ids, object)),
                       ("prompt length", a.num_prompt_tokens, b.num_prompt_tokens),
                       ("max_tokens", a.max_tokens, b.max_tokens)):
        bad = np.flatnonzero(x != y)
        if bad.size:
            i = int(bad[0])
            fail(f"{what} of request #{i} ({a.request_ids[i]}): {x[i]} vs {y[i]} ({bad.size} requests differ)")
    bad = np.flatnonzero(np.abs(a.arrival - b.arrival) > arrival_tolerance)
    if bad.size:
        i = int(bad[0])
        fail(f"arrival of {a.request_ids[i]}: {a.arrival[i]:.6g} vs {b.arrival[i]:.6g} after the first "
             f"request ({bad.size} requests differ by more than {arrival_tolerance:g})")


# --- per-request latency parts ---------------------------------------------------------------
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
        for step, c, t, k, seq_json, pre_json in reader.execute(
                "SELECT step, clock, token_time, num_scheduled_requests, batch_seq_json, batch_prefill_json "
                "FROM steps WHERE step >= ? AND step < ? ORDER BY step", (lo, lo + STEPS_PER_QUERY)):
            steps.append(step), clock.append(c), token_time.append(t), nsched.append(k)
            s = json.loads(seq_json) if seq_json else []
            flags = np.zeros(len(s), bool)
            for i, _num in json.loads(pre_json or "[]"):
                flags[i] = True
            seqs.append(np.asarray(s, np.int64)), is_pre.append(flags)
            batch.append(np.full(len(s), k, np.float64)), dur.append(np.full(len(s), t - c))
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
        return f"first scheduled {a.parts['queue'][i]:.3g} → {b.parts['queue'][j]:.3g} {unit} after arrival"
    if part == "preempted":
        return (f"preemptions {a.num_preemptions[i]} → {b.num_preemptions[j]}, KV tokens dropped "
                f"{a.num_dropped_tokens[i]} → {b.num_dropped_tokens[j]}")
    if part == "prefill":
        return f"prefill steps {a.num_prefill_steps[i]} → {b.num_prefill_steps[j]}"
    ms = 1000.0 if unit == "s" else 1.0
    step_unit = "ms" if unit == "s" else unit
    fmt = lambda v: f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"  # noqa: E731  (no 1.18e+03)
    return (f"batch {a.mean_batch_size[i]:.1f} → {b.mean_batch_size[j]:.1f} requests, decode step "
            f"{fmt(a.mean_decode_step[i] * ms)} → {fmt(b.mean_decode_step[j] * ms)} {step_unit}")


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


# --- fairness --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fairness:
    """Jain's index of normalised latency (E2E / output tokens) over the served requests, and
    latency per prompt-length bucket (see :mod:`recordings.fairness`)."""

    jain: float | None
    buckets: list[Bucket]


def fairness(t: RequestTimes, edges: list[int]) -> Fairness:
    """:class:`Fairness` of one run's :class:`RequestTimes`, bucketed at ``edges``."""
    ok = np.isfinite(t.e2e) & (t.num_output_tokens > 0)
    norm = t.e2e[ok] / t.num_output_tokens[ok]
    return Fairness(jain_index(norm), latency_by_prompt_bucket(t.num_prompt_tokens, t.e2e, t.num_output_tokens,
                                                               edges))


# --- a whole comparison ----------------------------------------------------------------------
@dataclass
class Comparison:
    """Runs of one workload compared with the first: their headlines, per-request times,
    fairness, and the per-request deltas of each later run against the first (``deltas[k]`` is
    run k+1 vs run 0)."""

    headlines: list[Headline]
    times: list[RequestTimes]
    fairness: list[Fairness]
    deltas: list[list[RequestDelta]]
    digest: str
    bucket_edges: list[int] = field(default_factory=list)

    @property
    def time_unit(self) -> str:
        return self.headlines[0].time_unit

    def ratios(self, k: int) -> dict[str, float | None]:
        """Run ``k``'s headline values over the first run's, per :data:`HEADLINE_FIELDS` key."""
        return {attr: ratio(self.headlines[k].value(attr), self.headlines[0].value(attr))
                for attr, *_ in HEADLINE_FIELDS}


def run_name(path: str | Path, reader: Reader) -> str:
    """A short name for a run: the recording's file name, and its policy unless the name has it."""
    policy = str(reader.run_info().get("config", {}).get("policy", "?"))
    stem = Path(path).stem
    return stem if policy in stem else f"{stem} ({policy})"


def compare_recordings(paths: list[str | Path], names: list[str] | None = None) -> Comparison:
    """Compare the recordings at ``paths`` (two or more, one workload) with the first one.
    Raises :class:`WorkloadMismatch` for recordings of different workloads,
    :class:`recordings.RecordingError` for a file that does not read or is of schema 1,
    ``ValueError`` for fewer than two paths."""
    if len(paths) < 2:
        raise ValueError(f"comparing needs two or more recordings, got {len(paths)}")
    readers = [Reader(p) for p in paths]
    try:
        for r in readers:
            if r.execute("PRAGMA user_version")[0][0] < 2:
                raise RecordingError(f"{r.path}: a schema-1 recording (BatchScope 0.1) has no per-step batch "
                                     "arrays; compare needs schema 2 or later (record the run again)")
        names = names or [run_name(p, r) for p, r in zip(paths, readers)]
        prints = [workload_fingerprint(r) for r in readers]
        for k in range(1, len(readers)):
            check_same_workload(prints[0], prints[k], str(paths[0]), str(paths[k]))
        heads = [headline(r, n) for r, n in zip(readers, names)]
        times = [request_times(r) for r in readers]
    finally:
        for r in readers:
            r.close()
    edges = bucket_edges(times[0].num_prompt_tokens)
    return Comparison(heads, times, [fairness(t, edges) for t in times],
                      [request_deltas(times[0], t, heads[0].time_unit) for t in times[1:]],
                      prints[0].digest, edges)
