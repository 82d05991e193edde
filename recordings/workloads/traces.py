"""Importers for production serving traces: Azure LLM inference CSV and Mooncake JSONL (and,
through ``recordings.workloads.jsonl``, BatchScope's own JSONL workload format).

A trace row is one request: when it arrived and how many prompt and output tokens it had (no text).
Loading never stops at a bad row: each malformed line becomes a ``TraceRowError`` with its line
number and every other row is kept. Only a file that is not the expected format at all raises
``TraceFormatError``. No torch, no Qt.
"""
from __future__ import annotations

import csv
import datetime as dt
import difflib
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from recordings.workloads import jsonl as workload_jsonl
from recordings.workloads.rows import (MAX_HASH_ID, MAX_TRACE_TOKENS, TraceFormatError, TraceLoad, TraceRow,  # noqa: F401
                                       TraceRowError)  # (re-exported: the importers' results)

AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
MOONCAKE_OPTIONAL_KEYS = ("hash_ids",)
MAX_TIMESTAMP = 1 << 62    # |Mooncake timestamp| in ms; above: a bad row (seconds would overflow a float)
AZURE = "azure-csv"
MOONCAKE = "mooncake-jsonl"

_TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class _Parsed:
    """A row before arrival times are made relative: ``time`` in the file's own unit."""

    line_no: int
    time: int | float
    num_prompt_tokens: int
    num_output_tokens: int
    hash_ids: tuple[int, ...] = ()
    unknown_keys: tuple[str, ...] = ()     # keys of the row that the format does not define


def load_azure_csv(path: str | Path, limit: int | None = None) -> TraceLoad:
    """Load an Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Timestamps are wall-clock strings with up to 9 fractional digits (Azure writes 7), read exactly
    to the nanosecond. ``limit`` keeps only the first ``limit`` valid rows. Raises
    ``TraceFormatError`` if the header is not Azure's, ``OSError`` if the file cannot be read.
    """
    path = Path(path)
    return _load(path, *_read_text(path), _AZURE, limit)


def load_mooncake_jsonl(path: str | Path, limit: int | None = None, *, strict: bool = False) -> TraceLoad:
    """Load a Mooncake trace: JSON lines ``{"timestamp": ms, "input_length": n,
    "output_length": n, "hash_ids": [...]}``.

    ``limit`` keeps only the first ``limit`` valid rows. A row with other keys (a misspelt
    ``output_lenght``) is kept and its keys are listed in ``TraceLoad.unknown_keys`` with their
    lines; with ``strict`` the file is refused instead. Raises ``TraceFormatError`` if the first
    non-blank line is not such an object (or, under ``strict``, naming the unknown keys and their
    lines), ``OSError`` if the file cannot be read.
    """
    path = Path(path)
    return _checked(_load(path, *_read_text(path), _MOONCAKE, limit), strict)


def load_trace(path: str | Path, limit: int | None = None, *, strict: bool = False) -> TraceLoad:
    """Load a trace of any supported format, recognised by its first non-blank line: Azure's CSV
    header, a Mooncake JSON object, or a row of BatchScope's JSONL workload format
    (``recordings.workloads.jsonl``; its lines are decoded one by one, so a line that is not
    UTF-8 is one bad row, and a field it does not define makes the line bad). Mooncake rows with
    keys the format does not define are kept and listed in ``TraceLoad.unknown_keys``, or refused
    under ``strict`` (:func:`load_mooncake_jsonl`). Raises ``TraceFormatError`` naming the
    supported formats when it is none of them, ``OSError`` if the file cannot be read."""

    path = Path(path)
    data = path.read_bytes()
    first = _first_line(_lines(data.decode("utf-8-sig", errors="replace")))[1]
    if workload_jsonl.is_workload_line(first):
        return workload_jsonl.load_workload_jsonl(path, limit, data=data)
    text, sha = _decode(path, data)
    for fmt in (_AZURE, _MOONCAKE):
        if fmt.recognise(first):
            return _checked(_load(path, text, sha, fmt, limit), strict)
    raise TraceFormatError(
        f"{path}: unrecognised trace format (first line {first[:80]!r}); supported: "
        f"{_AZURE.title} ({_AZURE.expected}), {_MOONCAKE.title} ({_MOONCAKE.expected}) and "
        f"{workload_jsonl.TITLE} ({workload_jsonl.EXPECTED})")


# --- formats ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Format:
    name: str
    title: str
    expected: str  # what the first line should be, for error messages
    recognise: Callable[[str], bool]  # given the first non-blank line
    is_header: bool  # the recognised line is a header, not a row
    parse_row: Callable[[int, str], _Parsed]
    units_per_s: int  # of the row times


def _load(path: Path, text: str, sha: str, fmt: _Format, limit: int | None) -> TraceLoad:
    lines = _lines(text)
    first_no, first = _first_line(lines)
    if not fmt.recognise(first):
        found = f"found {first[:80]!r}" if first else "the file is empty"
        raise TraceFormatError(f"{path}: not {fmt.title}: expected {fmt.expected}, {found}")
    load = TraceLoad(path=path, sha256=sha, format=fmt.name)
    start = first_no + 1 if fmt.is_header else first_no
    parsed = _parse_lines(lines, start, fmt.parse_row, limit, load.errors)
    for p in parsed:
        for key in p.unknown_keys:
            load.unknown_keys.setdefault(key, []).append(p.line_no)
    load.rows = _relative(parsed, fmt.units_per_s)
    return load


def _checked(load: TraceLoad, strict: bool) -> TraceLoad:
    """``load``, or under ``strict`` a ``TraceFormatError`` when its rows carried unknown keys."""
    if strict and load.unknown_keys:
        raise TraceFormatError(f"{load.path}: rows with keys the format does not define (refused under "
                               f"--strict; a Mooncake row's keys are {', '.join(MOONCAKE_KEYS + MOONCAKE_OPTIONAL_KEYS)}): "
                               + "; ".join(load.unknown_key_lines()))
    return load


def _is_azure_header(line: str) -> bool:
    return _csv_fields(line) == list(AZURE_HEADER)


def _azure_row(line_no: int, line: str) -> _Parsed:
    fields = _csv_fields(line)
    if len(fields) != len(AZURE_HEADER):
        raise ValueError(f"expected {len(AZURE_HEADER)} fields ({','.join(AZURE_HEADER)}), "
                         f"found {len(fields)}")
    return _Parsed(line_no, _timestamp_ns(fields[0]),
                   _count(fields[1], "ContextTokens"), _count(fields[2], "GeneratedTokens"))


def _is_mooncake_line(line: str) -> bool:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and all(key in obj for key in MOONCAKE_KEYS)


def _mooncake_row(line_no: int, line: str) -> _Parsed:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg}; column {e.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    unknown = tuple(key for key in obj if key not in MOONCAKE_KEYS and key not in MOONCAKE_OPTIONAL_KEYS)
    missing = [key for key in MOONCAKE_KEYS if key not in obj]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}{_misspelt(missing, unknown)}")
    stamp = obj["timestamp"]
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or (
            isinstance(stamp, float) and not math.isfinite(stamp)):
        raise ValueError(f"timestamp is not a number of milliseconds: {_short(stamp)}")
    if abs(stamp) > MAX_TIMESTAMP:
        raise ValueError(f"timestamp {_short(stamp)} is out of range (|ms| <= {MAX_TIMESTAMP})")
    hash_ids = obj.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(_is_count(h) and h <= MAX_HASH_ID for h in hash_ids):
        raise ValueError(f"hash_ids is not a list of integers in [0, {MAX_HASH_ID}]")
    return _Parsed(line_no, stamp, _json_count(obj["input_length"], "input_length"),
                   _json_count(obj["output_length"], "output_length"), tuple(hash_ids), unknown)


def _misspelt(missing: list[str], unknown: tuple[str, ...]) -> str:
    """What to add to a "missing KEY" row error when the row has keys the format does not
    define: each unknown key, with the missing key it is close to (``difflib``), e.g. ``; the
    row has 'output_lenght' (output_length misspelt?)``; "" when it has none."""
    if not unknown:
        return ""
    said = []
    for key in unknown[:5]:
        near = difflib.get_close_matches(key, missing, n=1, cutoff=0.75)
        name = ascii(key) if len(key) <= 40 else ascii(key[:39] + "…")
        said.append(f"{name} ({near[0]} misspelt?)" if near else name)
    more = ", ..." if len(unknown) > 5 else ""
    return f"; the row has keys the format does not define: {', '.join(said)}{more}"


_AZURE = _Format(AZURE, "an Azure LLM inference trace",
                 f"the CSV header {','.join(AZURE_HEADER)!r}", _is_azure_header, True,
                 _azure_row, 1_000_000_000)
_MOONCAKE = _Format(MOONCAKE, "a Mooncake trace",
                    f"JSON lines with {', '.join(MOONCAKE_KEYS)} (and hash_ids)",
                    _is_mooncake_line, False, _mooncake_row, 1000)


# --- shared pieces ------------------------------------------------------------------------------

def _read_text(path: Path) -> tuple[str, str]:
    return _decode(path, path.read_bytes())


def _decode(path: Path, data: bytes) -> tuple[str, str]:
    """(text, sha256 of ``data``); raises ``TraceFormatError`` if ``data`` is not UTF-8."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not a text trace (not UTF-8 at byte {e.start}); expected "
                               f"an Azure CSV or a Mooncake JSONL file") from None
    return text, hashlib.sha256(data).hexdigest()


def _lines(text: str) -> list[str]:
    """Physical lines (LF or CRLF endings), so index i is file line i + 1."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _first_line(lines: list[str]) -> tuple[int, str]:
    """(1-based number, stripped text) of the first non-blank line; (1, "") if there is none."""
    return next(((i, line.strip()) for i, line in enumerate(lines, 1) if line.strip()), (1, ""))


def _csv_fields(line: str) -> list[str]:
    try:
        return [f.strip() for f in next(csv.reader([line]), [])]
    except csv.Error:
        return []


def _parse_lines(lines: list[str], first_line_no: int, parse: Callable[[int, str], _Parsed],
                 limit: int | None, errors: list[TraceRowError]) -> list[_Parsed]:
    """Parse each non-blank line from ``first_line_no`` on; a bad line goes to ``errors``."""
    parsed: list[_Parsed] = []
    for line_no in range(first_line_no, len(lines) + 1):
        if limit is not None and len(parsed) >= limit:
            break
        line = lines[line_no - 1]
        if not line.strip():
            continue
        try:
            parsed.append(parse(line_no, line))
        except (ValueError, csv.Error) as e:
            errors.append(TraceRowError(line_no, str(e), line))
    return parsed


def _relative(parsed: list[_Parsed], units_per_s: int) -> list[TraceRow]:
    """Rows in arrival order (stable), with times in seconds after the earliest row."""
    if not parsed:
        return []
    ordered = sorted(parsed, key=lambda p: p.time)
    base = ordered[0].time
    return [TraceRow(p.line_no, (p.time - base) / units_per_s, p.num_prompt_tokens,
                     p.num_output_tokens, p.hash_ids) for p in ordered]


def _timestamp_ns(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fffffffff]`` as integer nanoseconds since 1970 (no time zone)."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if not match:
        raise ValueError(f"bad TIMESTAMP {text!r} (expected YYYY-MM-DD HH:MM:SS.fffffff)")
    *parts, fraction = match.groups()
    try:
        moment = dt.datetime(*map(int, parts))
    except ValueError as e:
        raise ValueError(f"bad TIMESTAMP {text!r}: {e}") from None
    seconds = (moment - _EPOCH) // dt.timedelta(seconds=1)
    return seconds * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


def _count(text: str, name: str) -> int:
    value = text.strip()
    if re.fullmatch(r"\d+", value):
        return _within_limit(int(value) if len(value) <= 12 else MAX_TRACE_TOKENS + 1, name, value)
    if re.fullmatch(r"-\d+", value):
        raise ValueError(f"{name} is negative: {value}")
    raise ValueError(f"{name} is not a whole number: {text!r}")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _json_count(value: object, name: str) -> int:
    if not _is_count(value):
        shown = repr(_short(value)) if isinstance(value, str) else _short(value)   # "100": a string
        raise ValueError(f"{name} is not a non-negative integer: {shown}")
    return _within_limit(value, name)  # type: ignore[arg-type]


def _within_limit(value: int, name: str, text: object = None) -> int:
    """``value`` unless over ``MAX_TRACE_TOKENS`` (``text``: how the file wrote it, for the message)."""
    if value > MAX_TRACE_TOKENS:
        raise ValueError(f"{name} {_short(value if text is None else text)} is over the limit of "
                         f"{MAX_TRACE_TOKENS} tokens per request")
    return value


def _short(value: object, width: int = 40) -> str:
    """``repr(value)`` (``str`` for text) cut to ``width`` characters: a 10^400 number stays short."""
    if isinstance(value, int) and value.bit_length() >= 4000:
        return f"<{value.bit_length()}-bit integer>"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"
