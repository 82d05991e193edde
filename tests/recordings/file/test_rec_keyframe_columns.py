"""Keyframes written before a state column existed (same schema version) still decode: the
missing column reads as zeros and every other column is exact."""
from __future__ import annotations

import io

import numpy as np

from engine.state.state import COLUMNS
from recordings.file import codec


def _old_style_blob(state, drop: str) -> bytes:
    """A keyframe as early version-2 files stored it: request ids and every column inline,
    without the column ``drop``."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf, scalars=np.array([state.step, state.num_total_blocks, state.block_size,
                               state.max_num_seqs, state.next_seq], np.int64),
        clock=np.array([state.clock], np.float64), request_ids=np.array(state.request_ids),
        block_owner=state.block_owner, block_pos=state.block_pos,
        **{f"col_{k}": v for k, v in state.columns.items() if k != drop})
    return buf.getvalue()


def test_keyframe_without_a_later_column_decodes(recorded):
    state = next(s for s in recorded.states if len(s.request_ids) >= 2)
    blob = _old_style_blob(state, drop="priority")
    finished = codec.finished_json(state.recently_finished)
    back = codec.state_from_blob(blob, finished, static_of=None)
    assert back.request_ids == state.request_ids
    assert back.step == state.step
    assert np.array_equal(back.columns["priority"], np.zeros(len(state.request_ids), COLUMNS["priority"]))
    for name in COLUMNS:
        if name != "priority":
            assert np.array_equal(back.columns[name], state.columns[name]), name
    assert np.array_equal(back.block_owner, state.block_owner)
