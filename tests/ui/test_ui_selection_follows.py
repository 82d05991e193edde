"""The selected request stays selected whatever happens to the rows around it: a table whose
rows above it leave (so the table shrinks and its last row is removed) must not hand the
selection to the request that slides into its row."""
from __future__ import annotations

from PySide6.QtCore import Qt

from ui.views.queue_tables import QueueTables


def test_selecting_the_last_row_survives_the_queue_shrinking(qtbot, source):
    last = source.latest_step()
    w = QueueTables()
    qtbot.addWidget(w)
    checked = 0
    for start in range(0, last, 3):
        state = source.state_at(start)
        w.set_state(state, source.records(start, start + 1)[0])
        queue = next((q for q in ("waiting", "running") if w.models[q].rowCount() >= 2), None)
        if queue is None:
            continue
        w.set_selected(None)
        picks = []
        w.requestSelected.connect(picks.append)
        w.select_row(queue, w.models[queue].rowCount() - 1)       # the row Qt moves on a removal
        assert picks, (start, queue, w.models[queue].rowCount(), w.selected)
        rid = picks[-1]
        for k in range(start + 1, min(start + 12, last + 1)):
            state = source.state_at(k)
            w.set_state(state, source.records(k, k + 1)[0])
            assert w.selected == rid, (start, k)
            for q in ("running", "waiting", "paused", "finished"):
                shown = [i.data(Qt.UserRole) for i in w.views[q].selectionModel().selectedRows()]
                assert shown == ([rid] if w.models[q].row_of(rid) is not None else []), (start, k, q)
        assert picks == [rid]                                 # only the user's own pick was announced
        w.requestSelected.disconnect(picks.append)
        checked += 1
    assert checked >= 3
