"""The recorded workload as a Mooncake JSONL trace, to replay it with ``batchscope run --trace``.

One line per request that arrived, in arrival order: ``{"timestamp": ms, "input_length": n,
"output_length": n, "hash_ids": [...]}`` (Mooncake's format, read by
``recordings.workloads.traces.load_mooncake_jsonl``):

- ``timestamp``: the request's ``arrival_time`` in milliseconds on the run's clock (wall or
  simulated seconds x 1000; under the virtual clock ``arrival_step * 1000 / steps_per_second``,
  so ``batchscope run --clock virtual`` with the same ``--steps-per-second`` puts every request
  in the same step again); an integer when whole, else to the microsecond.
- ``input_length``: ``num_prompt_tokens`` as recorded (after any scaling of the original
  trace); ``output_length``: the request's ``max_tokens`` (what it asked for: a trace replay
  ignores EOS, so it generates exactly that many).
- ``hash_ids``: when the recording stored the prompt token ids, one id per 512-token block of
  the prompt (the last one partial), chained like vLLM's prefix hashes
  (``engine.kv.prefix_hash.hash_block``: equal ids = equal whole prefixes) and numbered from 0 in
  order of first appearance, as Mooncake numbers them. Runs with synthetic prompts (the
  simulated executor) store no ids: the lines then have no ``hash_ids`` and the export says so.

Sequences forked by parallel sampling (``n`` > 1) are left out: their group's first sequence
stands for the prompt (a trace has no ``n``); the export counts them. Requests are read
:data:`ROWS_PER_QUERY` at a time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.kv.prefix_hash import ROOT_HASH, hash_block
from recordings.file import codec
from recordings.export.timebase import time_base
from engine.vocab import Clock

ROWS_PER_QUERY = 2048
HASH_BLOCK_TOKENS = 512        # Mooncake's hash block (FAST'25 traces)


@dataclass
class MooncakeExport:
    """What was written: the file, its lines, whether they carry ``hash_ids`` and notes for
    the user (what was left out and why)."""

    path: Path
    num_rows: int = 0
    num_with_hash_ids: int = 0
    notes: list[str] = field(default_factory=list)


class HashIds:
    """Mooncake-style hash ids of prompts: block ``i`` of a prompt gets the id of its chained
    hash (the block's tokens and every block before it), ids numbered from 0 in order of first
    appearance. Holds one entry per distinct prefix block seen."""

    def __init__(self, block_tokens: int = HASH_BLOCK_TOKENS) -> None:
        if block_tokens < 1:
            raise ValueError(f"hash block size must be >= 1 token, got {block_tokens}")
        self.block_tokens = block_tokens
        self._ids: dict[int, int] = {}

    def of(self, token_ids) -> list[int]:
        """The ids of ``token_ids``' blocks (``ceil(len / block_tokens)`` of them)."""
        out, parent, b = [], ROOT_HASH, self.block_tokens
        for start in range(0, len(token_ids), b):
            parent = hash_block(parent, tuple(token_ids[start:start + b]))
            out.append(self._ids.setdefault(parent, len(self._ids)))
        return out


def _number(ms: float) -> int | float:
    return int(ms) if float(ms).is_integer() else ms


def export_mooncake(reader, path: str | Path, *, steps_per_second: float = 10.0,
                    hash_block_tokens: int = HASH_BLOCK_TOKENS,
                    progress: Callable[[int], object] | None = None) -> MooncakeExport:
    """Write the workload of the recording open in ``reader`` to ``path`` as Mooncake JSONL
    (see the module doc). ``steps_per_second`` maps virtual-clock steps to time;
    ``progress(n)`` is called after each chunk of ``n`` requests. Raises ``ValueError`` for a
    ``steps_per_second`` <= 0, ``RecordingError`` for an unreadable recording or a schema-1
    file (it has no request numbers), ``OSError`` if ``path`` cannot be written."""
    if not steps_per_second > 0:
        raise ValueError(f"--steps-per-second must be > 0, got {steps_per_second}")
    tb = time_base(reader.run_info(), 1e6 / steps_per_second)
    columns = {r[1] for r in reader.execute("PRAGMA table_info(requests)")}
    if "seq" not in columns:
        from recordings.errors import RecordingError
        raise RecordingError(f"{reader.path}: a schema-1 recording; open and re-record it with "
                             "this release to export its workload")
    forked = {s for (s,) in reader.execute("SELECT DISTINCT seq FROM events WHERE kind = 'forked'")}
    hashes = HashIds(hash_block_tokens)
    result = MooncakeExport(Path(path))
    lo = -1
    with result.path.open("w", encoding="utf-8") as f:
        while True:
            rows = reader.execute(
                "SELECT seq, arrival_time, num_prompt_tokens, max_tokens, prompt_token_ids "
                f"FROM requests WHERE seq > ? ORDER BY seq LIMIT {ROWS_PER_QUERY}", (lo,))
            for seq, arrival, num_prompt, max_tokens, blob in rows:
                if seq in forked:
                    continue
                line = {"timestamp": _number(tb.ms(arrival)), "input_length": num_prompt,
                        "output_length": max_tokens}
                tokens = codec.tokens_from_blob(blob)
                if tokens is not None:
                    line["hash_ids"] = hashes.of(tokens)
                    result.num_with_hash_ids += 1
                f.write(json.dumps(line) + "\n")
                result.num_rows += 1
            if progress is not None and rows:
                progress(len(rows))
            if len(rows) < ROWS_PER_QUERY:
                break
            lo = rows[-1][0]
    if forked:
        result.notes.append(f"{len(forked)} sequences forked by parallel sampling left out (a trace "
                            "has no n: their group's first sequence stands for the prompt)")
    if result.num_with_hash_ids < result.num_rows:
        result.notes.append(f"{result.num_rows - result.num_with_hash_ids} of {result.num_rows} requests "
                            "without hash_ids: the recording did not store their prompt token ids "
                            "(synthetic prompts of a simulated run)")
    if tb.clock == Clock.VIRTUAL:
        result.notes.append(f"virtual clock: timestamps at {1000 / steps_per_second:g} ms per step "
                            f"(replay with --clock virtual --steps-per-second {steps_per_second:g} "
                            "for the same arrival steps)")
    return result
