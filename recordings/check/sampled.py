"""``batchscope check --quick``: the invariants on a sample of a recording's steps.

The steps are cut at the keyframes (a keyframe every ``keyframe_interval`` steps, 128 by default):
every :data:`QUICK_EVERY`-th keyframe interval, and always the last one (so G6, the drain at the
end, is checked), is replayed from its keyframe and checked in full, step by step, by the
reference path (``StateTimeline`` replay + :class:`recordings.check.invariants.StateChecker`,
seeded with what the steps before it leave: the finished requests, the live knobs, every block's
holders). The other intervals are skipped: a violation that starts and ends inside a skipped
interval is not found; one whose state lasts into a checked interval is found there (at the
first checked step, not where it began). A keyframe that differs from the replay of the steps
before it is not noticed (the complete check replays every step from the first keyframe).
"""
from __future__ import annotations

from typing import Callable

from recordings.check.invariants import (Problem, check_recording, check_states, replayed_states, seeded_checker,
                                         stopped_after)

QUICK_EVERY = 32        # one keyframe interval checked in this many


def sampled_intervals(reader, every: int = QUICK_EVERY) -> list[tuple[int, int]]:
    """(keyframe step, last step) of the keyframe intervals ``--quick`` checks: the steps
    ``keyframe + 1 .. last``. Raises ``ValueError`` if ``every`` < 1."""
    if every < 1:
        raise ValueError(f"the sample must take every N-th keyframe interval with N >= 1, got {every}")
    latest = reader.latest_step()
    keyframes = [k for (k,) in reader.execute("SELECT step FROM keyframes WHERE step < ? ORDER BY step", (latest,))]
    intervals = [(k, nxt) for k, nxt in zip(keyframes, keyframes[1:] + [latest])]
    picked = intervals[::every]
    if intervals and intervals[-1] not in picked:
        picked.append(intervals[-1])
    return picked


def sampled_check(reader, *, every: int = QUICK_EVERY, max_problems: int = 100,
                  on_step: Callable[[int], None] | None = None) -> tuple[list[Problem], list[tuple[int, int]]]:
    """The invariant problems of the steps in :func:`sampled_intervals` of the recording open in
    ``reader``, and those intervals. ``on_step(k)`` after each checked step. A file of another
    schema than 4 or with too few keyframes is checked in full. Raises
    :class:`recordings.errors.RecordingError` if the file cannot be read."""
    config = reader.run_info().config
    intervals = sampled_intervals(reader, every)
    if getattr(reader, "_version", 0) < 4 or any(config.get(k) is None for k in (
            "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens")) or len(intervals) <= 1:
        latest = reader.latest_step()
        return check_recording(reader, max_problems=max_problems, on_step=on_step), [(-1, latest)]
    problems: list[Problem] = []
    for start, end in intervals:
        state = reader.keyframe_state(start) if start >= 0 else reader.state_at(-1)
        found = check_states(reader, seeded_checker(reader, config, state), replayed_states(reader, state, stop=end + 1),
                             max_problems - len(problems), on_step, drained_at=reader.latest_step())
        problems += found
        if len(problems) > max_problems:      # cut short inside this interval: say so with the whole limit
            last = problems.pop()
            return problems + [Problem(last.step, "record", stopped_after(max_problems))], intervals
    return problems, intervals

