"""A virtual table model of one request queue, and the text of its cells.

``RequestTableModel`` reads rows on demand: over a state's numpy columns (``set_state_rows``:
live queues, 10k waiting requests cost one array comparison per frame) or over a short list of
``RequestView``s (``set_views``: the recently finished). ``data()`` builds the view of a row only
when Qt asks for one of its cells (the visible rows), once per frame.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QColor

from engine.outputs import RequestView, StepRecord
from engine.state.state import EngineState, row_view
from ui.style.colors import ERROR, PALETTE, color_index
from ui.plain_text import tooltip_text
from ui.state_lookup import find_row
from ui.step_summary import StepSummary
from recordings.numbers import clock_text
from engine.vocab import RequestStatus, NotAdmittedReason

COLUMNS = ("id", "state", "prompt", "output", "TTFT", "ITL", "preempt", "recomp", "priority", "reason")
PRIORITY_COLUMN, REASON_COLUMN = COLUMNS.index("priority"), COLUMNS.index("reason")
RECOMPUTED_COLUMN = COLUMNS.index("recomp")
HEADER_TIPS = {"priority": "priority: lower value runs first (policy priority)",
               "preempt": "times preempted",
               "recomp": "tokens computed again after preemptions (thrash; prefix-cache hits not counted)"}
# what a click on a column's header sorts by (EngineState columns; None: arrival order)
SORT_KEYS = {
    "id": lambda c: c["seq"], "state": lambda c: c["status"], "prompt": lambda c: c["num_prompt_tokens"],
    "output": lambda c: c["num_output_tokens"], "TTFT": lambda c: c["first_token_time"] - c["arrival_time"],
    "ITL": lambda c: (c["last_token_time"] - c["first_token_time"]) / np.maximum(c["num_output_tokens"] - 1, 1),
    "preempt": lambda c: c["num_preemptions"], "recomp": lambda c: c["num_recomputed_tokens"],
    "priority": lambda c: c["priority"], "reason": None}


# engine-clock values whose texts are the widest a TTFT / ITL cell holds in practice (up to
# 8,889 s; ms and µs texts with three digits): the columns' starting widths fit them
CLOCK_SAMPLES = (8888.8, 88.8, 0.888, 888e-6)
# the other columns' widest texts in the common case (ids of up to 7 characters, 6-digit counts)
_WIDE_TEXTS = {"id": "0000000", "state": max((s.value.lower().removeprefix("finished_") for s in RequestStatus),
                                             key=len),
               "prompt": "000,000", "output": "00,000 / 00,000", "preempt": "000", "recomp": "000,000",
               "priority": "000", "reason": ""}


def widest_texts(unit: str) -> tuple[str, ...]:
    """The widest text each column's cells hold in practice, one per :data:`COLUMNS` entry
    (the reason: '', it takes the room left), the TTFT and ITL ones as :func:`cell_text` writes
    them in ``unit`` (``"sim s"``: ``8,889 sim s``, ``888 sim ms``): the columns' widths are
    measured on them, so no formatted value is cut."""
    clock = max((clock_text(x, _cell_unit(unit)) for x in CLOCK_SAMPLES), key=len)
    return tuple(clock if c in ("TTFT", "ITL") else _WIDE_TEXTS[c] for c in COLUMNS)


def sort_rows(state: EngineState, rows: np.ndarray, column: int, descending: bool) -> np.ndarray:
    """``rows`` of ``state`` ordered by table column ``column`` (stable; ties and NaN, e.g. no
    TTFT yet, keep arrival order, NaN last); ``rows`` as they are for a column without a key."""
    key = SORT_KEYS.get(COLUMNS[column]) if 0 <= column < len(COLUMNS) else None
    if key is None or not len(rows):
        return rows
    values = np.asarray(key({k: state.columns[k][rows] for k in state.columns}), float)
    values = np.where(np.isnan(values), np.inf if not descending else -np.inf, values)
    order = np.argsort(-values if descending else values, kind="stable")
    return rows[order]
HEADERS = tuple("prio" if c == "priority" else c for c in COLUMNS)   # as the header shows them
# why a waiting request was not admitted in the shown step (StepRecord.not_admitted_reason);
# a reason without an entry (one added to the engine later) shows as its words
NOT_ADMITTED_TEXT = {
    NotAdmittedReason.TOKEN_BUDGET: "token budget spent",
    NotAdmittedReason.NO_FREE_BLOCKS: "no free KV blocks",
    NotAdmittedReason.SEQ_CAP: "batch slots full",
    NotAdmittedReason.BEHIND: "behind the queue's first request",   # older, or moved to the front
    NotAdmittedReason.LOWER_PRIORITY: "lower priority",
    NotAdmittedReason.STATIC_BATCH: "static batch still running",
    NotAdmittedReason.SWAPPED_FIRST: "swapped-out requests resume first",
}
PREEMPTED_TEXT = "preempted in this step"
PAUSED_TEXT = "paused by user"
SWAPPED_TEXT = "swapped out to the CPU: resumes first"
# the fixed texts the reason column of each queue's table shows (its starting width fits the
# widest; a running request has none: the running table has no reason column)
REASON_TEXTS = {"running": (), "waiting": (*NOT_ADMITTED_TEXT.values(), PREEMPTED_TEXT),
                "swapped": (SWAPPED_TEXT,), "paused": (PAUSED_TEXT,),
                "finished": ("finished: length", "finished: stop", "finished: aborted")}
# the state columns each table column (COLUMNS) is made of: a cell whose columns did not
# change needs no repaint
CELL_SOURCES = ((), ("status",), ("num_prompt_tokens",), ("num_output_tokens", "max_tokens"),
                ("first_token_time", "arrival_time"),
                ("first_token_time", "last_token_time", "num_output_tokens"),
                ("num_preemptions",), ("num_recomputed_tokens",), ("priority",), ("status", "priority"))


def _position(state: EngineState, rows: np.ndarray, request_id: str) -> int | None:
    """Table row of ``request_id`` among ``rows`` (rows of ``state``, ascending unless sorted by
    a column), or None."""
    r = find_row(state, request_id)
    if r is None:
        return None
    i = int(np.searchsorted(rows, r))
    if i < len(rows) and rows[i] == r:
        return i
    hit = np.flatnonzero(rows == r)             # rows sorted by a column (not ascending)
    return int(hit[0]) if len(hit) else None


def not_admitted(record: StepRecord | StepSummary | None, v: RequestView,
                 priority_of: Callable[[str], int | None] | None = None) -> str | None:
    """Why waiting ``v`` was not admitted in ``record``'s step (a ``NOT_ADMITTED_*`` reason, or
    :data:`PREEMPTED_TEXT`); None when it is not waiting or arrived after that step.
    ``priority_of`` (request id -> priority, e.g. :func:`state_priority_of`) tells a request of
    lower priority than the blocked one from one merely behind it."""
    if record is None or v.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED) or v.arrival_step > record.step:
        return None
    if v.request_id in record.preempted_ids:
        return PREEMPTED_TEXT
    return record.not_admitted_reason(v.request_id, priority_of)


def state_priority_of(state: EngineState) -> Callable[[str], int | None]:
    """``priority_of(request_id)``: the ``priority`` column of a live request of ``state`` (None
    if it is not live). Each id is looked up once (a scan of the ids), so the rows of a frame
    share one lookup of the blocked request."""
    found: dict[str, int | None] = {}
    priority = state.columns["priority"]

    def priority_of(request_id: str) -> int | None:
        if request_id not in found:
            row = find_row(state, request_id)
            found[request_id] = None if row is None else int(priority[row])
        return found[request_id]
    return priority_of


def reason_text(r: RequestView, reason: str | None = None) -> str:
    """The error, the finish reason, :data:`PAUSED_TEXT`, :data:`SWAPPED_TEXT`, or why the
    request still waits in words ('' if none)."""
    if r.error or r.finish_reason:
        return r.error or f"finished: {r.finish_reason}"
    if r.status == RequestStatus.PAUSED:
        return PAUSED_TEXT
    if r.status == RequestStatus.SWAPPED:
        return SWAPPED_TEXT
    return "" if reason is None else reason_words(reason)


def reason_words(reason: str) -> str:
    """A ``NOT_ADMITTED_*`` reason in words (one added to the engine later shows as its words)."""
    return NOT_ADMITTED_TEXT.get(reason) or reason.replace("_", " ")


def _cell_unit(unit: str) -> str:
    """The unit a TTFT / ITL cell writes: seconds carry theirs (``412 ms``); any other unit
    (a virtual clock's steps) is named once, in the column's header ("1 steps" under "ITL (steps)")."""
    return unit if unit in ("s", "sim s") else ""


def cell_text(r: RequestView, column: int, reason: str | None = None,
              priority: int | None = None, unit: str = "") -> str:
    """Text of ``column`` (see :data:`COLUMNS`) for request ``r``: times on the engine clock,
    whose ``unit`` is ``"s"`` / ``"sim s"`` (``2,290 s``, ``38.2 s``, ``412 ms``) or ``"steps"``
    / ``""`` (plain numbers: ``2,290``; ``recordings.numbers``, never an exponent); ``priority``
    from the state's column ("–" when unknown: a finished request's view)."""
    if column == 0:
        return r.request_id
    if column == 1:
        return r.status.lower().removeprefix("finished_") if r.is_finished else r.status.lower()
    if column == 2:
        return f"{r.num_prompt_tokens:,}"
    if column == 3:
        return f"{r.num_output_tokens:,} / {r.max_tokens:,}"
    if column == 4:
        return clock_text(r.ttft, _cell_unit(unit))
    if column == 5:
        return clock_text(r.mean_itl, _cell_unit(unit))
    if column == 6:
        return str(r.num_preemptions)
    if column == RECOMPUTED_COLUMN:
        return f"{r.num_recomputed_tokens:,}"
    if column == PRIORITY_COLUMN:
        return "–" if priority is None else str(priority)
    return reason_text(r, reason)


# PySide6 hands data() its role as a plain int, and comparing with a Qt enum attribute costs
# microseconds: data() runs hundreds of times a frame, so it compares ints.
_R = Qt.ItemDataRole
DISPLAY, DECORATION, FOREGROUND, TOOLTIP, ALIGN, USER = (int(r) for r in (
    _R.DisplayRole, _R.DecorationRole, _R.ForegroundRole, _R.ToolTipRole, _R.TextAlignmentRole,
    _R.UserRole))
_ROLES = frozenset((DISPLAY, DECORATION, FOREGROUND, TOOLTIP, ALIGN, USER))
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_ERROR_COLOR = QColor(*ERROR)
_SWATCHES = tuple(QColor(*c) for c in PALETTE)
_HORIZONTAL = Qt.Orientation.Horizontal


class RequestTableModel(QAbstractTableModel):
    """One queue's rows. ``set_state_rows`` / ``set_views`` keep row identity when the rows are
    the same requests in the same order (``dataChanged`` only), otherwise reset the model; both
    return True on a reset. With ``reasons`` the last column says why a waiting request was not
    admitted in the step of the record given to ``set_state_rows``."""

    time_unit = ""        # "s" / "sim s" (in the TTFT/ITL cells) or "steps" (in their headers)

    def __init__(self, parent=None, reasons: bool = False):
        super().__init__(parent)
        self.reasons = reasons
        self.record: StepRecord | StepSummary | None = None
        self.state: EngineState | None = None
        self.moved = False                         # the last update put other requests in rows
        # (old, new) row count while ``lay_out`` lays out rows just added or removed at the end
        # (``ui.views.queue_tables.QueueView`` then repaints only those rows); None otherwise
        self.resized_rows: tuple[int, int] | None = None
        self.rows = np.zeros(0, np.int64)          # state rows of this queue, table order
        self.base_rows = self.rows                 # ... in arrival order (before sorting)
        self.sort_column: int | None = None        # sort(): the column ordering the rows
        self.sort_descending = False
        self.views: list[RequestView] | None = None  # or the views themselves
        self._key: object = ()
        self._cache: dict[int, RequestView] = {}
        self._texts: dict[int, list[str]] = {}
        self._priority_of: Callable[[str], int | None] | None = None   # of the shown state
        # (first, last) table rows on screen, set by the view's owner; None = all rows
        self.visible_rows: Callable[[], tuple[int, int]] | None = None
        # lays the view out at once after rows were added or removed (set by the view's owner):
        # a view with a layout pending ignores the cells announced until then
        self.lay_out: Callable[[], None] | None = None

    # --- rows ------------------------------------------------------------------------------
    def set_state_rows(self, state: EngineState, rows: np.ndarray,
                       record: StepRecord | StepSummary | None = None) -> bool:
        """Rows ``rows`` (int [n], ascending) of ``state``'s columns; ``record``: the shown step's
        (a ``StepRecord`` or a ``StepSummary``). Table rows are positions: when the queue
        changes (a request finished, another was admitted) the model adds or removes rows at the
        end and announces the cells on screen that read differently (another request in that
        row, or the same one with changed values), never a reset: an idle queue is not
        repainted, a decoding one repaints its output column, and the view keeps its scroll
        position and header. ``moved`` tells whether any row now holds another request (or the
        row count changed)."""
        self.base_rows = rows
        if self.sort_column is not None:
            rows = sort_rows(state, rows, self.sort_column, self.sort_descending)
        key = state.columns["seq"][rows]
        if self.views is not None or not isinstance(self._key, np.ndarray):
            self.moved = True
            return self._replace(False, key, state=state, rows=rows, views=None, record=record)
        n_old, n = len(self._key), len(key)
        first, last = self.visible_rows() if self.visible_rows is not None else (0, n - 1)
        lo, hi = max(first, 0), min(last + 1, n_old, n)      # rows on screen before and after
        self.moved = n != n_old or not np.array_equal(key, self._key)
        masks = self._changed_cells(state, rows, key, record, lo, hi) if hi > lo else []
        if n > n_old:
            self.beginInsertRows(QModelIndex(), n_old, n - 1)
        elif n < n_old:
            self.beginRemoveRows(QModelIndex(), n, n_old - 1)
        self._replace(True, key, state=state, rows=rows, views=None, record=record)
        if n > n_old:
            self.endInsertRows()
        elif n < n_old:
            self.endRemoveRows()
        if n != n_old and self.lay_out is not None:
            self.resized_rows = (n_old, n)
            try:
                self.lay_out()
            finally:
                self.resized_rows = None
        self._announce(lo, masks)
        return False

    def _changed_cells(self, state: EngineState, rows: np.ndarray, key: np.ndarray,
                       record: StepRecord | StepSummary | None, lo: int, hi: int) -> list[np.ndarray]:
        """Per table column, the mask over table rows ``lo:hi`` (bool [hi - lo]) of the cells
        that may read differently in ``state`` than in the shown state: every cell of a row that
        now holds another request, the cells whose columns changed for the same request."""
        old, old_rows, new_rows = self.state, self.rows[lo:hi], rows[lo:hi]
        moved = self._key[lo:hi] != key[lo:hi]
        differs = {}
        for name in {n for names in CELL_SOURCES for n in names}:
            a, b = old.columns[name][old_rows], state.columns[name][new_rows]
            differs[name] = ~((a == b) | (np.isnan(a) & np.isnan(b))) if a.dtype.kind == "f" else a != b
        masks = [np.logical_or.reduce([moved] + [differs[n] for n in names]) for names in CELL_SOURCES]
        if self.reasons and record is not self.record:
            reason = masks[-1]
            for rec, st, st_rows in ((self.record, old, self.rows), (record, state, rows)):
                for rid in (() if rec is None else
                            (*rec.preempted_ids, *(r for r, _ in rec.not_admitted))):
                    i = _position(st, st_rows, rid)
                    if i is not None and lo <= i < hi:
                        reason[i - lo] = True
            seen = [st.columns["arrival_step"][r] <= rec.step if rec is not None else np.zeros(len(r), bool)
                    for rec, st, r in ((self.record, old, old_rows), (record, state, new_rows))]
            masks[-1] = reason | (seen[0] != seen[1])      # rows the step considered
        return masks

    def set_views(self, views: Sequence[RequestView]) -> bool:
        """Rows are ``views`` (a short list: the recently finished)."""
        views = list(views)
        if self.sort_column is not None and COLUMNS[self.sort_column] in ("preempt", "recomp", "prompt", "output"):
            attr = {"preempt": "num_preemptions", "recomp": "num_recomputed_tokens",
                    "prompt": "num_prompt_tokens", "output": "num_output_tokens"}[COLUMNS[self.sort_column]]
            views.sort(key=lambda v: getattr(v, attr), reverse=self.sort_descending)
        key = tuple(v.request_id for v in views)
        return self._replace(self.views is not None and key == self._key, key, state=None,
                             rows=np.zeros(0, np.int64), views=views, record=None)

    def _replace(self, same: bool, key, **attrs) -> bool:
        """Swap in the new rows: reset unless ``same``; else, for ``views`` rows, announce every
        cell (state rows announce their changed cells themselves: ``set_state_rows``)."""
        if not same:
            self.beginResetModel()
        for name, value in attrs.items():
            setattr(self, name, value)
        self._key, self._cache, self._texts, self._priority_of = key, {}, {}, None
        if not same:
            self.endResetModel()
            if self.lay_out is not None:      # repaint in this frame, not when the timer fires
                self.lay_out()
            return True
        n = self.rowCount()
        if n and attrs.get("views") is not None:
            self.dataChanged.emit(self.index(0, 0), self.index(n - 1, len(COLUMNS) - 1))
        return False

    def _announce(self, first: int, masks: list[np.ndarray]) -> None:
        """``dataChanged`` for the cells ``masks`` (per column, over the rows from ``first``):
        one range per column, inside the rows on screen (a view repaints only those cells for a
        range inside its viewport, but all of it for one reaching beyond)."""
        for col, mask in enumerate(masks):
            hit = np.flatnonzero(mask)
            if len(hit):
                self.dataChanged.emit(self.index(first + int(hit[0]), col),
                                      self.index(first + int(hit[-1]), col))

    def request_id(self, i: int) -> str:
        return self.views[i].request_id if self.views is not None else self.state.request_ids[self.rows[i]]

    def view(self, i: int) -> RequestView:
        """The view of table row ``i`` (built on first use in a frame)."""
        v = self._cache.get(i)
        if v is None:
            if self.views is not None:
                v = self.views[i]
            else:
                r = int(self.rows[i])
                v = row_view(self.state.request_ids[r], self.state.columns, r)
            self._cache[i] = v
        return v

    def row_of(self, request_id: str | None) -> int | None:
        """Table row of ``request_id``, None if it is not in this queue."""
        if request_id is None:
            return None
        if self.views is not None:
            return next((i for i, v in enumerate(self.views) if v.request_id == request_id), None)
        return _position(self.state, self.rows, request_id) if self.state is not None else None

    def priority(self, i: int) -> int | None:
        """The priority of table row ``i`` (None for a finished request's view)."""
        return None if self.views is not None else int(self.state.columns["priority"][self.rows[i]])

    def reason(self, i: int) -> str | None:
        if not self.reasons or self.record is None:
            return None
        v, own = self.view(i), self.priority(i)
        if self._priority_of is None:
            self._priority_of = state_priority_of(self.state)
        lookup = self._priority_of
        return not_admitted(self.record, v, lambda rid: own if rid == v.request_id else lookup(rid))

    # --- QAbstractTableModel ---------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:
        if parent.isValid():
            return 0
        return len(self.views) if self.views is not None else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=DISPLAY):
        if role == DISPLAY and orientation == _HORIZONTAL:
            if COLUMNS[section] in ("TTFT", "ITL") and self.time_unit not in ("", "s", "sim s"):
                # seconds carry their unit in the cells (412 ms, 38.2 s); other units here
                return f"{COLUMNS[section]} ({self.time_unit})"
            return HEADERS[section]
        if role == TOOLTIP and orientation == _HORIZONTAL:
            return HEADER_TIPS.get(COLUMNS[section])
        return None

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Order the rows by ``column`` (Qt calls this when a header is clicked; ``id`` is arrival
        order). The order holds for the states shown next; a column without a key (the reason)
        keeps arrival order."""
        self.sort_column, self.sort_descending = column, order == Qt.SortOrder.DescendingOrder
        if self.state is not None and self.views is None:
            self._key = ()                          # every row may hold another request now
            self.set_state_rows(self.state, self.base_rows, self.record)
        elif self.views is not None:
            self.set_views(self.views)

    def set_time_unit(self, unit: str) -> None:
        """Name the unit of the TTFT and ITL columns."""
        if unit != self.time_unit:
            self.time_unit = unit
            self._texts = {}
            self.headerDataChanged.emit(_HORIZONTAL, 0, len(COLUMNS) - 1)

    def texts(self, i: int) -> list[str]:
        """The cell texts of table row ``i`` (computed once per row and frame)."""
        t = self._texts.get(i)
        if t is None:
            v, reason, priority = self.view(i), self.reason(i), self.priority(i)
            t = self._texts[i] = [cell_text(v, c, reason, priority, self.time_unit)
                                  for c in range(len(COLUMNS))]
        return t

    def data(self, index: QModelIndex, role=DISPLAY):
        # Qt asks ~7 roles per visible cell per paint: the common ones first, no validity
        # check (views only ask for valid indexes)
        if role == DISPLAY:
            return self.texts(index.row())[index.column()]
        if role not in _ROLES:
            return None
        i, col = index.row(), index.column()
        if role == ALIGN:
            return _RIGHT if 2 <= col < REASON_COLUMN else None
        if role == DECORATION:
            return _SWATCHES[color_index(self.request_id(i))] if col == 0 else None
        if role == USER:
            return self.request_id(i)
        if col == REASON_COLUMN and role == TOOLTIP:
            tip = reason_text(self.view(i), self.reason(i))
            return tooltip_text(tip) if tip else None      # an error message: text, not HTML
        if col == REASON_COLUMN and role == FOREGROUND and self.view(i).error:
            return _ERROR_COLOR
        return None
