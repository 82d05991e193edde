"""Turning a trace (or the built-in demo slice) into engine requests."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from engine.engine import LLMEngine
from engine.request import SamplingParams


@dataclass
class LoadedWorkload:
    """Requests ready to add, plus what the user should be told about them."""

    requests: list            # recordings.workload.WorkloadRequest
    trace_info: dict          # name, sha256, rows, malformed rows, scaling notes (for provenance)
    notes: list[str]          # human-readable lines: what was scaled, clipped or skipped


def check_args(args: argparse.Namespace) -> None:
    """Validate the workload flags before anything slow happens. Raises ``ValueError`` naming the
    flag and its limit."""
    from recordings.workload import check_workload_arguments

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    if args.steps_per_second <= 0:
        raise ValueError(f"--steps-per-second must be > 0, got {args.steps_per_second}")
    check_workload_arguments(args.time_scale, args.prompt_scale, args.output_scale, args.min_prompt_tokens,
                             args.max_prompt_tokens, args.min_output_tokens, args.max_output_tokens)


def read_trace(args: argparse.Namespace):
    """Load ``args.trace`` (or the built-in demo slice when it is None): a ``TraceLoad``.
    Raises ``FileNotFoundError`` or ``recordings.traces.TraceFormatError`` with the path."""
    from recordings.traces import load_trace
    from recordings.workload import demo_trace_path

    path = Path(args.trace) if args.trace else demo_trace_path()
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path}")
    return load_trace(path, limit=args.limit)


def load_workload(args: argparse.Namespace, load, tokenizer, vocab_size: int | None = None) -> LoadedWorkload:
    """Scale the rows of ``load`` (a ``TraceLoad``) into requests per ``args``."""
    from recordings.workload import build_workload

    wl = build_workload(load.rows, tokenizer, time_scale=args.time_scale,
                        max_prompt_tokens=args.max_prompt_tokens, max_output_tokens=args.max_output_tokens,
                        prompt_scale=args.prompt_scale, output_scale=args.output_scale,
                        min_prompt_tokens=args.min_prompt_tokens, min_output_tokens=args.min_output_tokens,
                        seed=args.seed, vocab_size=vocab_size, block_size=args.block_size)
    skipped = [f"line {e.line_no}: {e.message}" for e in load.errors]
    info = {"name": Path(load.path).name, "path": str(load.path), "sha256": load.sha256,
            "num_rows": len(load.rows), "num_malformed_rows": len(load.errors),
            "scaling": list(wl.scaling_notes), "skipped_rows": skipped[:20], "time_scale": args.time_scale}
    if wl.prefix_sharing is not None:
        info["prefix_sharing"] = wl.prefix_sharing.to_dict()
    notes = list(wl.scaling_notes)
    notes += [f"skipped malformed row {line}" for line in skipped[:5]]
    if len(skipped) > 5:
        notes.append(f"... and {len(skipped) - 5} more malformed rows skipped")
    return LoadedWorkload(wl.requests, info, notes)


def add_workload(engine: LLMEngine, requests: list, *, clock: str, steps_per_second: float = 10.0) -> None:
    """Queue every request at its arrival time (seconds, or steps under the virtual clock).
    EOS is ignored so output lengths follow the trace."""
    base = engine.now()
    for w in requests:
        # Virtual clock: a request arrives before the first step at or after its trace time.
        at = math.ceil(w.arrival_s * steps_per_second - 1e-9) if clock == "virtual" else w.arrival_s
        engine.add_request(w.prompt_token_ids, SamplingParams(max_tokens=w.max_tokens, ignore_eos=True),
                           request_id=w.request_id, arrival_time=base + at, prompt_text=w.prompt_text)
