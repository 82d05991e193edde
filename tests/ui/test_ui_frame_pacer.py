"""Frame pacing (``ui.frame_pacer``): while draws stream, the queue tables and the metrics +
inspector update on alternate draws, never more than one draw late; once the stream stops (two
frames with nothing new) they catch up; a draw after the stop, a jump, Live, a single engine
step and a forced draw update every view."""
from __future__ import annotations

import pytest

from ui.frame_pacer import FramePacer


def test_pacer_round_robin_and_catch_up():
    p = FramePacer(("a", "b"))
    assert p.begin() == ("a", "b") and not p.stale           # the first draw: whole
    assert p.begin() == ("a",) and p.stale == {"b"}           # draws stream
    assert p.begin() == ("b",) and p.stale == {"a"}
    assert p.still() == () and p.stale == {"a"}               # one still frame: maybe mid-stream
    assert p.begin() == ("a",) and p.stale == {"b"}           # (another timer drew): still streaming
    assert p.still() == () and p.still() == ("b",) and not p.stale   # two: the stream stopped
    assert p.still() == ()
    assert p.begin() == ("a", "b") and not p.stale           # a draw after the stop: whole


def test_a_draw_the_user_asked_for_is_whole_even_mid_stream():
    p = FramePacer(("a", "b"))
    p.begin()
    p.begin()
    p.full_next()
    assert p.begin() == ("a", "b") and not p.stale
    assert p.begin() == ("b",)                                 # then the stream goes on


def test_pacer_with_one_group_never_skips():
    p = FramePacer(("only",))
    assert [p.begin() for _ in range(3)] == [("only",)] * 3 and not p.stale


@pytest.mark.parametrize("groups", [(), ("a", "a")])
def test_pacer_refuses_bad_groups(groups):
    with pytest.raises(ValueError, match="distinct group names"):
        FramePacer(groups)


def shown(w) -> dict[str, int]:
    """The step each view shows."""
    return {"block map": w.block_map.state.step, "timeline": w.timeline.shown_step,
            "queues": w.queues.models["running"].state.step, "inspector": w.inspector.step,
            "metrics": int(w.metrics.metrics["step"][-1])}


def still(w) -> None:
    """Two frames with nothing new to draw: the stream has stopped."""
    w.refresh()
    w.refresh()


def test_streaming_frames_alternate_the_slow_views(window, source):
    w = window
    still(w)
    w.show_step(5)                                 # after the stop: every view at once
    assert set(shown(w).values()) == {5}
    late = {"queues": 0, "metrics": 0}
    for k in range(6, 30):                         # one step a frame, every frame draws
        w.show_step(k)
        if k % 3 == 0:
            w.refresh()                            # one still frame between (another timer drew)
        now = shown(w)
        assert now["block map"] == now["timeline"] == k
        assert now["inspector"] == now["metrics"]  # one group
        for group in late:
            assert now[group] in (k, k - 1), (k, now)
            late[group] += now[group] != k
    assert late == {"queues": 12, "metrics": 12}   # each updated on every other draw
    w.refresh()
    assert set(shown(w).values()) != {29}          # one still frame: perhaps mid-stream
    w.refresh()                                    # two: the late group catches up
    assert set(shown(w).values()) == {29}
    still(w)
    w.show_step(3)                                 # after a stop: every view at once
    assert set(shown(w).values()) == {3}


def test_a_jump_a_step_and_a_forced_draw_update_every_view(window, source, control):
    w = window
    for k in (4, 5, 6):
        w.show_step(k)
    w.refresh(force=True)
    assert set(shown(w).values()) == {6}
    for k in (7, 8):
        w.show_step(k)
    assert w.jump_to("20")                         # mid-stream
    assert set(shown(w).values()) == {20}
    w.show_step(21)
    w.set_following(True)                          # Live
    assert set(shown(w).values()) == {source.latest_step()}
    control.pause()
    for _ in range(3):
        control.step_once()                        # Step, one frame after the other
        w.refresh()
        assert set(shown(w).values()) == {source.latest_step()}
