"""Live knobs from the window: the dialog shows the engine's values and sends only the changed
ones through ``EngineControl.set_knobs``; after Apply the map and the tables show the blocks out
of use and the preempted requests at once; a refused value reaches the error banner; a replay
(and a running engine) cannot open it; the steps where knobs changed are marked in the metrics,
from a live run's records and from a recording's step summaries alike."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtWidgets import QDialog

from engine.state.state import RESERVED
from tests.support.fakes import FakeControl, FakeSource, settle, show, shown_window, swap_source
from recordings.file.open_reader import open_reader
from ui.dialogs.knobs import KnobsDialog
from ui.views.metrics_plots import knobs_text
from ui.step_summary import fetch_summaries, summarize


def paused_window(qtbot, source):
    control = FakeControl(source)
    control.pause()
    w = shown_window(qtbot, source, control)
    w.refresh()
    return w, control


def test_dialog_shows_current_values_and_sends_only_the_changed_ones(qtbot, source, control):
    d = KnobsDialog(control, source.config.num_gpu_blocks)
    qtbot.addWidget(d)
    current = {"max_num_seqs": 4, "max_num_batched_tokens": 96, "num_usable_blocks": 64}
    assert {n: b.value() for n, b in d.spins.items()} == current == control.knobs()
    assert (d.spins["num_usable_blocks"].minimum(), d.spins["num_usable_blocks"].maximum()) == (1, 64)
    d.accept()                                              # nothing changed: nothing sent
    assert d.result() == QDialog.Accepted and d.changes == {} and control.calls == []
    d = KnobsDialog(control, 64)
    qtbot.addWidget(d)
    d.spins["max_num_seqs"].setValue(2)
    d.spins["num_usable_blocks"].setValue(40)
    d.accept()
    assert control.calls == [("set_knobs", {"max_num_seqs": 2, "num_usable_blocks": 40})]
    assert control.knobs() == {"max_num_seqs": 2, "max_num_batched_tokens": 96, "num_usable_blocks": 40}


def test_apply_shows_blocks_out_of_use_and_preempted_requests_at_once(qtbot):
    source = swap_source(15, num_cpu_blocks=16)
    w, control = paused_window(qtbot, source)
    running = [v.request_id for v in w.state.running]
    d = w.edit_knobs()
    assert isinstance(d, KnobsDialog)
    d.spins["num_usable_blocks"].setValue(12)
    d.accept()                                               # no engine step in between
    state = w.state
    assert state.step == source.latest_step() == 14 and state is source.engine.state()
    assert w.block_map.num_reserved == np.count_nonzero(state.block_owner == RESERVED) == 8
    swapped = [v.request_id for v in state.queue("swapped")]
    assert swapped and set(swapped) | {v.request_id for v in state.waiting} >= set(running)
    assert w.queues.row_counts()["swapped"] == len(swapped)
    assert w.queues.tabs.bar.isTabVisible(2)                # the swapped tab of a swap run
    id_of = dict(zip(state.columns["seq"].tolist(), state.request_ids))
    assert [w.block_map.cpu.owner_of(c) for c in range(16)] == [
        id_of.get(s) for s in state.cpu_owner.tolist()]
    assert {id_of[s] for s in state.cpu_owner.tolist() if s >= 0} == set(swapped)
    w.select_request(swapped[0])                            # its event comes with the next step
    assert w.inspector.forensics.values["preemptions"].text().startswith("1 preemption between steps")
    control.step_once()
    w.refresh()
    settle(w)                                                 # the inspector: a frame later
    assert w.inspector.forensics.values["preemptions"].text().startswith(
        "step 15: swap out ")                                 # the recorded preemption


def test_a_refused_value_reaches_the_error_banner_and_nothing_is_raised(qtbot):
    source = FakeSource(5, enable_chunked_prefill=False, budget=2048)
    w, control = paused_window(qtbot, source)
    d = w.edit_knobs()
    d.spins["max_num_batched_tokens"].setValue(100)          # below max_model_len, unchunked
    d.accept()
    w.refresh()
    assert w.banner.isVisible()
    assert "max_num_batched_tokens" in w.banner.text and "ConfigError" in w.banner.text
    assert control.knobs()["max_num_batched_tokens"] == 2048   # nothing changed


def test_a_refusal_at_once_keeps_the_dialog_open_with_the_reason(qtbot, source, control, monkeypatch):
    def refuse(**changes):
        raise ValueError("max_num_seqs must be an int, got 'x'")

    monkeypatch.setattr(control, "set_knobs", refuse)
    d = KnobsDialog(control, 64)
    qtbot.addWidget(d)
    d.spins["max_num_seqs"].setValue(3)
    d.accept()
    assert d.result() != QDialog.Accepted and "must be an int" in d.message.text()


def test_replay_and_a_running_engine_cannot_open_the_dialog(qtbot, source):
    replay = shown_window(qtbot, source)
    assert not replay.actions["knobs"].isEnabled()
    assert not replay.transport.knobs_btn.isVisible() and replay.edit_knobs() is None
    control = FakeControl(source)
    live = shown_window(qtbot, source, control)              # running, not paused
    live.refresh()
    assert live.actions["knobs"].isEnabled() and live.transport.knobs_btn.isVisible()
    assert not live.transport.knobs_btn.isEnabled() and live.edit_knobs() is None
    control.pause()
    live.refresh()
    assert live.transport.knobs_btn.isEnabled() and isinstance(live.edit_knobs(), KnobsDialog)


def test_knob_changes_are_marked_in_the_metrics_live_and_from_a_recording(qtbot, tmp_path):
    path = tmp_path / "knobs.sqlite"
    source = FakeSource(6, record_to=path)
    source.engine.set_knobs(max_num_seqs=2, num_usable_blocks=48)
    source.advance(4)
    source.engine.set_knobs(num_usable_blocks=64)
    source.advance(3)
    source.close()
    changed = [(r.step, r.knobs) for r in source.history if r.knobs]
    assert changed == [(6, (("max_num_seqs", 2), ("num_usable_blocks", 48))),
                       (10, (("num_usable_blocks", 64),))]
    reader = open_reader(path)
    light = fetch_summaries(reader, 0, reader.latest_step() + 1)
    assert [s.knobs for s in light] == [r.knobs for r in source.history]
    assert [s.knobs for s in summarize(source.history)] == [r.knobs for r in source.history]
    for src in (source, reader):
        w = shown_window(qtbot, src)
        show(w, 12)
        assert w.metrics.knob_steps == [6, 10]
        assert w.metrics.knob_label.isVisible()
        assert w.metrics.knob_label.text() == knobs_text(changed) == (
            "knobs changed: step 6: max_num_seqs → 2, num_usable_blocks → 48; "
            "step 10: num_usable_blocks → 64")
        lines = w.metrics._knob_lines["kv"]
        # at the curves' x of those steps (a short run's span is stretched over the window)
        stretch = w.metrics.window / w.metrics._span
        assert [ln.value() for ln in lines if ln.isVisible()] == [(6 - 12) * stretch, (10 - 12) * stretch]
        show(w, 5)                                           # before any change: no marks
        assert w.metrics.knob_steps == [] and not w.metrics.knob_label.isVisible()
        assert not any(ln.isVisible() for ln in lines)
    reader.close()


@pytest.mark.parametrize("n, shown", [(1, 1), (5, 3)])
def test_knobs_text_lists_the_newest_changes(n, shown):
    changes = [(s, (("max_num_seqs", s),)) for s in range(n)]
    text = knobs_text(changes)
    assert text.count("step ") == shown
    assert (f"{n - shown} earlier" in text) == (n > shown)
    assert text.endswith(f"step {n - 1}: max_num_seqs → {n - 1}")
