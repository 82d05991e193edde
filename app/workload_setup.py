"""Turning a trace (or the built-in demo slice) into engine requests."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from engine.engine import LLMEngine
from engine.plural import plural
from engine.request import SamplingParams
from engine.vocab import Clock
from recordings.workloads.rows import EmptyWorkload


@dataclass
class LoadedWorkload:
    """Requests ready to add, plus what the user should be told about them."""

    requests: list            # recordings.workloads.workload.WorkloadRequest
    trace_info: dict          # name, sha256, rows, malformed rows, scaling notes (for provenance)
    notes: list[str]          # human-readable lines: what was scaled, clipped or skipped


def check_args(args: argparse.Namespace) -> None:
    """Validate the workload flags before anything slow happens. Raises ``ValueError`` naming the
    flag and its limit."""
    from recordings.workloads.workload import check_workload_arguments

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    sps = args.steps_per_second
    if sps is not None and not (0 < sps < math.inf):          # nan fails both comparisons
        raise ValueError(f"--steps-per-second must be a finite number > 0, got {sps}")
    _check_source(args)
    check_workload_arguments(args.time_scale, args.prompt_scale, args.output_scale, args.min_prompt_tokens,
                             args.max_prompt_tokens, args.min_output_tokens, args.max_output_tokens)


def _check_source(args: argparse.Namespace) -> None:
    """The workload source flags (``--trace``, ``--lengths``, ``--num-requests``,
    ``--request-rate``, SLOs): raise ``ValueError`` naming the flag and its limit."""
    from recordings.workloads.poisson import check_request_rate
    from recordings.metrics.serving import Slo

    trace, lengths = getattr(args, "trace", None), getattr(args, "lengths", None)
    if trace and lengths:
        raise ValueError("give --trace PATH or --lengths sharegpt, not both")
    if getattr(args, "command", None) == "run" and not (trace or lengths):
        raise ValueError("batchscope run needs a workload: --trace PATH or --lengths sharegpt")
    num = getattr(args, "num_requests", None)
    if num is not None and not lengths:
        raise ValueError("--num-requests goes with --lengths; a trace's first N requests: --limit N")
    if num is not None and num < 1:
        raise ValueError(f"--num-requests must be >= 1, got {num}")
    if getattr(args, "request_rate", None) is not None:
        check_request_rate(args.request_rate)
    Slo(getattr(args, "slo_ttft", None), getattr(args, "slo_tpot", None))


def _request_rate(args: argparse.Namespace) -> float | None:
    """``--request-rate``, or inf for ``--lengths`` without one (a table has no times), else None."""
    rate = getattr(args, "request_rate", None)
    return float("inf") if rate is None and getattr(args, "lengths", None) else rate


def _length_table_hint(path: Path) -> str:
    """For a trace that is no trace but a table of request lengths (the ShareGPT one that the
    Sarathi-Serve authors publish, which BatchScope ships): how to use it; "" otherwise."""
    from recordings.workloads.length_tables import TABLES, is_length_table

    if not is_length_table(path):
        return ""
    return (f". {path.name} is a table of request lengths without arrival times, not a trace: "
            f"draw requests from the shipped copy with --lengths {next(iter(TABLES))} "
            "--num-requests N (arrivals: all at once, or a Poisson process with --request-rate R)")


def read_trace(args: argparse.Namespace):
    """The workload's rows as a ``TraceLoad``: ``args.trace`` (or the built-in demo slice when it
    is None), or ``--num-requests`` draws from the ``--lengths`` table; with a request rate the
    arrival times are replaced by a seeded Poisson process (``recordings.workloads.poisson``). Raises
    ``FileNotFoundError`` or ``recordings.workloads.traces.TraceFormatError`` with the path (also for
    rows with keys their format does not define under ``--strict``), and
    ``recordings.workloads.rows.EmptyWorkload`` for a trace without one valid row (naming its
    first bad lines)."""
    from recordings.workloads.poisson import with_poisson_arrivals
    from recordings.workloads.traces import TraceFormatError, TraceLoad, load_trace
    from recordings.workloads.workload import demo_trace_path

    if getattr(args, "lengths", None):
        from recordings.workloads.length_tables import load_length_table

        table = load_length_table(args.lengths)
        load = TraceLoad(path=table.path, sha256=table.sha256, format=f"length-table:{table.name}",
                         rows=table.sample(args.num_requests or DEFAULT_NUM_REQUESTS, args.seed))
    else:
        path = Path(args.trace) if args.trace else demo_trace_path()
        if not path.is_file():
            raise FileNotFoundError(f"trace file not found: {path}")
        try:
            load = load_trace(path, limit=args.limit, strict=getattr(args, "strict", False))
        except TraceFormatError as e:
            raise TraceFormatError(f"{e}{_length_table_hint(path)}") from e
        if not load.rows:
            raise EmptyWorkload(path, [str(e) for e in load.errors])
    _check_priorities(args, load.rows)
    rate = _request_rate(args)
    if rate is not None:
        load.rows = with_poisson_arrivals(load.rows, rate, args.seed)
    return load


def _check_priorities(args: argparse.Namespace, rows) -> None:
    """A nonzero priority is refused unless ``--policy priority`` (as ``LLMEngine.add_request``
    refuses it): raise ``ValueError`` naming how many rows carry one and the first's line."""
    policy = getattr(args, "policy", "fcfs")
    ranked = [r for r in rows if r.spec is not None and r.spec.priority]
    if ranked and policy != "priority":
        what = "1 request carries" if len(ranked) == 1 else f"{len(ranked)} requests carry"
        raise ValueError(f"{what} a nonzero priority (first: line {ranked[0].line_no}, priority "
                         f"{ranked[0].spec.priority}): only --policy priority honours it; run with "
                         f"--policy priority (this run has --policy {policy})")


DEFAULT_NUM_REQUESTS = 1000
STEPS_PER_SECOND = 10.0      # --clock virtual: trace seconds -> steps, unless --steps-per-second


def _source_notes(args: argparse.Namespace, load) -> list[str]:
    """Plain-words provenance of where lengths and arrivals came from."""
    from recordings.workloads.length_tables import SOURCES
    from recordings.workloads.poisson import arrival_note

    notes = []
    if getattr(args, "lengths", None):
        notes.append(f"lengths: {len(load.rows)} draws (with replacement, seed {args.seed}) from the "
                     f"{SOURCES[args.lengths]}")
    rate = _request_rate(args)
    if rate is not None:
        replaced = None if getattr(args, "lengths", None) else "the trace's timestamps"
        notes.append(arrival_note(len(load.rows), rate, args.seed, replaced))
        if replaced and args.time_scale != 1:
            notes.append(f"--time-scale {args.time_scale:g} not applied: --request-rate sets the arrivals")
    if any(row.hash_ids for row in load.rows):
        notes.append("hash_ids: kept with each row's lengths" + (" through the Poisson resampling"
                                                                  if rate is not None else "")
                     + "; the recording stores the prefix-sharing summary, not the ids per request")
    return notes


def load_workload(args: argparse.Namespace, load, tokenizer, vocab_size: int | None = None) -> LoadedWorkload:
    """Scale the rows of ``load`` (a ``TraceLoad``) into requests per ``args``. Raises
    ``recordings.workloads.rows.EmptyWorkload`` when no row can be served by this engine (the
    malformed rows and the rows it skipped named)."""
    from recordings.workloads.workload import build_workload

    rate = _request_rate(args)
    wl = build_workload(load.rows, tokenizer, time_scale=args.time_scale if rate is None else 1.0,
                        max_prompt_tokens=args.max_prompt_tokens, max_output_tokens=args.max_output_tokens,
                        prompt_scale=args.prompt_scale, output_scale=args.output_scale,
                        min_prompt_tokens=args.min_prompt_tokens, min_output_tokens=args.min_output_tokens,
                        seed=args.seed, vocab_size=vocab_size, block_size=args.block_size)
    skipped = [f"line {e.line_no}: {e.message}" for e in load.errors]
    if not wl.requests:
        raise EmptyWorkload(load.path, sorted(skipped + wl.skipped_rows,
                                              key=lambda t: int(t.split()[1].rstrip(":"))))
    source = _source_notes(args, load)
    info = {"name": Path(load.path).name, "path": str(load.path), "sha256": load.sha256,
            "format": load.format, "num_rows": len(load.rows), "num_malformed_rows": len(load.errors),
            "scaling": source + list(wl.scaling_notes), "skipped_rows": skipped[:20],
            "time_scale": args.time_scale if rate is None else 1.0, "request_rate": rate,
            "seed": args.seed}
    if wl.prefix_sharing is not None:
        info["prefix_sharing"] = wl.prefix_sharing.to_dict()
    unknown = [f"{line}: ignored (--strict refuses the trace)" for line in load.unknown_key_lines()]
    if unknown:
        info["unknown_keys"] = {key[:40]: {"num_rows": len(lines), "first_lines": lines[:20]}
                                for key, lines in list(load.unknown_keys.items())[:20]}
    notes = source + list(wl.scaling_notes) + unknown
    notes += [f"skipped malformed row {line}" for line in skipped[:5]]
    if len(skipped) > 5:
        notes.append(f"... and {plural(len(skipped) - 5, 'more malformed row')} skipped")
    return LoadedWorkload(wl.requests, info, notes)


def add_workload(engine: LLMEngine, requests: list, *, clock: str,
                 steps_per_second: float | None = None) -> None:
    """Queue every request at its arrival time (seconds, or steps under the virtual clock:
    ``steps_per_second`` of them a trace second, default :data:`STEPS_PER_SECOND`), with
    its sampling and priority. EOS is ignored where the length is exact (trace rows, JSONL
    ``output_tokens``), so output lengths follow the trace. Each request's prompt is handed over
    deferred (``engine.request.DeferredPrompt``): a synthesised prompt's ids are made when the
    request arrives (``recordings.workloads.workload.WorkloadRequest.make_prompt``)."""
    base = engine.now()
    steps_per_second = steps_per_second or STEPS_PER_SECOND
    for w in requests:
        # Virtual clock: a request arrives before the first step at or after its trace time.
        at = math.ceil(w.arrival_s * steps_per_second - 1e-9) if clock == Clock.VIRTUAL else w.arrival_s
        params = SamplingParams(max_tokens=w.max_tokens, ignore_eos=w.ignore_eos, **w.sampling)
        engine.add_request(None, params, request_id=w.request_id, arrival_time=base + at,
                           priority=w.priority, deferred=w)
