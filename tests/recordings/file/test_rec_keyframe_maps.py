"""Schema 5's keyframes that store their block map as the changes since the keyframe before
(``codec.map_changes``): exact round trips of random maps, and a recorded run under prefix
caching whose every keyframe, read cold and in any order, is the live state."""
from __future__ import annotations

import io
import random
import sqlite3

import numpy as np
import pytest

from recordings.errors import RecordingError
from recordings.file import codec
from recordings.file.open_reader import open_reader
from recordings.file import writer
from recordings.file.writer import HASH_BASE_EVERY
from tests.support.engine_driver import run_engine


def _random_map(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(-2, 300, n).astype(np.int64), rng.integers(0, 70_000, n).astype(np.int64)


@pytest.mark.parametrize("share", [0.0, 0.01, 0.5, 1.0])
def test_random_maps_round_trip_through_their_changes(share):
    rng = np.random.default_rng(int(share * 100))
    for n in (1, 7, 4096):
        owner, pos = _random_map(rng, n)
        new_owner, new_pos = owner.copy(), pos.copy()
        change = rng.random(n) < share
        new_owner[change], new_pos[change] = _random_map(rng, int(change.sum()))
        arrays = codec.map_changes((5, owner, pos), new_owner, new_pos)
        assert int(arrays["map_base"][0]) == 5
        assert len(arrays["map_owner"]) == np.count_nonzero((owner != new_owner) | (pos != new_pos))
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        with np.load(io.BytesIO(buf.getvalue())) as z:
            back_owner, back_pos = codec.apply_map_changes((5, owner, pos), z)
        assert np.array_equal(back_owner, new_owner) and np.array_equal(back_pos, new_pos)
        assert back_owner.dtype == back_pos.dtype == np.int64


def test_a_small_pool_keeps_whole_maps(recorded):
    """Below ``MIN_MAP_CHANGE_BLOCKS`` a keyframe's changes would cost more than its map."""
    with open_reader(recorded.path) as reader:
        assert reader.execute("SELECT count(*) FROM keyframes") > [(2,)]
        assert reader.execute("SELECT count(*) FROM keyframes WHERE instr(state_npz, 'map_base.npy')") == [(0,)]


def test_changes_against_a_map_of_another_size_are_refused():
    owner = np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="8 blocks against a base of 4"):
        codec.map_changes((0, owner[:4], owner[:4]), owner, owner)


def test_a_keyframe_stored_against_a_base_decodes_only_with_it(recorded):
    states = [s for s in recorded.states if (s.block_owner >= 0).any()]
    base, state = states[0], states[-1]
    blob, finished = codec.state_blob(state, map_base=(base.step, base.block_owner, base.block_pos))
    seqs = state.columns["seq"]
    static = (state.request_ids, {k: state.columns[k] for k in codec.STATIC_COLUMNS})

    def static_of(s):
        assert np.array_equal(s, seqs)
        return static

    with pytest.raises(ValueError, match="earlier keyframe"):
        codec.state_from_blob(blob, finished, static_of)
    back = codec.state_from_blob(blob, finished, static_of,
                                 map_of=lambda step: (step, base.block_owner, base.block_pos))
    assert back == state


def test_every_keyframe_of_a_prefix_caching_run_reads_as_the_live_state(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "MIN_MAP_CHANGE_BLOCKS", 0)     # a small pool, changes all the same
    path = tmp_path / "run.sqlite"
    run = run_engine(path, seed=11, num_requests=60, num_gpu_blocks=40, max_num_seqs=6,
                     num_prefixes=3, enable_prefix_caching=True, fail_steps=(),
                     writer_kwargs={"keyframe_interval": 4})
    with open_reader(path) as reader:
        steps = [s for (s,) in reader.execute("SELECT step FROM keyframes ORDER BY step")]
        with_changes = [s for (s,) in reader.execute(
            "SELECT step FROM keyframes WHERE instr(state_npz, 'map_base.npy') > 0")]
        hash_bases = [s for (s,) in reader.execute(
            "SELECT step FROM keyframes WHERE instr(state_npz, 'hash_base.npy') > 0")]
    assert len(steps) > 2 * HASH_BASE_EVERY and hash_bases
    assert len(with_changes) == len(steps) - len([s for s in steps if s not in with_changes])
    assert len(steps) - len(with_changes) == pytest.approx(len(steps) / HASH_BASE_EVERY, abs=1)
    expected = {-1: run.initial, **{k: s for k, s in enumerate(run.states)}}
    order = steps[:]
    random.Random(0).shuffle(order)
    with open_reader(path) as reader:          # one reader: bases kept between keyframes
        for k in order:
            assert reader.keyframe_state(k) == expected[k], f"keyframe {k}"
    for k in steps[-HASH_BASE_EVERY:]:
        with open_reader(path) as reader:      # cold: the whole chain back to a whole map
            assert reader.keyframe_state(k) == expected[k] and reader.state_at(k + 1) == expected.get(k + 1, expected[k])


def test_a_lost_base_makes_its_keyframes_fail_to_decode_not_misread(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "MIN_MAP_CHANGE_BLOCKS", 0)
    path = tmp_path / "run.sqlite"
    run_engine(path, seed=5, num_requests=30, num_gpu_blocks=32, max_num_seqs=4, fail_steps=(),
               writer_kwargs={"keyframe_interval": 4})
    with sqlite3.connect(path) as db:
        steps = [s for (s,) in db.execute("SELECT step FROM keyframes WHERE instr(state_npz, "
                                          "'map_base.npy') > 0 ORDER BY step")]
        db.execute("DELETE FROM keyframes WHERE step = ?", (steps[0],))
    with open_reader(path) as reader:
        with pytest.raises(RecordingError, match="missing"):
            reader.keyframe_state(steps[1])
