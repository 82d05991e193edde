"""BatchScope's own JSONL workload format: one request per line (see docs/workloads.md).

A line is a JSON object with ``arrival`` (seconds after the run starts), exactly one of
``prompt`` (text), ``prompt_tokens`` (a length: synthetic tokens) or ``prompt_token_ids``, exactly
one of ``max_tokens`` (a cap: generation may stop at EOS) or ``output_tokens`` (an exact length:
EOS ignored, as in a trace replay), and optionally ``priority``, ``temperature``, ``top_p``,
``top_k``, ``seed``, ``n`` (vLLM's sampling names), ``hash_ids`` (Mooncake's prefix-block ids, with
``prompt_tokens`` only) and ``request_id``. Fields are checked by a pydantic model (unknown
fields, wrong types and out-of-range values are refused); each bad line becomes a
``recordings.workloads.rows.TraceRowError`` naming its line, the field and the limit, and every good line
is kept. Lines are decoded one by one, so bytes that are not UTF-8 spoil only their own line.
No torch, no Qt.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from recordings.workloads.rows import MAX_HASH_ID, MAX_TRACE_TOKENS, TraceLoad, TraceRow, TraceRowError

FORMAT = "batchscope-jsonl"
TITLE = "a BatchScope JSONL workload"
EXPECTED = ("JSON lines with arrival and one of prompt, prompt_tokens, prompt_token_ids "
            "(see docs/workloads.md)")
PROMPT_KEYS = ("prompt", "prompt_tokens", "prompt_token_ids")
LENGTH_KEYS = ("max_tokens", "output_tokens")
MAX_ARRIVAL_S = 10_000_000.0          # ~116 days: a later arrival is a bad row
MAX_TOKEN_ID = (1 << 31) - 1          # prompt ids are kept as 32-bit integers
MAX_PROMPT_CHARS = 1 << 22           # 4,194,304 characters of prompt text
MAX_N = 256                           # sequences per prompt (parallel sampling)
MAX_REQUEST_ID_CHARS = 200

_Count = Annotated[int, Field(ge=1, le=MAX_TRACE_TOKENS)]


class WorkloadLine(BaseModel):
    """One line of the format, as pydantic validates it (strict types: ``true`` is not 1, ``"3"``
    is not 3; JSON's ``Infinity``/``NaN`` and numbers out of range are refused)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    arrival: float = Field(ge=0, le=MAX_ARRIVAL_S, allow_inf_nan=False)
    prompt: str | None = Field(None, min_length=1, max_length=MAX_PROMPT_CHARS)
    prompt_tokens: _Count | None = None
    prompt_token_ids: list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]] | None = Field(
        None, min_length=1, max_length=MAX_TRACE_TOKENS)
    max_tokens: _Count | None = None
    output_tokens: _Count | None = None
    priority: int = Field(0, ge=-(1 << 31), le=(1 << 31) - 1)
    temperature: float = Field(0.0, ge=0, le=1e4, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(0, ge=0, le=MAX_TOKEN_ID)
    seed: int | None = Field(None, ge=0, le=(1 << 63) - 1)
    n: int = Field(1, ge=1, le=MAX_N)
    hash_ids: list[Annotated[int, Field(ge=0, le=MAX_HASH_ID)]] | None = Field(
        None, max_length=MAX_TRACE_TOKENS)
    request_id: str | None = Field(None, min_length=1, max_length=MAX_REQUEST_ID_CHARS)

    @field_validator("request_id")
    @classmethod
    def _plain_id(cls, value: str | None) -> str | None:
        if value is not None and ("#" in value or any(c.isspace() for c in value)):
            raise ValueError("no whitespace or '#' allowed ('#' names the sequences of n > 1)")
        return value

    @model_validator(mode="after")
    def _one_prompt_one_length(self) -> "WorkloadLine":
        for keys in (PROMPT_KEYS, LENGTH_KEYS):
            given = [k for k in keys if getattr(self, k) is not None]
            if len(given) != 1:
                raise ValueError(f"give exactly one of {', '.join(keys)}"
                                 + (f" (found {', '.join(given)})" if given else ""))
        if self.hash_ids and self.prompt_tokens is None:
            raise ValueError("hash_ids need prompt_tokens (a length): with prompt or "
                             "prompt_token_ids the prompt's tokens are already fixed")
        return self


@dataclass(frozen=True)
class RequestSpec:
    """What a line says beyond arrival and counts (``TraceRow.spec``): the prompt as text or ids
    (``None`` each for a length only), vLLM sampling fields, ``priority``, the ``request_id`` (None:
    numbered by the workload) and ``ignore_eos`` (True for ``output_tokens``, False for
    ``max_tokens``)."""

    prompt_text: str | None
    prompt_token_ids: tuple[int, ...] | None
    priority: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    n: int
    request_id: str | None
    ignore_eos: bool

    def sampling_kwargs(self) -> dict[str, Any]:
        """``engine.request.SamplingParams`` keywords other than ``max_tokens``/``ignore_eos``."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "seed": self.seed, "n": self.n, "priority": self.priority}


def is_workload_line(line: str) -> bool:
    """True when ``line`` (a file's first non-blank line) is a JSON object with ``arrival`` or
    one of the prompt fields: this format, not Mooncake's (``timestamp``, ``input_length``), even
    when that first row is itself bad (it is then reported like any other)."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and any(k in obj for k in ("arrival", *PROMPT_KEYS))


def parse_line(line_no: int, line: bytes | str) -> TraceRow:
    """One line as a :class:`recordings.workloads.rows.TraceRow` with its :class:`RequestSpec`. Raises
    ``ValueError`` naming the problem: not UTF-8, not JSON, or each failed field with its limit."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"not UTF-8 (byte {e.start} of the line)") from None
    try:
        row = WorkloadLine.model_validate_json(line)
    except ValidationError as e:
        raise ValueError(_describe(e)) from None
    ids = tuple(row.prompt_token_ids) if row.prompt_token_ids is not None else None
    num_prompt = row.prompt_tokens or (len(ids) if ids is not None else 0)
    spec = RequestSpec(prompt_text=row.prompt, prompt_token_ids=ids, priority=row.priority,
                       temperature=row.temperature, top_p=row.top_p, top_k=row.top_k,
                       seed=row.seed, n=row.n, request_id=row.request_id,
                       ignore_eos=row.output_tokens is not None)
    return TraceRow(line_no, float(row.arrival), num_prompt,
                    row.output_tokens or row.max_tokens or 0, tuple(row.hash_ids or ()), spec)


def _describe(error: ValidationError) -> str:
    """'prompt_tokens: Input should be less than or equal to 16777216 (got 99999999999)'; JSON
    syntax errors and whole-line checks without a field name."""
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(x) for x in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "json_invalid":
            message = f"not valid JSON ({item.get('ctx', {}).get('error', message)})"
        elif item["type"] == "extra_forbidden":
            message = (f"unknown field (fields: arrival, {', '.join(PROMPT_KEYS + LENGTH_KEYS)}, "
                       f"priority, temperature, top_p, top_k, seed, n, hash_ids, request_id)")
        elif item["type"] == "model_type":
            message = f"expected a JSON object, found {type(item['input']).__name__}"
        elif "input" in item and where and not isinstance(item["input"], (dict, list)):
            message += f" (got {str(item['input'])[:40]!r})"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def load_workload_jsonl(path: str | Path, limit: int | None = None, *,
                        data: bytes | None = None) -> TraceLoad:
    """Load a JSONL workload: a ``TraceLoad`` with format ``"batchscope-jsonl"``, rows sorted by
    arrival (stable; times are kept as written, not shifted to start at 0) and one
    ``TraceRowError`` per bad line (line number, field, limit). A ``request_id`` already used by
    an earlier line makes the later line bad. ``limit`` keeps the first ``limit`` good lines.
    ``data``: the file's bytes when already read. Raises ``OSError`` if the file cannot be read.
    """
    path = Path(path)
    data = path.read_bytes() if data is None else data
    load = TraceLoad(path=path, sha256=hashlib.sha256(data).hexdigest(), format=FORMAT)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    seen: dict[str, int] = {}
    rows = []
    for line_no, raw in enumerate(data.split(b"\n"), 1):
        if limit is not None and len(rows) >= limit:
            break
        raw = raw.removesuffix(b"\r")
        if not raw.strip():
            continue
        try:
            row = parse_line(line_no, raw)
            rid = row.spec.request_id
            if rid is not None and rid in seen:
                raise ValueError(f"request_id: {rid!r} is already used on line {seen[rid]}")
        except ValueError as e:
            load.errors.append(TraceRowError(line_no, str(e), raw.decode("utf-8", "replace")[:200]))
            continue
        if rid is not None:
            seen[rid] = line_no
        rows.append(row)
    load.rows = sorted(rows, key=lambda r: r.arrival_s)
    return load

