"""The finished tab keeps only the most recent requests; its title says how many finished in all."""
from __future__ import annotations

from types import SimpleNamespace

from engine.state.state import NUM_RECENTLY_FINISHED
from ui.views.queue_tables import QUEUES, QueueTables


def test_finished_tab_names_the_total_when_it_shows_only_the_last_ones(qtbot, source):
    w = QueueTables()
    qtbot.addWidget(w)
    k = source.latest_step()
    state, record = source.state_at(k), source.records(k, k + 1)[0]
    w.set_state(state, record)
    finished = QUEUES.index("finished")
    shown = len(state.recently_finished)
    assert w.tabs.tabText(finished) == f"Finished ({shown})" and shown == record.num_finished
    many = SimpleNamespace(**{f: getattr(record, f) for f in ("step", "preempted_ids", "not_admitted",
                                                              "waiting_reason")},
                           num_finished=NUM_RECENTLY_FINISHED * 25)
    w.set_state(state, many)
    assert w.tabs.tabText(finished) == f"Finished (last {shown} of {NUM_RECENTLY_FINISHED * 25:,})"
    assert w.tabs.tabText(QUEUES.index("running")).startswith("Running (")
