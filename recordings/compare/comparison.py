"""Comparing recorded runs of one workload: headline metrics and their ratios, fairness, and
the per-request latency deltas with their causes (:mod:`recordings.compare.requests`), after
checking that the recordings hold one workload (:mod:`recordings.compare.fingerprint`).

Headline metrics come from :mod:`recordings.metrics.run_metrics` (never recomputed here).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recordings.compare.fingerprint import check_same_workload, workload_fingerprint
from recordings.compare.requests import RequestDelta, RequestTimes, request_deltas, request_times
from recordings.errors import RecordingError
from recordings.compare.fairness import Bucket, bucket_edges, jain_index, latency_by_prompt_bucket
from recordings.metrics.admission import summarize_admission
from recordings.metrics.prefix_hits import summarize_prefix_hits
from recordings.metrics.run_metrics import summarize, summarize_batching
from recordings.metrics.serving import Slo, summarize_serving
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader


# --- headline --------------------------------------------------------------------------------
# (attribute, label, higher is better, format: None = recordings.numbers.number_text)
HEADLINE_FIELDS = (
    ("output_tokens_per_s", "output tokens/s", True, ",.1f"),
    ("requests_per_s", "requests/s", True, ",.2f"),
    ("ttft_p50", "TTFT p50", False, None),
    ("ttft_p99", "TTFT p99", False, None),
    ("tpot_p50", "TPOT p50", False, None),
    ("tpot_p99", "TPOT p99", False, None),
    ("slot_occupancy", "slot occupancy %", True, ".1f"),
    ("goodput_per_s", "goodput req/s (SLO met)", True, ",.2f"),
    ("num_preemptions", "preemptions", False, ",.0f"),
    ("recomputed_pct", "recomputed % of compute", False, ".1f"),
    ("prefix_shared_pct", "prefix hits from others %", True, ".1f"),
    ("prefix_own_pct", "prefix hits own KV again %", True, ".1f"),
    ("prefill_saved", "prefill tokens saved", True, ",.0f"),
)


@dataclass(frozen=True)
class Headline:
    """One run's headline numbers (``None`` where the run has no sample). Latencies are in
    ``time_unit`` (``s``, or ``steps`` under the virtual clock); throughputs are per second of
    the run's duration (simulated seconds for a simulated run); ``slot_occupancy`` in percent
    (running / ``max_num_seqs``, mean over steps). ``num_rejected``: requests that finished with
    an error (rejected at admission, e.g. over ``max_model_len``, or failed in a step);
    ``num_admission_rejected`` of them turned away by admission control (``engine.sched.admission``).
    ``goodput_per_s``: requests meeting the comparison's SLO per second (None without one, or
    under the virtual clock). Thrash: ``num_preemptions`` and ``recomputed_pct``, tokens computed
    again after preemptions in percent of all computed tokens. With prefix caching (None
    otherwise): hits on other requests' KV (``prefix_shared_pct``) and on the request's own KV
    after a preemption (``prefix_own_pct``) in percent of the prompt tokens, and
    ``prefill_saved``, the prompt tokens not computed."""

    name: str
    path: str
    clock: str
    time_unit: str
    simulated: bool
    num_requests: int
    num_served: int
    num_rejected: int
    duration_s: float
    output_tokens_per_s: float | None
    requests_per_s: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    slot_occupancy: float | None
    goodput_per_s: float | None = None
    num_preemptions: int = 0
    recomputed_pct: float | None = None
    prefix_shared_pct: float | None = None
    prefix_own_pct: float | None = None
    prefill_saved: int | None = None
    num_admission_rejected: int = 0

    def value(self, attr: str) -> float | None:
        return getattr(self, attr)


def headline(reader: Reader, name: str, slo: Slo | None = None) -> Headline:
    """The :class:`Headline` of the run in ``reader`` (from ``recordings.metrics``), goodput under
    ``slo``. Raises :class:`recordings.errors.RecordingError` for an unreadable recording."""
    s, b = summarize(reader), summarize_batching(reader)
    split = summarize_prefix_hits(reader)
    good = None
    if slo is not None and slo.is_set:
        serving = summarize_serving(reader, slo)
        good = serving.goodput.per_s if serving is not None and serving.goodput is not None else None
    pct = (lambda v: None if v is None else 100.0 * v)  # noqa: E731
    served = sum(n for reason, n in s.num_finished_by_reason.items() if reason in ("stop", "length"))
    (rejected,), = reader.execute("SELECT count(*) FROM requests WHERE status = 'FINISHED_ERROR'")
    dur = s.wall_duration_s
    return Headline(
        name=name, path=str(reader.path), clock=s.clock, time_unit=s.time_unit,
        simulated=bool(reader.run_info().simulated), num_requests=s.num_requests,
        num_served=served, num_rejected=int(rejected), duration_s=dur, output_tokens_per_s=s.output_tokens_per_s,
        requests_per_s=served / dur if dur > 0 else None, ttft_p50=s.ttft.p50, ttft_p99=s.ttft.p99,
        tpot_p50=b.tpot.p50, tpot_p99=b.tpot.p99,
        slot_occupancy=None if b.slot_occupancy is None else 100.0 * b.slot_occupancy,
        goodput_per_s=good, num_preemptions=s.num_preemptions,
        recomputed_pct=pct(s.num_recomputed_tokens / s.num_computed_tokens if s.num_computed_tokens else None),
        prefix_shared_pct=None if split is None else pct(split.shared_rate),
        prefix_own_pct=None if split is None else pct(split.readmission_rate),
        prefill_saved=None if split is None else split.num_hit_tokens,
        num_admission_rejected=summarize_admission(reader).total_rejected)


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, None when either is missing or ``base`` is 0."""
    if value is None or base is None or base == 0:
        return None
    return value / base


# --- fairness --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fairness:
    """Jain's index of normalised latency (E2E / output tokens) over the served requests, and
    latency per prompt-length bucket (see :mod:`recordings.compare.fairness`)."""

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
    policy = str(reader.run_info().config.get("policy", "?"))
    stem = Path(path).stem
    return stem if policy in stem else f"{stem} ({policy})"


def compare_recordings(paths: list[str | Path], names: list[str] | None = None,
                       slo: Slo | None = None) -> Comparison:
    """Compare the recordings at ``paths`` (two or more, one workload) with the first one
    (goodput under ``slo``).
    Raises :class:`WorkloadMismatch` for recordings of different workloads,
    :class:`recordings.errors.RecordingError` for a file that does not read or is of schema 1,
    ``ValueError`` for fewer than two paths."""
    if len(paths) < 2:
        raise ValueError(f"comparing needs two or more recordings, got {len(paths)}")
    readers = [open_reader(p) for p in paths]
    try:
        for r in readers:
            if r.execute("PRAGMA user_version")[0][0] < 2:
                raise RecordingError(f"{r.path}: a schema-1 recording (BatchScope 0.1) has no per-step batch "
                                     "arrays; compare needs schema 2 or later (record the run again)")
        names = names or [run_name(p, r) for p, r in zip(paths, readers)]
        prints = [workload_fingerprint(r) for r in readers]
        for k in range(1, len(readers)):
            check_same_workload(prints[0], prints[k], str(paths[0]), str(paths[k]))
        heads = [headline(r, n, slo) for r, n in zip(readers, names)]
        times = [request_times(r) for r in readers]
    finally:
        for r in readers:
            r.close()
    edges = bucket_edges(times[0].num_prompt_tokens)
    return Comparison(heads, times, [fairness(t, edges) for t in times],
                      [request_deltas(times[0], t, heads[0].time_unit) for t in times[1:]],
                      prints[0].digest, edges)
