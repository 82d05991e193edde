"""The writer's keyframe policy (``recordings.file.writer.keyframe_due``): keyframes weigh at most a
fixed share of the steps between them, a seek never replays more than a bounded number of bytes
or steps, and keyframes are never closer than ``MIN_KEYFRAME_GAP`` steps."""
from __future__ import annotations

from recordings.file.writer import (KEYFRAME_COST_RATIO, MAX_REPLAY_BYTES, MIN_KEYFRAME_GAP,
                               keyframe_due)

INTERVAL = 128


def first_due_gap(step_bytes: int, keyframe_bytes: int, interval: int = INTERVAL) -> int:
    """The gap of the first step after a keyframe at which ``keyframe_due`` says yes, when every
    step weighs ``step_bytes``."""
    gap = 1
    while not keyframe_due(gap, gap * step_bytes, keyframe_bytes, interval):
        gap += 1
    return gap


def test_no_keyframe_closer_than_the_minimum_gap_however_heavy_the_steps():
    assert not any(keyframe_due(g, 10**9, 1, INTERVAL) for g in range(1, MIN_KEYFRAME_GAP))
    assert keyframe_due(MIN_KEYFRAME_GAP, 10**9, 1, INTERVAL)


def test_a_keyframe_at_the_latest_every_interval_however_light_the_steps():
    assert first_due_gap(0, 10**6) == INTERVAL
    assert first_due_gap(0, 10**6, interval=8) == 8      # an interval below the minimum gap wins


def test_keyframes_weigh_at_most_a_share_of_the_steps_between_them():
    """A keyframe of K bytes comes once the steps since the last one weigh RATIO x K: the bigger
    the state (a long waiting queue, a fragmented block map), the further apart."""
    step = 3_000                                           # a decode step of ~100 running
    # keyframes small enough that RATIO x K stays under MAX_REPLAY_BYTES, past the minimum gap
    mid = step * (MIN_KEYFRAME_GAP + 8) // KEYFRAME_COST_RATIO
    big = (MAX_REPLAY_BYTES - 2 * step) // KEYFRAME_COST_RATIO
    gaps = {k: first_due_gap(step, k) for k in (1_000, mid, big)}
    assert gaps[1_000] == MIN_KEYFRAME_GAP
    assert gaps[1_000] < gaps[mid] < gaps[big] <= INTERVAL
    for k in (mid, big):
        g = gaps[k]
        assert (g - 1) * step < KEYFRAME_COST_RATIO * k <= g * step     # the first step past it


def test_a_seek_replays_a_bounded_number_of_bytes():
    """A keyframe too big to amortise within MAX_REPLAY_BYTES comes when the steps since the
    last one reach MAX_REPLAY_BYTES: replay after a keyframe stays bounded."""
    step = MAX_REPLAY_BYTES // (2 * MIN_KEYFRAME_GAP)      # the cap, not the minimum gap, decides
    huge = 10 * MAX_REPLAY_BYTES
    g = first_due_gap(step, huge)
    assert (g - 1) * step < MAX_REPLAY_BYTES <= g * step
    assert first_due_gap(step, huge, interval=10**9) == g
