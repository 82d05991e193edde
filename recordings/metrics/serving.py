"""Serving metrics as vLLM's ``benchmark_serving.py`` reports them, recomputed from a recording's
rows: end-to-end latency, request throughput, queue time, the prefill / decode split of step time,
and goodput under a TTFT / TPOT SLO.

Times are on the run's engine clock, as in ``recordings.metrics.run_metrics``: steps under the virtual clock,
seconds under the wall clock, simulated seconds under the sim clock. A token's time is its step's
``token_time``. Per request (tokens from :func:`recordings.metrics.run_metrics.token_times`):

- ``e2e_request_latency`` = last token time - ``arrival_time``, for completed requests
  (``FINISHED_STOPPED`` / ``FINISHED_LENGTH``; aborted, rejected and unfinished ones are left out);
- ``request_queue_time`` = start (``clock``) of the step that first scheduled the request -
  ``arrival_time`` (vLLM's ``scheduled_ts - queued_ts``), for every request scheduled at least once;
- TTFT = first token time - arrival; TPOT = (last - first token time) / (output tokens - 1).

A step's duration is ``token_time - clock`` (1 step under the virtual clock). The prefill / decode
split attributes each step's duration to its scheduled tokens in proportion: a step of 12 prefill
and 4 decode tokens that took 20 ms gives 15 ms to prefill and 5 ms to decode. It is also given the
coarse way: the time of steps with any prefill chunk vs decode-only steps.

Goodput (vLLM's definition, DistServe, Zhong et al., OSDI 2024): completed requests whose TTFT and
TPOT both meet the SLO, per second of the run; a request with one output token has no TPOT and
meets a TPOT SLO (vLLM counts its TPOT as 0). SLOs are milliseconds, so goodput needs a clock in
seconds (wall or sim); under the virtual clock it is not defined.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recordings.errors import RecordingError
from recordings.metrics.stats import Percentiles, token_times
from engine.vocab import Clock, RequestStatus

if TYPE_CHECKING:             # the bench and GPU check import Slo without the SQLite layer
    from recordings.file.reader import Reader

COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH)
UNITS = {"virtual": "steps", "wall": "s", "sim": "sim s"}


@dataclass(frozen=True)
class Slo:
    """Service-level objective in milliseconds (``None``: no limit on that metric). Raises
    ``ValueError`` for a limit that is not a positive finite number."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if value is not None and not (0 < value < float("inf")):
                raise ValueError(f"--slo-{name[:4]} must be a positive number of milliseconds, "
                                 f"got {value}")

    @property
    def is_set(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def describe(self) -> str:
        """'TTFT <= 200 ms and TPOT <= 50 ms'."""
        parts = [f"{name} <= {v:g} ms" for name, v in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms))
                 if v is not None]
        return " and ".join(parts)


@dataclass(frozen=True)
class Goodput:
    """Requests meeting the SLO: ``num_good`` of ``num_requests`` (all requests of the run, so
    rejected, aborted and unfinished ones count as missing it), and ``per_s``: ``num_good`` per
    second of the run's duration (``None`` for a zero duration); ``undefined`` says why there is
    no figure (a virtual clock), else ``None``."""

    slo: Slo
    num_good: int
    num_requests: int
    per_s: float | None
    undefined: str | None = None

    @property
    def share(self) -> float | None:
        return self.num_good / self.num_requests if self.num_requests else None


@dataclass(frozen=True)
class ServingSummary:
    """The serving metrics of one run (see the module docstring for the definitions).

    ``clock`` and ``time_unit`` (``steps``, ``s`` or ``sim s``) apply to every time here;
    ``duration`` runs from the first step's start to the last token (the span
    ``recordings.metrics.run_metrics.RunSummary`` uses for output tokens/s; under the virtual clock the
    wall seconds of the run, so ``requests_per_s`` is per wall second there, and
    ``duration_unit`` says which). ``num_completed`` / ``requests_per_s``: completed requests
    and their rate. ``prefill_time`` / ``decode_time``: step time attributed by tokens;
    ``prefill_step_time`` / ``decode_only_step_time``: time of steps with / without a prefill
    chunk. ``goodput`` is ``None`` without an SLO.
    """

    clock: str
    time_unit: str
    duration: float
    duration_unit: str
    num_requests: int
    num_completed: int
    requests_per_s: float | None
    e2e_latency: Percentiles
    queue_time: Percentiles
    prefill_time: float
    decode_time: float
    prefill_step_time: float
    decode_only_step_time: float
    goodput: Goodput | None = None

    @property
    def prefill_share(self) -> float | None:
        """Share of step time attributed to prefill tokens, in [0, 1] (None without work)."""
        total = self.prefill_time + self.decode_time
        return self.prefill_time / total if total > 0 else None

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in ``RunSummary.format_table``'s two-column style, each naming its unit."""
        u = self.time_unit

        def pct(p: Percentiles) -> str:
            num = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
            return f"{num(p.p50)} / {num(p.p90)} / {num(p.p99)}  (n={p.num_samples})"

        rate = "-" if self.requests_per_s is None else f"{self.requests_per_s:.3f}"
        rows = [(f"E2E latency p50/p90/p99 ({u})", pct(self.e2e_latency)),
                (f"queue time p50/p90/p99 ({u})", f"{pct(self.queue_time)}  arrival -> first scheduled"),
                (f"requests/s ({self.duration_unit})",
                 f"{rate}  ({self.num_completed} completed in {self.duration:.3f} {self.duration_unit})")]
        share = self.prefill_share
        if share is not None:
            steps = self.prefill_step_time + self.decode_only_step_time
            rows.append((f"prefill / decode time ({u})",
                         f"{self.prefill_time:.3f} / {self.decode_time:.3f}  ({share:.1%} prefill; "
                         f"each step's time split by its tokens)"))
            rows.append((f"steps with prefill ({u})",
                         f"{self.prefill_step_time:.3f} of {steps:.3f}  "
                         f"({self.prefill_step_time / steps:.1%}; the rest decode-only steps)"))
        g = self.goodput
        if g is not None:
            if g.undefined:
                text = f"n/a: {g.undefined} ({g.slo.describe()})"
            else:
                per_s = "-" if g.per_s is None else f"{g.per_s:.3f}"
                share = "-" if g.share is None else f"{g.share:.1%}"
                text = (f"{per_s}  ({g.num_good} of {g.num_requests} requests, {share}, met "
                        f"{g.slo.describe()})")
            rows.append((f"goodput req/s ({self.duration_unit})", text))
        return [f"{name:<{width}}  {value}" for name, value in rows]


def summarize_serving(reader: Reader, slo: Slo | None = None) -> ServingSummary | None:
    """The serving metrics of ``reader``'s run (``None`` for a schema-1 recording, which lacks
    the per-step token times). Raises :class:`recordings.errors.RecordingError` for a corrupt file."""
    if reader.execute("PRAGMA user_version")[0][0] < 2:
        return None
    try:
        return _summarize(reader, slo)
    except (TypeError, ValueError) as exc:
        raise RecordingError(f"{reader.path}: corrupt recording (serving metrics): "
                             f"{type(exc).__name__}: {exc}") from exc


def _summarize(reader: Reader, slo: Slo | None) -> ServingSummary:
    clock = str(reader.run_info().config.get("clock", "virtual"))
    unit = UNITS.get(clock, "s")
    requests = reader.execute("SELECT seq, arrival_time, status FROM requests")
    arrival = {seq: t for seq, t, _ in requests}
    completed = {seq for seq, _, status in requests if status in COMPLETED}
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    count: dict[int, int] = {}
    for t, seq in token_times(reader):
        first.setdefault(seq, t)
        last[seq] = t
        count[seq] = count.get(seq, 0) + 1
    e2e = [last[s] - arrival[s] for s in completed if s in last and arrival[s] is not None]
    queue = [t - a for t, a in reader.execute(
        "SELECT s.clock, r.arrival_time FROM (SELECT seq, min(step) AS step FROM events "
        "WHERE kind = 'scheduled' GROUP BY seq) f JOIN requests r ON r.seq = f.seq "
        "JOIN steps s ON s.step = f.step WHERE r.arrival_time IS NOT NULL")]
    duration, duration_unit = _duration(reader, clock)
    from recordings.file.schema import prefill_tokens_sql   # the SQLite layer: not for the bench path

    version = reader.execute("PRAGMA user_version")[0][0]
    (prefill, decode, prefill_steps, decode_steps), = reader.execute(
        _SPLIT.format(prefill=prefill_tokens_sql(version)))
    good = None
    if slo is not None and slo.is_set:
        good = _goodput(slo, clock, completed, arrival, first, last, count, len(requests), duration)
    return ServingSummary(
        clock=clock, time_unit=unit, duration=duration, duration_unit=duration_unit,
        num_requests=len(requests), num_completed=len(completed),
        requests_per_s=len(completed) / duration if duration > 0 else None,
        e2e_latency=Percentiles.of(e2e), queue_time=Percentiles.of(queue),
        prefill_time=float(prefill), decode_time=float(decode),
        prefill_step_time=float(prefill_steps), decode_only_step_time=float(decode_steps),
        goodput=good)


# Per step with scheduled tokens: its duration on the run clock and its prefill tokens (the
# batch_prefill_json entries are [batch index, tokens] of each prefill chunk).
# Schema 4 stores the latter as steps.num_prefill_tokens.
_SPLIT = """
SELECT coalesce(sum(d * pf / n), 0), coalesce(sum(d * (n - pf) / n), 0),
       coalesce(sum(CASE WHEN pf > 0 THEN d ELSE 0 END), 0),
       coalesce(sum(CASE WHEN pf = 0 THEN d ELSE 0 END), 0)
FROM (SELECT token_time - clock AS d, CAST(num_scheduled_tokens AS REAL) AS n, {prefill} AS pf
      FROM steps WHERE num_scheduled_tokens > 0)"""



def _duration(reader: Reader, clock: str) -> tuple[float, str]:
    """The run's span and its unit: wall seconds from the first step's start to the last step's
    end (wall and virtual clocks), simulated seconds from the first step's clock to the last
    token time (sim clock) — the span ``RunSummary`` divides output tokens by."""
    if clock == Clock.SIM:
        (span,), = reader.execute("SELECT max(token_time) - min(clock) FROM steps")
        return float(span or 0.0), "sim s"
    (first, last), = reader.execute("SELECT min(start_ns), max(end_ns) FROM steps")
    return ((last - first) / 1e9 if first is not None else 0.0), "wall s"


def _goodput(slo: Slo, clock: str, completed: set, arrival: dict, first: dict, last: dict,
             count: dict, num_requests: int, duration: float) -> Goodput:
    if clock == Clock.VIRTUAL:
        return Goodput(slo, 0, num_requests, None,
                       undefined="the SLO is in ms and this run's clock counts steps; "
                                 "record with --clock wall or --executor sim")
    ttft_s = np.inf if slo.ttft_ms is None else slo.ttft_ms / 1000
    tpot_s = np.inf if slo.tpot_ms is None else slo.tpot_ms / 1000
    good = 0
    for seq in completed:
        if seq not in first or arrival.get(seq) is None:
            continue
        tpot = (last[seq] - first[seq]) / (count[seq] - 1) if count[seq] > 1 else 0.0
        if first[seq] - arrival[seq] <= ttft_s and tpot <= tpot_s:
            good += 1
    return Goodput(slo, good, num_requests, good / duration if duration > 0 else None)
