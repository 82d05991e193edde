"""Swap preemption explained in the window: swapped-out requests in their own table (vLLM's
``swapped`` queue) with the reason they wait, waiting requests held back because swapped-out
requests resume first, and the inspector's preemption lines saying whether the KV was swapped
out or dropped by the recompute fallback (the CPU pool was full), with the work wasted."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

from engine.sched.preemption import preemption_info
from tests.support.fakes import show, shown_window, swap_source
from ui.inspector.explain import MODE_NOTES
from ui.views.request_table import REASON_COLUMN, SWAPPED_TEXT
from engine.vocab import NotAdmittedReason, PreemptionMode

SWAPPED_TAB = 2


def preemptions(source):
    """(step, request id, PreemptionInfo) of every preemption of the run."""
    return [(r.step, e.request_id, preemption_info(e.detail)) for r in source.history
            for e in r.events if e.kind == "preempted"]


def test_swapped_requests_have_their_own_table_with_the_reason(qtbot):
    source = swap_source()
    w = shown_window(qtbot, source)
    for k in range(0, source.latest_step() + 1, 3):       # with and without swapped requests
        show(w, k)
        model = w.queues.models["swapped"]
        assert [model.request_id(i) for i in range(model.rowCount())] == [
            w.state.request_ids[r] for r in w.state.queue_rows("swapped")]
    k = next(s.step for s in source.states[1:] if len(s.queue_rows("swapped")))
    w.show_step(k)
    state, model = w.state, w.queues.models["swapped"]
    rows = state.queue_rows("swapped")
    assert w.queues.tabs.bar.isTabVisible(SWAPPED_TAB) and w.queues.tabs.tabText(SWAPPED_TAB) == (
        f"Swapped ({len(rows)})")
    assert [model.request_id(i) for i in range(model.rowCount())] == [state.request_ids[r] for r in rows]
    for i in range(model.rowCount()):
        assert model.data(model.index(i, 1)) == "swapped"
        assert model.data(model.index(i, REASON_COLUMN)) == SWAPPED_TEXT
        assert model.data(model.index(i, 0), Qt.UserRole) not in {v.request_id for v in state.waiting}
    rid = model.request_id(0)
    w.select_request(rid)
    row = state.row(rid)
    cpu = int(np.count_nonzero(state.cpu_owner == state.columns["seq"][row]))
    reason = w.inspector.values["reason"].text()
    assert reason.startswith(SWAPPED_TEXT)
    assert f"{cpu} CPU blocks hold its {state.columns['num_computed_tokens'][row]} tokens of KV" in reason
    assert cpu > 0


def test_the_swapped_tab_is_hidden_without_a_swap_pool(qtbot, source):
    w = shown_window(qtbot, source)
    w.show_step(20)
    assert not w.queues.tabs.bar.isTabVisible(SWAPPED_TAB)
    assert w.queues.row_counts()["swapped"] == 0


def test_waiting_requests_say_swapped_out_requests_resume_first(qtbot):
    source = swap_source()
    w = shown_window(qtbot, source)
    steps = [r.step for r in source.history if r.waiting_reason == NotAdmittedReason.SWAPPED_FIRST]
    assert steps
    checked = 0
    for k in steps[:3]:
        show(w, k)
        model = w.queues.models["waiting"]
        for i in range(model.rowCount()):
            if w.state.columns["arrival_step"][model.rows[i]] <= k:
                assert model.data(model.index(i, REASON_COLUMN)) == "swapped-out requests resume first"
                checked += 1
    assert checked


def test_preemptions_say_swapped_out_or_recompute_fallback_with_the_wasted_work(qtbot):
    source = swap_source()
    w = shown_window(qtbot, source)
    found = {info.mode: (step, rid, info) for step, rid, info in preemptions(source)}
    assert set(found) == {PreemptionMode.SWAP, PreemptionMode.SWAP_FALLBACK}
    w.show_step(source.latest_step())           # both finished: among the recently finished
    for mode, (step, rid, info) in found.items():
        w.select_request(rid)
        text = w.inspector.forensics.values["preemptions"].text()
        first, wasted = text.split("\n")[0], text.split("\n")[-1]
        assert first.startswith(f"step {step}: {info.describe()} — {MODE_NOTES[mode]}")
        if mode == PreemptionMode.SWAP:
            assert info.describe().startswith(f"swap out {info.num_tokens} tokens")
            assert wasted.startswith("wasted: 0 KV tokens dropped")
            assert wasted.endswith(f"; {info.num_tokens} swapped to the CPU (kept, not recomputed)")
        else:
            assert "CPU swap pool had no room" in first
            assert wasted.startswith(f"wasted: {info.num_tokens} KV tokens dropped")
