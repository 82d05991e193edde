"""Queue tables: virtual models whose rows and cells are the state's columns, updated without
resetting (or repainting) what did not change."""
from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt

from engine.request import RequestStatus
from engine.state.state import STATUS_CODES, EngineState
from ui.style.colors import request_qcolor
from ui.views.queue_tables import QueueTables, visible_rows
from ui.views.request_table import COLUMNS, NOT_ADMITTED_TEXT, REASON_COLUMN, RECOMPUTED_COLUMN, RequestTableModel


def expected_cells(state, row: int) -> list[str]:
    """The cell texts before the reason of state row ``row``, straight from the columns."""
    c = state.columns
    first, last, arrival = (float(c[k][row]) for k in ("first_token_time", "last_token_time", "arrival_time"))
    n_out = int(c["num_output_tokens"][row])
    ttft = "–" if math.isnan(first) else f"{first - arrival:.3g}"
    itl = f"{(last - first) / (n_out - 1):.3g}" if n_out >= 2 else "–"
    return [state.request_ids[row], STATUS_CODES[int(c["status"][row])].lower(),
            str(int(c["num_prompt_tokens"][row])), f"{n_out} / {int(c['max_tokens'][row])}",
            ttft, itl, str(int(c["num_preemptions"][row])), f'{int(c["num_recomputed_tokens"][row]):,}',
            str(int(c["priority"][row]))]


def shown_tables(qtbot) -> QueueTables:
    """Queue tables on screen, 640x430 (a dozen rows visible)."""
    w = QueueTables()
    qtbot.addWidget(w)
    w.resize(640, 430)
    w.show()
    qtbot.waitExposed(w)
    return w


def cells(model: RequestTableModel, i: int) -> list[str]:
    return [model.data(model.index(i, col)) for col in range(len(COLUMNS))]


def test_models_are_the_state_columns_at_scale(qtbot, big):
    state, record = big.state_at(big.latest_step()), big.records(big.latest_step(), big.latest_step() + 1)[0]
    w = QueueTables()
    qtbot.addWidget(w)
    w.set_state(state, record)
    status = state.columns["status"]
    for name, codes in (("running", ("RUNNING",)), ("waiting", ("WAITING", "PREEMPTED")),
                        ("paused", ("PAUSED",))):
        m = w.models[name]
        rows = np.flatnonzero(np.isin(status, [STATUS_CODES.index(s) for s in codes]))
        assert m.rowCount() == len(rows)
        for i in {0, len(rows) // 2, len(rows) - 1} if len(rows) else ():
            assert cells(m, i)[:REASON_COLUMN] == expected_cells(state, int(rows[i]))
            assert m.data(m.index(i, 0), Qt.UserRole) == state.request_ids[rows[i]]
            assert m.data(m.index(i, 0), Qt.DecorationRole) == request_qcolor(state.request_ids[rows[i]])
    assert w.row_counts() == {"running": 256, "waiting": 10_000, "swapped": 0, "paused": 0,
                              "finished": len(state.recently_finished)}
    waiting = w.models["waiting"]
    # FCFS: the oldest waiting request found the batch slots full, every other one waits behind it
    assert [rid for rid, _ in record.not_admitted] == [waiting.request_id(0)]
    assert waiting.data(waiting.index(0, REASON_COLUMN)) == NOT_ADMITTED_TEXT[record.not_admitted[0][1]]
    assert waiting.data(waiting.index(9_999, REASON_COLUMN)) == "behind the queue's first request"
    assert w.tabs.tabText(1) == "Waiting (10,000)"


def test_same_rows_update_without_reset_and_repaint_only_changed_cells(qtbot, big):
    k = big.latest_step()
    w = shown_tables(qtbot)
    w.set_state(big.state_at(k - 1), big.records(k - 1, k)[0])
    resets = {n: [] for n in w.models}
    changed = {n: [] for n in w.models}
    for n, m in w.models.items():
        m.modelReset.connect(lambda n=n: resets[n].append(1))
        m.dataChanged.connect(lambda a, b, *_r, n=n: changed[n].append((a.row(), b.row(), a.column(), b.column())))
    w.set_state(big.state_at(k), big.records(k, k + 1)[0])
    assert not resets["running"] and not resets["waiting"]         # same requests, same rows
    first, last = visible_rows(w.views["running"])
    assert first == 0 and 10 < last < 40                            # the rows on screen
    # every running request decoded one token: its output (and ITL) cells, on screen only
    assert {(a, b) for a, b, _c, _d in changed["running"]} == {(0, last)}
    assert {c for *_r, c, d in changed["running"] if c == d} >= {3}
    assert {c for *_r, c, d in changed["running"]} <= {3, 4, 5}
    assert changed["waiting"] == []                                 # hidden tab: nothing
    running = w.models["running"]
    assert running.data(running.index(0, 3)) == expected_cells(
        big.state_at(k), int(big.state_at(k).queue_rows("running")[0]))[3]
    w.tabs.setCurrentWidget(w.views["waiting"])
    changed["waiting"].clear()
    w.set_state(big.state_at(k - 1), big.records(k - 1, k)[0])
    assert set(changed["waiting"]) <= {(0, 0, REASON_COLUMN, REASON_COLUMN)}   # idle queue: the oldest one's reason at most


def test_a_changing_queue_moves_rows_without_a_reset(qtbot, source):
    """Rows are positions: a request that finishes or is admitted adds or removes rows at the
    end, the rows on screen that now hold another request are announced whole, and the model
    is never reset (the view keeps its scroll position, header and layout)."""
    w = shown_tables(qtbot)
    model = w.models["running"]
    resets, inserted, removed, changed = [], [], [], []
    model.modelReset.connect(lambda: resets.append(1))
    model.rowsInserted.connect(lambda _p, a, b: inserted.append((a, b)))
    model.rowsRemoved.connect(lambda _p, a, b: removed.append((a, b)))
    model.dataChanged.connect(lambda a, b, *_r: changed.append((a.row(), b.row(), a.column())))
    w.set_state(source.state_at(0), source.records(0, 1)[0])
    resets.clear()
    moves = 0
    for k in range(1, 40):
        before = [model.request_id(i) for i in range(model.rowCount())]
        changed.clear()
        w.set_state(source.state_at(k), source.records(k, k + 1)[0])
        after = [r.request_id for r in source.state_at(k).running]
        assert [model.request_id(i) for i in range(model.rowCount())] == after, k
        for i in range(min(len(before), len(after))):          # every row now holding another
            if before[i] != after[i]:                           # request is announced, all columns
                moves += 1
                assert {c for a, b, c in changed if a <= i <= b} == set(range(len(COLUMNS))), (k, i)
        for i in range(model.rowCount()):
            assert cells(model, i)[:REASON_COLUMN] == expected_cells(source.state_at(k), int(model.rows[i])), (k, i)
    assert moves and inserted and removed and not resets


def test_queue_changes_keep_the_selection_on_its_request(qtbot, source):
    w = QueueTables()
    qtbot.addWidget(w)
    w.set_state(source.state_at(10), source.records(10, 11)[0])
    model = w.models["running"]
    with qtbot.waitSignal(w.requestSelected) as sig:
        w.select_row("running", 1)
    rid = sig.args[0]
    assert rid == model.request_id(1)
    for k in (11, 12, 16, 30):                 # it moves to the finished table on the way
        state = source.state_at(k)
        w.set_state(state, source.records(k, k + 1)[0])
        queue = next(q for q in ("running", "waiting", "finished") if rid in
                     [r.request_id for r in state.queue(q)])
        rows = w.views[queue].selectionModel().selectedRows()
        assert [i.data(Qt.UserRole) for i in rows] == [rid], (k, queue)
    assert w.row_counts() == {q: len(state.queue(q)) for q in w.models}


def test_finished_table_shows_the_recently_finished_newest_first(qtbot, source):
    state = source.state_at(39)
    w = QueueTables()
    qtbot.addWidget(w)
    w.set_state(state, None)
    m = w.models["finished"]
    views = list(reversed(state.recently_finished))
    assert m.rowCount() == len(views) >= 4
    for i, v in enumerate(views):
        assert cells(m, i)[0] == v.request_id and cells(m, i)[REASON_COLUMN] == f"finished: {v.finish_reason}"


def test_rows_hold_still_under_the_pointer_and_catch_up_when_it_leaves(qtbot):
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    from tests.support.fakes import FakeSource
    source = FakeSource(3, max_num_seqs=2, workload=tuple((40, 6, 0) for _ in range(10)))
    w = QueueTables()
    qtbot.addWidget(w)
    w.show()
    w.set_state(source.state_at(2), source.history[2])
    model, view = w.models["waiting"], w.views["waiting"]
    before = [model.request_id(i) for i in range(model.rowCount())]
    now = [100.0]
    w.clock = lambda: now[0]
    w.tabs.setCurrentWidget(view)
    QApplication.sendEvent(view.viewport(), QEvent(QEvent.Type.Enter))
    assert set(w.held) == {"waiting"}
    source.advance(12)                         # requests finish, the first waiting are admitted
    state = source.state_at(source.latest_step())
    w.set_state(state, source.history[-1])
    assert [model.request_id(i) for i in range(model.rowCount())] == before      # still
    assert w.tabs.tabText(1) == f"Waiting ({len(state.waiting)} · held)"
    assert w.models["running"].row_of(state.running[0].request_id) is not None   # others follow
    QApplication.sendEvent(view.viewport(), QEvent(QEvent.Type.Leave))
    assert not w.held and w.tabs.tabText(1) == f"Waiting ({len(state.waiting)})"
    assert [model.request_id(i) for i in range(model.rowCount())] == [r.request_id for r in state.waiting]
    assert len(state.waiting) < len(before)


def held_tables(qtbot):
    """``(source, tables, now)``: queue tables on a clock the test sets (``now[0]``, seconds) for
    a 10-request run through 2 slots (30 steps)."""
    from tests.support.fakes import FakeSource
    source = FakeSource(30, max_num_seqs=2, workload=tuple((40, 6, 0) for _ in range(10)))
    w = QueueTables()
    qtbot.addWidget(w)
    now = [50.0]
    w.clock = lambda: now[0]
    return source, w, now


def test_a_resting_pointer_lets_the_rows_catch_up_a_pressed_button_does_not(qtbot):
    from ui.views.queue_tables import HOLD_S
    source, w, now = held_tables(qtbot)
    model = w.models["waiting"]

    def show(k: int) -> list[str]:
        w.set_state(source.state_at(k), source.history[k])
        return [model.request_id(i) for i in range(model.rowCount())]
    first = show(2)
    w.hold("waiting", True)                    # the pointer moved over the table
    now[0] += HOLD_S / 2
    assert show(12) == first                   # still moving about: held
    now[0] += HOLD_S                           # it rested: the table catches up
    assert show(12) == [r.request_id for r in source.state_at(12).waiting] != first
    w.hold("waiting", True, pressed=True)      # a button down holds however long
    now[0] += 10 * HOLD_S
    assert show(24) == show(12) == [r.request_id for r in source.state_at(12).waiting]
    w.hold("waiting", True)                    # released: held from now on for HOLD_S
    now[0] += 2 * HOLD_S
    assert show(24) == [r.request_id for r in source.state_at(24).waiting]


def test_a_held_table_catches_up_when_the_pointer_rests_without_a_new_step(qtbot):
    """The window is still (paused): no new state comes, yet once the pointer has rested for
    HOLD_S the held table shows the state it was last given (``catch_up`` on still frames)."""
    from ui.views.queue_tables import HOLD_S
    source, w, now = held_tables(qtbot)
    model = w.models["waiting"]
    w.set_state(source.state_at(2), source.history[2])
    first = [model.request_id(i) for i in range(model.rowCount())]
    w.hold("waiting", True)
    w.set_state(source.state_at(12), source.history[12])        # the last step before the pause
    w.catch_up()
    assert [model.request_id(i) for i in range(model.rowCount())] == first   # pointer still moving
    now[0] += HOLD_S
    w.catch_up()                                                # it rested: no new step needed
    assert [model.request_id(i) for i in range(model.rowCount())] == [
        r.request_id for r in source.state_at(12).waiting] != first
    assert "held" not in w.tabs.tabText(1)


def test_reason_column_fits_every_reason_and_takes_the_room_left(qtbot):
    from ui.views.request_table import REASON_TEXTS
    w = QueueTables()
    qtbot.addWidget(w)
    w.resize(1400, 300)
    w.show()
    w.tabs.setCurrentIndex(1)                                         # waiting
    qtbot.wait(10)
    assert w.views["running"].isColumnHidden(REASON_COLUMN)          # never a reason there
    view = w.views["waiting"]
    header = view.horizontalHeader()
    widest = max(view.fontMetrics().horizontalAdvance(t) for t in REASON_TEXTS["waiting"])
    assert header.visualIndex(REASON_COLUMN) == 2                     # after id and state
    shown = [c for c in range(len(COLUMNS)) if not header.isSectionHidden(c)]
    assert sum(header.sectionSize(c) for c in shown) == view.viewport().width()
    w.resize(400, 300)                                                # narrow: scroll, not squeeze
    qtbot.wait(10)
    assert view.columnWidth(REASON_COLUMN) > widest
    w.set_time_unit("steps")                                          # headers with their unit fit
    ttft = COLUMNS.index("TTFT")
    assert view.columnWidth(ttft) > header.fontMetrics().horizontalAdvance("TTFT (steps)")


def test_a_frame_paints_the_table_once_with_the_selected_row_highlighted(qtbot, source):
    """However many cells and rows a new state changes, the table's viewport gets one paint
    per frame (``QueueView.paintEvent`` draws every row in it); the selected request's row is
    the palette's highlight, the others alternate its base colours."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    w = shown_tables(qtbot)
    view = w.views["running"]
    paints = []

    class Count(QObject):
        def eventFilter(self, obj, ev):
            if ev.type() == QEvent.Type.Paint:
                paints.append(1)
            return False

    counter = Count()
    view.viewport().installEventFilter(counter)
    w.set_state(source.state_at(3), source.records(3, 4)[0])
    QApplication.processEvents()
    w.set_selected(w.models["running"].request_id(0))
    for k in range(4, 30):
        paints.clear()
        w.set_state(source.state_at(k), source.records(k, k + 1)[0])
        QApplication.processEvents()
        assert len(paints) <= 1, k
    model, pal = w.models["running"], view.palette()
    assert model.rowCount() >= 2
    w.set_selected(model.request_id(1))
    QApplication.processEvents()
    image = view.viewport().grab().toImage()
    row_of = model.row_of(w.selected)
    assert row_of is not None and row_of < 3
    for row in range(min(model.rowCount(), 3)):
        y = view.rowViewportPosition(row) + view.rowHeight(row) // 2
        x = view.columnViewportPosition(1) + view.columnWidth(1) - 3      # right of the state text
        role = (QPalette.ColorRole.Highlight if row == row_of else
                QPalette.ColorRole.AlternateBase if row % 2 else QPalette.ColorRole.Base)
        assert image.pixelColor(x, y).name() == pal.color(role).name(), row


def test_a_header_click_sorts_the_rows_by_that_column_and_id_restores_arrival_order(qtbot, big):
    state = big.state_at(big.latest_step())
    columns = {k: v.copy() for k, v in state.columns.items()}
    columns["num_recomputed_tokens"] = (np.arange(len(state)) * 7919) % 1000     # a thrash per request
    state = EngineState(state.step, state.clock, state.num_total_blocks, state.block_size, state.max_num_seqs,
                        next_seq=state.next_seq, request_ids=state.request_ids, columns=columns,
                        block_owner=state.block_owner, block_pos=state.block_pos)
    w = shown_tables(qtbot)
    w.set_state(state)
    m, view = w.models["running"], w.views["running"]
    rows = state.queue_rows("running")
    view.horizontalHeader().setSortIndicator(RECOMPUTED_COLUMN, Qt.SortOrder.DescendingOrder)   # a click
    shown = [int(m.data(m.index(i, RECOMPUTED_COLUMN)).replace(",", "")) for i in range(m.rowCount())]
    assert shown == sorted(columns["num_recomputed_tokens"][rows].tolist(), reverse=True)
    top = m.request_id(0)
    assert m.row_of(top) == 0 and m.row_of(m.request_id(m.rowCount() - 1)) == m.rowCount() - 1
    w.set_state(state)                                       # the next frame keeps the order
    assert m.request_id(0) == top
    view.horizontalHeader().setSortIndicator(0, Qt.SortOrder.AscendingOrder)       # id: arrival order
    assert [m.request_id(i) for i in range(m.rowCount())] == [state.request_ids[r] for r in rows]


def test_time_columns_hold_their_whole_formatted_values_in_every_clock_unit(qtbot):
    from recordings.numbers import clock_text
    from ui.views.queue_view import PAD
    w = shown_tables(qtbot)
    view = w.views["running"]
    fm = view.fontMetrics()
    for unit in ("sim s", "s", "steps"):
        w.set_time_unit(unit)
        for col in (COLUMNS.index("TTFT"), COLUMNS.index("ITL")):
            for value in (0.0522, 0.412, 38.2, 2290.0, 7.5e-6):   # 52.2 sim ms ... 2,290 sim s
                # seconds carry their unit in the cell; steps are named once, in the header
                text = clock_text(value, unit if unit != "steps" else "")
                assert fm.horizontalAdvance(text) + 2 * PAD <= view.columnWidth(col), (unit, text)


def test_a_narrow_running_table_scrolls_instead_of_squeezing_the_state_column(qtbot, source):
    """The running table (no reason column) let its state column take the room left: in a narrow
    window it was squeezed to "tat" / "r…"; now the last column takes the room and a narrow
    table scrolls with every column whole."""
    from ui.views.queue_view import PAD
    w = shown_tables(qtbot)
    w.set_time_unit("steps")
    w.set_state(source.state_at(source.latest_step()))
    view, header = w.views["running"], w.views["running"].horizontalHeader()
    shown = [c for c in range(len(COLUMNS)) if not header.isSectionHidden(c)]
    w.resize(1000, 300)
    qtbot.wait(10)
    assert sum(header.sectionSize(c) for c in shown) == view.viewport().width()   # wide: filled
    w.resize(360, 300)
    qtbot.wait(10)
    widest_state = max(view.fontMetrics().horizontalAdvance(s.value.lower().removeprefix("finished_"))
                       for s in RequestStatus)
    assert view.columnWidth(1) >= widest_state + 2 * PAD
    assert sum(header.sectionSize(c) for c in shown) > view.viewport().width()    # narrow: scrolls
    model = w.models["running"]
    ttft = [model.data(model.index(i, COLUMNS.index("TTFT"))) for i in range(model.rowCount())]
    assert ttft and not any(t.endswith("steps") for t in ttft)        # the unit is in the header
    assert model.headerData(COLUMNS.index("TTFT"), Qt.Orientation.Horizontal) == "TTFT (steps)"
