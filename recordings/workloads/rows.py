"""What every workload importer produces: trace rows, the lines that were not rows, and a loaded
file. Plain data, no torch, no Qt."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_TRACE_TOKENS = 1 << 24      # prompt or output tokens of one row (16,777,216): a bigger count is a bad row
MAX_HASH_ID = (1 << 63) - 1     # hash ids are hashed as unsigned 64-bit numbers


class TraceFormatError(ValueError):
    """The file is not a trace of the expected format (wrong header, not CSV/JSONL, not text).
    The message names the file and what was expected."""


class EmptyWorkload(ValueError):
    """No request of a workload can be served: every row is malformed (any format) or cannot be
    served by this engine (a text prompt without a tokenizer, an id over the vocabulary). One
    message for every format and executor: the file, how many rows were refused, the first
    reasons. A bad input, as a missing file is (``batchscope`` exits 2)."""

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
        super().__init__(f"{path}: no request to serve: "
                         + (f"its one row was refused ({shown})" if len(problems) == 1 else
                            f"all {len(problems)} rows were refused ({shown})" if problems
                            else "the workload has no rows"))
        self.path, self.problems = Path(path), list(problems)


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace.

    ``line_no`` is the 1-based line of the file it came from; ``arrival_s`` is seconds after the
    earliest valid row (0.0 for it); ``hash_ids`` are Mooncake's prefix-block ids (one per
    512-token block of the prompt; empty for Azure). ``spec`` is what a row of BatchScope's JSONL
    workload format says beyond counts (a ``recordings.workloads.jsonl.RequestSpec``: prompt text
    or ids, sampling, priority, request id); ``None`` for the other formats.
    """

    line_no: int
    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    hash_ids: tuple[int, ...] = ()
    spec: Any = None


@dataclass(frozen=True)
class TraceRowError:
    """A line that could not be read as a row: its 1-based number, the problem, the raw text."""

    line_no: int
    message: str
    raw: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.message}"


@dataclass
class TraceLoad:
    """The result of loading a trace file: valid rows in arrival order, the lines that were not,
    the file (``sha256`` of its bytes, for provenance) and its ``format`` (``AZURE``/``MOONCAKE``).
    ``unknown_keys``: keys a row carried that its format does not define (a Mooncake row's
    ``output_lenght``), each with the file lines it was on, in file order; the rows were kept."""

    path: Path
    sha256: str
    format: str
    rows: list[TraceRow] = field(default_factory=list)
    errors: list[TraceRowError] = field(default_factory=list)
    unknown_keys: dict[str, list[int]] = field(default_factory=dict)

    def unknown_key_lines(self, max_lines: int = 5) -> list[str]:
        """One line per unknown key, most frequent first: the key (escaped, cut to 40 characters),
        how many rows carried it and its first ``max_lines`` line numbers; [] when there were none."""
        out = []
        for key, lines in sorted(self.unknown_keys.items(), key=lambda kv: (-len(kv[1]), kv[1][0])):
            shown = ", ".join(map(str, lines[:max_lines])) + (", ..." if len(lines) > max_lines else "")
            where = f"line {shown}" if len(lines) == 1 else f"{len(lines):,} rows, lines {shown}"
            name = ascii(key) if len(key) <= 40 else ascii(key[:39] + "…")
            out.append(f"unknown key {name} ({where})")
        return out

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival (0.0 for fewer than two rows)."""
        return self.rows[-1].arrival_s if self.rows else 0.0
