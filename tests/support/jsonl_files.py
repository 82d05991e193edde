"""Writing JSON-lines trace files for the workload tests."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


def write_jsonl(path: Path, rows: Iterable[object]) -> Path:
    """Write each of ``rows`` as one JSON line to ``path``; returns ``path``."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
