"""Run metrics recomputed from a recording's rows (never from the engine's own counters).

Latencies are on the engine clock of the run (``config['clock']``): in steps under the virtual
clock, in seconds under the wall clock and in simulated seconds under the sim clock. A token's time
is its step's ``token_time``: the end of the step on that clock (the step's start + 1 under the
virtual clock). So TTFT = first token time - ``requests.arrival_time`` (a request admitted and
prefilled in the step it arrived in has a TTFT of 1 step), and the ITL samples are the gaps
between consecutive tokens of a request. Under the sim clock, durations and throughput are in
simulated seconds (the run's ``token_time`` span), not in the wall time the simulation took.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby

from recordings.errors import RecordingError
from recordings.file.reader import Reader
from recordings.file.compact import blocks_by_request
from recordings.file.schema import prefill_tokens_sql
from recordings.metrics.stats import Percentiles, latencies, token_times  # noqa: F401  (Percentiles: part of this module's API)
from recordings.metrics.wall_clock import paused_seconds
from engine.vocab import Clock
from engine.plural import plural


@dataclass(frozen=True)
class RunSummary:
    """Totals and latency percentiles of one recorded run.

    ``time_unit`` is ``'steps'`` (virtual clock) or ``'s'`` (wall clock) and applies to ``ttft``
    and ``itl``. ``wall_duration_s`` runs from the first step's start to the last step's end,
    less the time the engine was paused (``recordings.metrics.wall_clock``);
    ``output_tokens_per_s`` is over that time (``None`` for a zero duration). ``mean_batch_size``
    is the mean number of requests scheduled per non-empty step; ``peak_kv_cache_usage`` is the
    highest fraction of KV blocks in use after any step. ``prefix_cache_queries`` /
    ``prefix_cache_hits`` are vLLM's prefix-cache counters summed over the steps (tokens of the
    admitted requests looked up, and found cached; 0 without prefix caching).

    Preemption forensics, from the ``preempted`` events' ``PreemptionInfo`` JSON:
    ``num_preempted_requests`` (requests preempted at least once), ``max_preemptions_per_request``,
    ``preemptions_by_reason`` (``engine.sched.preemption`` reasons; ``unknown`` for a recording made
    before forensics). The wasted work: ``num_preempted_tokens``, tokens of KV dropped by
    recompute preemptions (computed, then thrown away), and ``num_recomputed_tokens``, those of
    them computed again when the request was admitted again (the rest came back from the prefix
    cache, or the request never came back), out of ``num_computed_tokens`` (all tokens scheduled
    in the run).
    """

    clock: str
    time_unit: str
    num_requests: int
    num_finished_by_reason: dict[str, int]
    num_steps: int
    num_prompt_tokens: int
    num_output_tokens: int
    wall_duration_s: float
    output_tokens_per_s: float | None
    ttft: Percentiles
    itl: Percentiles
    num_preemptions: int
    mean_batch_size: float
    peak_kv_cache_usage: float
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    num_preempted_requests: int = 0
    max_preemptions_per_request: int = 0
    preemptions_by_reason: dict[str, int] = field(default_factory=dict)
    num_preempted_tokens: int = 0
    num_recomputed_tokens: int = 0
    num_computed_tokens: int = 0

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """``prefix_cache_hits / prefix_cache_queries`` in [0, 1]; None when nothing was looked up."""
        if self.prefix_cache_queries <= 0:
            return None
        return min(1.0, max(0.0, self.prefix_cache_hits / self.prefix_cache_queries))

    @property
    def num_finished(self) -> int:
        """Finished requests, whatever the reason."""
        return sum(self.num_finished_by_reason.values())

    def format_table(self, min_width: int = 0) -> str:
        """A two-column, human-readable text table (for the CLI); the name column is at least
        ``min_width`` characters wide (to line up with other tables' lines)."""
        unit = "sim s" if self.clock == Clock.SIM else self.time_unit   # name simulated seconds
        span = "sim s" if self.clock == Clock.SIM else "wall s"           # what wall_duration_s counts

        def num(v: float | None, fmt: str = ".3f") -> str:
            return "-" if v is None else format(v, fmt)

        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.num_finished_by_reason.items()))
        rows = [
            ("clock", self.clock),
            ("requests", f"{self.num_requests:,}"),
            ("finished", f"{self.num_finished:,}" + (f" ({reasons})" if reasons else "")),
            ("steps", f"{self.num_steps:,}"),
            ("prompt tokens", f"{self.num_prompt_tokens:,}"),
            ("output tokens", f"{self.num_output_tokens:,}"),
            (f"duration ({span})", num(self.wall_duration_s)),
            (f"output tokens/s ({span})", num(self.output_tokens_per_s, ".1f")),
        ]
        for name, p in (("TTFT", self.ttft), ("ITL", self.itl)):
            rows.append((f"{name} p50/p90/p99 ({unit})",
                         f"{num(p.p50)} / {num(p.p90)} / {num(p.p99)}  (n={p.num_samples})"))
        rows += [
            ("preemptions", self._preemption_text()),
            ("mean batch size", num(self.mean_batch_size, ".2f")),
            ("peak KV cache usage", f"{self.peak_kv_cache_usage:.1%}"),
        ]
        if self.num_preemptions:
            share = (f" ({self.num_recomputed_tokens / self.num_computed_tokens:.1%} of the "
                     f"{self.num_computed_tokens:,} computed)" if self.num_computed_tokens else "")
            rows.append(("wasted by preemption", f"{self.num_preempted_tokens:,} KV tokens dropped, "
                                                 f"{self.num_recomputed_tokens:,} computed again{share}"))
        rate = self.prefix_cache_hit_rate
        if rate is not None:
            rows.append(("prefix cache hits / queries",
                         f"{self.prefix_cache_hits:,} / {self.prefix_cache_queries:,} tokens ({rate:.1%})"))
        width = max(min_width, *(len(name) for name, _ in rows))
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)

    def _preemption_text(self) -> str:
        """'5 in 3 requests (priority=4, no_free_blocks=1), at most 2 per request'."""
        if not self.num_preemptions:
            return "0"
        why = ", ".join(f"{k}={v}" for k, v in sorted(self.preemptions_by_reason.items()))
        return (f"{self.num_preemptions:,} in {plural(self.num_preempted_requests, 'request')}"
                + (f" ({why})" if why else "")
                + f", at most {self.max_preemptions_per_request} per request")


def summarize(reader: Reader) -> RunSummary:
    """Recompute the run's metrics from the rows of ``reader``'s recording.

    Raises :class:`recordings.errors.RecordingError` if the file cannot be read or holds values of the
    wrong type, or numbers no run produces (an infinite counter: ``OverflowError``).
    """
    try:
        return _summarize(reader)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordingError(f"{reader.path}: corrupt recording (metrics): "
                             f"{type(exc).__name__}: {exc}") from exc


def _summarize(reader: Reader) -> RunSummary:

    clock = str(reader.run_info().config.get("clock", "virtual"))
    (num_steps, first_ns, last_ns, num_preemptions, peak_kv), = reader.execute(
        "SELECT count(*), min(start_ns), max(end_ns), coalesce(sum(num_preemptions), 0), "
        "coalesce(max(kv_cache_usage), 0.0) FROM steps")
    (mean_batch,), = reader.execute(
        "SELECT avg(num_scheduled_requests) FROM steps WHERE num_scheduled_requests > 0")
    (num_requests, num_prompt_tokens), = reader.execute(
        "SELECT count(*), coalesce(sum(num_prompt_tokens), 0) FROM requests")
    by_reason = {str(reason): n for reason, n in reader.execute(
        "SELECT finish_reason, count(*) FROM requests WHERE status LIKE 'FINISHED%' "
        "GROUP BY finish_reason ORDER BY finish_reason")}
    version = reader.execute("PRAGMA user_version")[0][0]
    v1 = version == 1
    queries = hits = 0
    if version >= 3:       # the prefix-cache counters came with schema version 3
        (queries, hits), = reader.execute("SELECT coalesce(sum(prefix_cache_queries), 0), "
                                          "coalesce(sum(prefix_cache_hits), 0) FROM steps")
    preemptions = _preemptions(reader, "request_id" if v1 else "seq")
    (num_computed,), = reader.execute("SELECT coalesce(sum(num_scheduled_tokens), 0) FROM steps")
    ttft, itl = _v1latencies(reader, clock) if v1 else latencies(reader)
    num_output_tokens = reader.execute("SELECT count(*) FROM tokens" if v1 else
                                       "SELECT coalesce(sum(num_new_tokens), 0) FROM steps")[0][0]
    duration_s = (last_ns - first_ns) / 1e9 - paused_seconds(reader, clock) if num_steps else 0.0
    if clock == Clock.SIM and num_steps:
        (duration_s,), = reader.execute("SELECT max(token_time) - min(clock) FROM steps")
    return RunSummary(
        clock=clock, time_unit="steps" if clock == Clock.VIRTUAL else "s",
        num_requests=num_requests, num_finished_by_reason=by_reason, num_steps=num_steps,
        num_prompt_tokens=num_prompt_tokens, num_output_tokens=num_output_tokens,
        wall_duration_s=duration_s,
        output_tokens_per_s=num_output_tokens / duration_s if duration_s > 0 else None,
        ttft=Percentiles.of(ttft, consume=True), itl=Percentiles.of(itl, consume=True),
        num_preemptions=num_preemptions,
        mean_batch_size=float(mean_batch or 0.0), peak_kv_cache_usage=float(peak_kv),
        prefix_cache_queries=int(queries), prefix_cache_hits=int(hits),
        num_computed_tokens=int(num_computed), **preemptions,
    )


# A preempted event's detail is PreemptionInfo JSON (engine.sched.preemption); older files hold free
# text there, which json_extract would refuse: CASE evaluates it only for valid JSON.
_REASON = "CASE WHEN json_valid(detail) THEN json_extract(detail, '$.reason') END"
_RECOMPUTE = ("kind = 'preempted' AND CASE WHEN json_valid(detail) THEN json_extract(detail, '$.mode') "
              "END IN ('recompute', 'recompute_fallback')")     # a swap drops nothing
# Per recompute preemption: the request (seq), the tokens it dropped, the step the request was
# admitted again (NULL if never: aborted, or the run ended) and the prefix-cache blocks that
# admission hit (recordings.metrics.thrash and .prefix_hits read it too).
DROPPED_SQL = f"""
SELECT seq, dropped, back, coalesce((SELECT sum(json_array_length(b.block_ids_json)) FROM block_events b
                                WHERE b.seq = p.seq AND b.step = p.back AND b.kind = 'hit'), 0) AS hit
FROM (SELECT e.seq AS seq, json_extract(e.detail, '$.tokens') AS dropped,
             (SELECT min(s.step) FROM events s WHERE s.seq = e.seq AND s.kind = 'scheduled'
              AND s.step > e.step) AS back
      FROM events e WHERE {_RECOMPUTE}) p"""


def _preemptions(reader: Reader, who: str) -> dict:
    """The preemption totals of :class:`RunSummary` from the ``events`` and ``block_events``
    tables (``who``: the column naming the request, ``seq`` or, in schema 1, ``request_id``)."""
    (requests, most), = reader.execute(
        f"SELECT count(*), coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM events "
        f"WHERE kind = 'preempted' GROUP BY {who})")
    by_reason = {str(reason or "unknown"): n for reason, n in reader.execute(
        f"SELECT {_REASON} AS reason, count(*) FROM events WHERE kind = 'preempted' "
        "GROUP BY reason ORDER BY reason")}
    if who == "seq" and reader.execute("PRAGMA user_version")[0][0] >= 4:
        block_size = int(reader.run_info().config.get("block_size", 16))
        dropped, recomputed = _recomputed(reader, block_size)
    elif who == "seq":
        block_size = int(reader.run_info().config.get("block_size", 16))
        (dropped, recomputed), = reader.execute(
            f"SELECT coalesce(sum(dropped), 0), coalesce(sum(CASE WHEN back IS NULL THEN 0 "
            f"ELSE max(dropped - hit * ?, 0) END), 0) FROM ({DROPPED_SQL})", (block_size,))
    else:   # schema 1 has no block events (nor prefix caching, nor PreemptionInfo details)
        (dropped,), = reader.execute("SELECT coalesce(sum(json_extract(detail, '$.tokens')), 0) "
                                     f"FROM events WHERE {_RECOMPUTE}")
        recomputed = dropped
    return {"num_preempted_requests": int(requests), "max_preemptions_per_request": int(most),
            "preemptions_by_reason": by_reason, "num_preempted_tokens": int(dropped),
            "num_recomputed_tokens": int(recomputed)}


def recompute_rows(reader: Reader) -> list[tuple[int, int, int | None, int]]:
    """One row per recompute preemption of a schema >= 2 file: (request seq, tokens dropped,
    the step it was admitted again or None, prefix-cache blocks that admission hit). Schema 4
    keeps block events as blobs: the hits are counted in Python; before, in SQL
    (:data:`DROPPED_SQL`). ``recordings.metrics.thrash`` and ``.prefix_hits`` read it too."""
    if reader.execute("PRAGMA user_version")[0][0] < 4:
        return [(seq, int(d or 0), back, int(hit)) for seq, d, back, hit in reader.execute(DROPPED_SQL)]
    rows = reader.execute(f"SELECT e.seq, json_extract(e.detail, '$.tokens'), (SELECT min(s.step) "
                          "FROM events s WHERE s.seq = e.seq AND s.kind = 'scheduled' AND s.step > e.step) "
                          f"FROM events e WHERE {_RECOMPUTE}")
    backs = sorted({back for _, _, back in rows if back is not None})
    hits: dict[tuple[int, int], int] = {}
    for i in range(0, len(backs), 500):
        part = backs[i:i + 500]
        for step, blob in reader.execute(f"SELECT step, data FROM block_events WHERE step IN "
                                         f"({', '.join('?' * len(part))})", part):
            for seq, n in blocks_by_request(blob, "hit").items():
                hits[seq, step] = n
    return [(seq, int(d or 0), back, hits.get((seq, back), 0) if back is not None else 0)
            for seq, d, back in rows]


def _recomputed(reader: Reader, block_size: int) -> tuple[int, int]:
    """Tokens dropped by recompute preemptions and how many of them were computed again (less
    the blocks the next admission hit in the prefix cache)."""
    rows = recompute_rows(reader)
    dropped = sum(d for _, d, _, _ in rows)
    recomputed = sum(max(d - hit * block_size, 0) for _, d, back, hit in rows if back is not None)
    return dropped, recomputed


# Schema 1 has no token_time: a token's time is its step's clock + 1 under the virtual clock, else
# the step's clock + its duration (v1's definition). Rows grouped by request in token order.
_V1_TOKEN_TIMES = ("SELECT t.request_id, s.clock + CASE WHEN :clock = 'wall' "
                   "THEN (s.end_ns - s.start_ns) / 1e9 ELSE 1.0 END "
                   "FROM tokens t JOIN steps s ON s.step = t.step "
                   "ORDER BY t.request_id, t.step, t.seq")


def _v1latencies(reader: Reader, clock: str) -> tuple[list[float], list[float]]:
    """TTFT and ITL samples of a schema-1 recording (its ``tokens`` table)."""
    arrival = dict(reader.execute("SELECT request_id, arrival_time FROM requests"))
    rows = reader.execute(_V1_TOKEN_TIMES, {"clock": clock})
    ttft: list[float] = []
    itl: list[float] = []
    for request_id, group in groupby(rows, key=lambda r: r[0]):
        times = [t for _, t in group]
        if arrival.get(request_id) is not None:
            ttft.append(times[0] - arrival[request_id])
        itl.extend(b - a for a, b in zip(times, times[1:]))
    return ttft, itl


# --- batching: slot occupancy, time per output token, prefill work -----------------------------
@dataclass(frozen=True)
class BatchingSummary:
    """How full the batch slots were, how fast each request streamed and how much prefill the
    run computed, from a recording's rows.

    ``slot_occupancy`` is the mean over steps of ``num_running / max_num_seqs`` (running requests
    after each step, so a request that finishes in a step is not counted in it), in [0, 1];
    ``None`` without steps. ``tpot`` is vLLM's ``time_per_output_token`` per finished request
    with at least two output tokens: (last token time - first token time) / (output tokens - 1),
    the ``requests.mean_itl`` column, in ``time_unit`` (steps or s, as :class:`RunSummary`).
    ``num_prefill_tokens`` counts the tokens computed by prefill chunks (prompt tokens not found
    in the prefix cache, plus what preempted requests recomputed); ``None`` for a schema-1 file.
    """

    time_unit: str
    slot_occupancy: float | None
    tpot: Percentiles
    num_prefill_tokens: int | None = None
    clock: str = ""          # the run's clock; "sim" names the unit "sim s" in the text

    def format_lines(self, width: int = 27) -> list[str]:
        """Lines in :meth:`RunSummary.format_table`'s two-column style."""
        p = self.tpot
        num = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        occ = "-" if self.slot_occupancy is None else f"{self.slot_occupancy:.1%}"
        unit = "sim s" if self.clock == Clock.SIM else self.time_unit
        lines = [f"{f'TPOT p50/p90/p99 ({unit})':<{width}}  {num(p.p50)} / {num(p.p90)} / "
                 f"{num(p.p99)}  (n={p.num_samples})",
                 f"{'slot occupancy':<{width}}  {occ} (running / max_num_seqs, mean over steps)"]
        if self.num_prefill_tokens is not None:
            lines.append(f"{'prefill tokens computed':<{width}}  {self.num_prefill_tokens}")
        return lines


def summarize_batching(reader: Reader) -> BatchingSummary:
    """Slot occupancy, TPOT and prefill tokens of the run in ``reader`` (see
    :class:`BatchingSummary`). Raises :class:`recordings.errors.RecordingError` if the file cannot be
    read or its config lacks ``max_num_seqs``."""
    config = reader.run_info().config
    max_num_seqs = config.get("max_num_seqs")
    if not max_num_seqs:
        raise RecordingError(f"{reader.path}: the run's config has no max_num_seqs")
    (mean_running,), = reader.execute("SELECT avg(num_running) FROM steps")
    tpot = [v for (v,) in reader.execute(
        "SELECT mean_itl FROM requests WHERE mean_itl IS NOT NULL AND num_output_tokens >= 2")]
    prefill = None
    version = reader.execute("PRAGMA user_version")[0][0]
    if version >= 2:
        (prefill,), = reader.execute(f"SELECT coalesce(sum({prefill_tokens_sql(version)}), 0) FROM steps")
    clock = str(config.get("clock", "virtual"))
    return BatchingSummary(time_unit="steps" if clock == Clock.VIRTUAL else "s", clock=clock,
                           slot_occupancy=None if mean_running is None else float(mean_running) / max_num_seqs,
                           tpot=Percentiles.of(tpot), num_prefill_tokens=None if prefill is None else int(prefill))
