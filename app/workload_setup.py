"""Turning a trace (or the built-in demo slice) into engine requests."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from engine.engine import LLMEngine
from engine.request import SamplingParams


@dataclass
class LoadedWorkload:
    """Requests ready to add, plus what the user should be told about them."""

    requests: list            # recordings.workload.WorkloadRequest
    trace_info: dict          # name, sha256, rows, malformed rows, scaling notes (for provenance)
    notes: list[str]          # human-readable lines: what was scaled, clipped or skipped


def load_workload(args: argparse.Namespace, tokenizer, vocab_size: int | None = None) -> LoadedWorkload:
    """Read ``args.trace`` (or the built-in demo slice when it is None) and scale it per ``args``.
    Raises ``recordings.traces.TraceFormatError`` for a file that is not a known trace."""
    from recordings.traces import load_trace
    from recordings.workload import build_workload, demo_trace_path

    path = args.trace or demo_trace_path()
    load = load_trace(path, limit=args.limit)
    wl = build_workload(load.rows, tokenizer, time_scale=args.time_scale,
                        max_prompt_tokens=args.max_prompt_tokens, max_output_tokens=args.max_output_tokens,
                        prompt_scale=args.prompt_scale, output_scale=args.output_scale,
                        min_prompt_tokens=args.min_prompt_tokens, min_output_tokens=args.min_output_tokens,
                        seed=args.seed, vocab_size=vocab_size)
    notes = list(wl.scaling_notes)
    for err in load.errors[:5]:
        notes.append(f"skipped malformed row: line {err.line_no}: {err.message}")
    if len(load.errors) > 5:
        notes.append(f"... and {len(load.errors) - 5} more malformed rows skipped")
    info = {"name": str(path).rsplit("/", 1)[-1], "path": str(path), "sha256": load.sha256,
            "num_rows": len(load.rows), "num_malformed_rows": len(load.errors), "scaling": notes,
            "time_scale": args.time_scale}
    return LoadedWorkload(wl.requests, info, notes)


def add_workload(engine: LLMEngine, requests: list, *, clock: str, steps_per_second: float = 10.0) -> None:
    """Queue every request at its arrival time (seconds, or steps under the virtual clock).
    EOS is ignored so output lengths follow the trace."""
    base = engine.now()
    for w in requests:
        at = w.arrival_s * steps_per_second if clock == "virtual" else w.arrival_s
        engine.add_request(w.prompt_token_ids, SamplingParams(max_tokens=w.max_tokens, ignore_eos=True),
                           request_id=w.request_id, arrival_time=base + at, prompt_text=w.prompt_text)
