"""Request-length tables without arrival times (``--lengths sharegpt``), sampled into trace rows.

The shipped table ``data/sharegpt_lengths.csv`` holds the prompt and output token counts of
30,731 ShareGPT conversations (Llama-2 tokenizer), as processed by the Sarathi-Serve authors
(Agrawal et al., OSDI 2024; Apache-2.0; see ``data/ATTRIBUTION.md``). A workload draws requests
from it with replacement, as vLLM's ``benchmark_serving.py`` samples its ShareGPT dataset, and
pairs them with an arrival process (``recordings.workloads.poisson``). No torch, no Qt.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from recordings.workloads.traces import TraceRow

DATA_DIR = Path(__file__).resolve().parent / "data"
TABLES = {"sharegpt": DATA_DIR / "sharegpt_lengths.csv"}
HEADER = ("num_prefill_tokens", "num_decode_tokens")
SOURCES = {"sharegpt": "ShareGPT conversation lengths (Llama-2 tokenizer), processed by the "
                       "Sarathi-Serve authors (Agrawal et al., OSDI 2024; Apache-2.0)"}


@dataclass(frozen=True)
class LengthTable:
    """A table's name, file, sha256 of the file, and its columns as int64 arrays of one length:
    ``num_prompt_tokens`` (the table's ``num_prefill_tokens``) and ``num_output_tokens``
    (``num_decode_tokens``)."""

    name: str
    path: Path
    sha256: str
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.num_prompt_tokens)

    def sample(self, num_requests: int, seed: int = 0) -> list[TraceRow]:
        """``num_requests`` rows drawn uniformly with replacement by
        ``numpy.random.default_rng([seed, 1]).integers`` (a stream apart from the Poisson
        gaps' ``default_rng(seed)``); every arrival is 0.0 (give them times with
        ``recordings.workloads.poisson.with_poisson_arrivals``) and ``line_no`` is the drawn row's line in
        the CSV (the header is line 1). Raises ``ValueError`` for ``num_requests < 1``."""
        if num_requests < 1:
            raise ValueError(f"--num-requests must be >= 1, got {num_requests}")
        picks = np.random.default_rng([seed, 1]).integers(0, len(self), num_requests)
        return [TraceRow(int(i) + 2, 0.0, int(p), int(o)) for i, p, o in
                zip(picks, self.num_prompt_tokens[picks], self.num_output_tokens[picks])]


@lru_cache(maxsize=None)
def load_length_table(name: str) -> LengthTable:
    """The shipped table ``name`` (one of :data:`TABLES`). Raises ``ValueError`` naming the known
    tables for another name, or naming the file and problem if it is not the expected CSV."""
    if name not in TABLES:
        raise ValueError(f"unknown length table {name!r}; known: {', '.join(TABLES)}")
    path = TABLES[name]
    data = path.read_bytes()
    header = data.split(b"\n", 1)[0].decode("ascii", "replace").strip().split(",")
    if tuple(header) != HEADER:
        raise ValueError(f"{path}: expected the header {','.join(HEADER)}, found {','.join(header)}")
    counts = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    if counts.shape[1] != 2 or len(counts) == 0 or (counts < 1).any():
        raise ValueError(f"{path}: expected rows of two positive token counts")
    return LengthTable(name, path, hashlib.sha256(data).hexdigest(),
                       counts[:, 0].copy(), counts[:, 1].copy())


def is_length_table(path: str | Path) -> bool:
    """Whether the file at ``path`` is a request-length table like the shipped ones: a CSV whose
    header starts with :data:`HEADER` (as the Sarathi-Serve ShareGPT file does, with its extra
    ``num_total_tokens,pd_ratio`` columns). Such a file has no arrival times, so it is no trace.
    Reads the first line only; False for a file that cannot be read."""
    try:
        with Path(path).open("rb") as f:
            first = f.readline(4096)
    except OSError:
        return False
    fields = first.decode("utf-8-sig", "replace").strip().split(",")
    return tuple(field.strip() for field in fields[:len(HEADER)]) == HEADER
