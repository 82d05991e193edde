"""A recording as two CSV files: one row per request and one row per step.

The columns are the recording's own (docs/recording.md), so the CSVs and SQL on the file agree:
every column of ``requests`` except the prompt (``prompt_token_ids``, ``prompt_text``) and the
JSON payloads, plus ``priority`` (from the sampling parameters) and ``e2e_request_latency``
(vLLM's name: the finish step's ``token_time`` minus ``arrival_time``); every column of
``steps`` except the ``*_json`` arrays, plus ``num_prefill_tokens`` (tokens computed by prefill
chunks in the step; the rest of ``num_scheduled_tokens`` is decode). Times are on the run's
engine clock (steps, seconds or simulated seconds: the ``clock`` of ``batchscope summary``);
``*_ns`` columns are wall nanoseconds. NULL is an empty field. Rows are read and written in
chunks (:data:`ROWS_PER_QUERY`), never the whole table at once.

Recordings come from others, and a spreadsheet runs a cell that starts with ``=`` as a formula
(a request id ``=HYPERLINK(...)``): a text value (a ``str`` read from the file) that starts with
one of :data:`FORMULA_PREFIXES` is written with a leading apostrophe, as OWASP's "CSV Injection"
guidance says; numbers are written as they are (``-1`` stays a number).
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable
from engine.vocab import NotAdmittedReason

from recordings.file.schema import prefill_tokens_sql

ROWS_PER_QUERY = 2048
REQUEST_FILE, STEP_FILE = "requests.csv", "steps.csv"
_LEFT_OUT = {"prompt_token_ids", "prompt_text", "batch"}   # blobs and text
# first characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralised(row) -> list:
    """``row``'s values with each text value (``str``) that starts with one of
    :data:`FORMULA_PREFIXES` prefixed by an apostrophe (a spreadsheet shows it as text); numbers
    and ``None`` unchanged."""
    return [f"'{v}" if v.__class__ is str and v.startswith(FORMULA_PREFIXES) else v for v in row]


def csv_paths(out: str | Path) -> tuple[Path, Path]:
    """Where the request and step CSVs of ``out`` go: ``out/requests.csv`` and
    ``out/steps.csv`` when ``out`` is an existing folder (or ends with a path separator),
    else ``<out>-requests.csv`` and ``<out>-steps.csv`` (a trailing ``.csv`` is dropped)."""
    text = str(out)
    path = Path(out)
    if path.is_dir() or text.endswith(("/", "\\")):
        return path / REQUEST_FILE, path / STEP_FILE
    stem = text[:-4] if text.lower().endswith(".csv") else text
    return Path(f"{stem}-{REQUEST_FILE}"), Path(f"{stem}-{STEP_FILE}")


def _columns(reader, table: str) -> list[str]:
    return [r[1] for r in reader.execute(f"PRAGMA table_info({table})")
            if not r[1].endswith("_json") and r[1] not in _LEFT_OUT]


def export_csv(reader, out: str | Path, progress: Callable[[int], object] | None = None
               ) -> tuple[Path, int, Path, int]:
    """Write the requests and steps of the recording open in ``reader`` to the two files
    :func:`csv_paths` names for ``out`` (creating a missing folder ``out``). ``progress(n)`` is
    called after each chunk of ``n`` steps. Returns (request file, rows, step file, rows).
    Raises ``RecordingError`` for an unreadable recording, ``OSError`` if a file cannot be
    written."""
    requests_path, steps_path = csv_paths(out)
    requests_path.parent.mkdir(parents=True, exist_ok=True)
    has = {r[1] for r in reader.execute("PRAGMA table_info(requests)")}
    step_has = {r[1] for r in reader.execute("PRAGMA table_info(steps)")}
    header = _columns(reader, "requests")
    select = [f"r.{c}" for c in header]
    join = ""
    if "sampling_json" in has:
        select.append("coalesce(json_extract(r.sampling_json, '$.priority'), 0)")   # schema 5 omits 0
        header.append("priority")
    if "token_time" in step_has:
        select.append("s.token_time - r.arrival_time")
        header.append("e2e_request_latency")
        join = "LEFT JOIN steps s ON s.step = r.finish_step"
    num_requests = _write(requests_path, header, reader,
                          f"SELECT r.rowid, {', '.join(select)} FROM requests r {join} "
                          "WHERE r.rowid >= ? ORDER BY r.rowid")
    # num_prefill_tokens last, whichever schema (a column in 4, computed from the JSON in 2, 3)
    step_header = [c for c in _columns(reader, "steps") if c != "num_prefill_tokens"]
    # NULL waiting_reason: every waiting request was behind an older one (docs/recording.md);
    # a step with nobody waiting has no reason (empty cell)
    reason = f"coalesce(waiting_reason, '{NotAdmittedReason.BEHIND}')"
    if "num_waiting" in step_header:
        reason = f"CASE WHEN num_waiting > 0 THEN {reason} END"
    step_select = [reason if c == "waiting_reason" else c for c in step_header]
    if "batch_prefill_json" in step_has or "num_prefill_tokens" in step_has:
        step_select.append(prefill_tokens_sql(4 if "num_prefill_tokens" in step_has else 3))
        step_header.append("num_prefill_tokens")
    num_steps = _write(steps_path, step_header, reader,
                       f"SELECT step, {', '.join(step_select)} FROM steps WHERE step >= ? "
                       "ORDER BY step", progress)
    return requests_path, num_requests, steps_path, num_steps


def _write(path: Path, header: list[str], reader, sql: str, progress=None) -> int:
    """Write ``header`` and the rows of ``sql`` (its first column an ascending unique key,
    left out of the file; one ``?`` for the key's lower bound), :data:`ROWS_PER_QUERY` rows a
    query. Returns the number of rows written."""
    n, lo = 0, -(2 ** 62)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        while True:
            rows = reader.execute(f"{sql} LIMIT {ROWS_PER_QUERY}", (lo,))
            writer.writerows(neutralised(r[1:]) for r in rows)
            n += len(rows)
            if progress is not None and rows:
                progress(len(rows))
            if len(rows) < ROWS_PER_QUERY:
                return n
            lo = rows[-1][0] + 1
