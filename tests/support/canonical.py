"""Plain-data pictures of states and step records, for fixtures written by one version of
BatchScope and compared by another (``tests/data/fixtures/make_v3_fixture.py``).

:func:`state_data` / :func:`record_data` turn an :class:`engine.state.state.EngineState` /
:class:`engine.outputs.StepRecord` into JSON-ready dicts and lists (NaN as ``None``, tuples as
lists), so two objects are equal exactly when their pictures are (``json.dumps`` then
``json.loads`` gives the same picture back).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from engine.outputs import StepRecord
from engine.state.state import COLUMNS, EngineState


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: numpy arrays and tuples as lists, NaN as ``None``,
    named tuples and dataclasses as lists of their fields."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [plain(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def state_data(state: EngineState) -> dict[str, Any]:
    """Every field :meth:`EngineState.__eq__` compares, as plain data."""
    return {
        "step": state.step, "clock": plain(state.clock),
        "num_total_blocks": state.num_total_blocks, "block_size": state.block_size,
        "max_num_seqs": state.max_num_seqs, "next_seq": state.next_seq,
        "request_ids": list(state.request_ids),
        "columns": {k: plain(state.columns[k]) for k in COLUMNS},
        **{k: plain(getattr(state, k)) for k in ("block_owner", "block_pos", "block_hash",
                                                 "shared_seq", "shared_block", "cpu_owner")},
        "recently_finished": plain(state.recently_finished),
    }


def record_data(record: StepRecord) -> dict[str, Any]:
    """Every field of ``record`` as plain data (its fields' names as keys)."""
    return {f.name: plain(getattr(record, f.name)) for f in dataclasses.fields(record)}


def as_recorded(data: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a :func:`state_data`) cut to what ``expected`` (one written by older code) holds:
    the state columns it has, and its finished rows' fields (newer code appends columns and
    fields, never changes the old ones)."""
    out = dict(data)
    out["columns"] = {k: v for k, v in data["columns"].items() if k in expected["columns"]}
    out["recently_finished"] = [row[:len(old)] for row, old in
                                zip(data["recently_finished"], expected["recently_finished"])] + \
        data["recently_finished"][len(expected["recently_finished"]):]
    return out
