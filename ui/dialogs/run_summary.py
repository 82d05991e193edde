"""View > Run summary: the run's metrics as ``batchscope summary`` prints them, in the window.

The text comes from ``recordings.metrics.summary_lines`` (the CLI's code), recomputed from the recording's
rows: totals, TTFT / ITL / TPOT / E2E latency / queue time percentiles, requests/s, the prefill /
decode split of step time, roofline efficiency (``recordings.metrics.roofline``) and, with an SLO set in
the two boxes (milliseconds; 0 = no limit), goodput. Each line names its unit (steps, s or sim s). A live run's recording grows: Refresh
reads it again. Errors (a file not readable yet) are shown in the dialog, never raised into Qt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QHBoxLayout,
                               QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget)

from engine.state.source import RecordingSource
from recordings.errors import RecordingError
from recordings.file.reader import Reader
from recordings.metrics.serving import Slo
from recordings.metrics.summary_lines import summary_lines
from ui.style.theme import follow_window

MAX_SLO_MS = 10_000_000.0


def recording_path(source) -> Path | None:
    """The file behind a step source: a ``Reader``'s ``path``, or the ``recording`` a live
    run's info names; None when there is none (a source that records nothing)."""
    path = source.path if isinstance(source, RecordingSource) else source.run_info().recording
    return Path(path) if path else None


class RunSummaryDialog(QDialog):
    """``RunSummaryDialog(path, open_reader=Reader, parent=None)``: the metrics of the recording
    at ``path`` in a read-only monospace text box (``text``), SLO boxes ``slo_ttft`` and
    ``slo_tpot`` (ms, 0 = none) that recompute goodput, and a Refresh button."""

    def __init__(self, path: Path, open_reader: Callable[[Path], Reader] = Reader,
                 parent: QWidget | None = None):
        super().__init__(parent)
        follow_window(self, parent)
        self.path, self.open_reader = path, open_reader
        self.setWindowTitle(f"Run summary — {path.name}")
        self.resize(900, 560)
        self.text = QPlainTextEdit(readOnly=True)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.Monospace)
        self.text.setFont(mono)
        self.text.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.slo_ttft, self.slo_tpot = self._slo_box(), self._slo_box()
        form = QFormLayout()
        form.addRow("TTFT SLO (ms, 0 = none)", self.slo_ttft)
        form.addRow("TPOT SLO (ms, 0 = none)", self.slo_tpot)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh)
        row = QHBoxLayout()
        row.addLayout(form)
        row.addStretch(1)
        row.addWidget(refresh)
        note = QLabel("Recomputed from the recording's rows, as 'batchscope summary' prints them. "
                      "Goodput: completed requests meeting both SLOs, per second of the run.")
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(row)
        lay.addWidget(note)
        lay.addWidget(self.text, 1)
        lay.addWidget(buttons)
        self.refresh()

    def _slo_box(self) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setRange(0.0, MAX_SLO_MS)
        box.setDecimals(1)
        box.setSuffix(" ms")
        box.setSpecialValueText("none")
        box.editingFinished.connect(self.refresh)
        return box

    def slo(self) -> Slo:
        """The SLO in the boxes (a box at 0 sets no limit)."""
        return Slo(self.slo_ttft.value() or None, self.slo_tpot.value() or None)

    def refresh(self) -> None:
        """Read the recording again and show its metrics (or why they cannot be read)."""
        try:
            reader = self.open_reader(self.path)
            try:
                lines = summary_lines(reader, self.slo())
            finally:
                reader.close()
        except (RecordingError, OSError, ValueError) as e:
            lines = [f"cannot summarise {self.path}: {e}"]
        self.text.setPlainText("\n".join(lines))
