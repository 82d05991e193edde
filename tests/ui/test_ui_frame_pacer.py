"""Frame pacing (``ui.frame_pacer``): while draws stream, the queue tables and the metrics +
inspector update on alternate frames, never more than one frame late; a frame with nothing new
catches them up, and a draw after a still frame updates every view."""
from __future__ import annotations

import pytest

from ui.frame_pacer import FramePacer


def test_pacer_round_robin_and_catch_up():
    p = FramePacer(("a", "b"))
    assert p.begin(streaming=False) == ("a", "b") and not p.stale
    assert p.begin(streaming=True) == ("a",) and p.stale == {"b"}
    assert p.begin(streaming=True) == ("b",) and p.stale == {"a"}
    assert p.begin(streaming=True) == ("a",) and p.stale == {"b"}
    assert p.catch_up() == ("b",) and not p.stale
    assert p.catch_up() == ()
    p.begin(streaming=True)
    assert p.begin(streaming=False) == ("a", "b") and not p.stale


def test_pacer_with_one_group_never_skips():
    p = FramePacer(("only",))
    assert [p.begin(streaming=True) for _ in range(3)] == [("only",)] * 3 and not p.stale


@pytest.mark.parametrize("groups", [(), ("a", "a")])
def test_pacer_refuses_bad_groups(groups):
    with pytest.raises(ValueError, match="distinct group names"):
        FramePacer(groups)


def shown(w) -> dict[str, int]:
    """The step each view shows."""
    return {"block map": w.block_map.state.step, "timeline": w.timeline.shown_step,
            "queues": w.queues.models["running"].state.step, "inspector": w.inspector.step,
            "metrics": int(w.metrics.metrics["step"][-1])}


def idle_frame(w) -> None:
    """A frame with nothing new to draw."""
    w.refresh()


def test_streaming_frames_alternate_the_slow_views(window, source):
    idle_frame(w := window)
    idle_frame(w)                                  # a still frame: the next draw is whole
    w.show_step(5)
    assert set(shown(w).values()) == {5}
    late = {"queues": 0, "metrics": 0}
    for k in range(6, 30):                         # one step a frame, every frame draws
        w.show_step(k)
        now = shown(w)
        assert now["block map"] == now["timeline"] == k
        assert now["inspector"] == now["metrics"]  # one group
        for group in late:
            assert now[group] in (k, k - 1), (k, now)
            late[group] += now[group] != k
    assert late == {"queues": 12, "metrics": 12}   # each updated on every other frame
    idle_frame(w)                                  # nothing new: the late group catches up
    assert set(shown(w).values()) == {29}
    idle_frame(w)
    w.show_step(3)                                 # after a still frame: every view at once
    assert set(shown(w).values()) == {3}


def test_a_forced_draw_updates_every_view(window):
    w = window
    for k in (4, 5, 6):
        w.show_step(k)
    w.refresh(force=True)
    assert set(shown(w).values()) == {6}
