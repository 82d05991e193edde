"""Dialog to change a paused live engine's knobs: ``max_num_seqs``, ``max_num_batched_tokens`` and
the usable KV pool (``num_usable_blocks``, 1 .. the cache's blocks).

It opens with the engine's current values (``EngineControl.knobs()``); Apply passes only the
knobs whose value changed to ``EngineControl.set_knobs``, which runs them on the engine thread
between steps (``LLMEngine.set_knobs``: lowering the batch slots or the usable pool preempts,
growing the pool gives blocks back). A value the engine refuses comes back through
``control.last_error()`` and the window's error banner; nothing is raised into Qt. Anything
``set_knobs`` refuses at once keeps the dialog open with the reason in red.
"""
from __future__ import annotations

from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QLabel, QSpinBox,
                               QVBoxLayout, QWidget)

from engine.state.source import LIVE_KNOBS, EngineControl
from ui.style.colors import ERROR, MUTED, css
from ui.style.theme import follow_window

# what each knob does, as its tooltip
KNOB_TIPS = {
    "max_num_seqs": "batch slots: requests running at once; lowering it preempts the requests "
                    "in the slots that go",
    "max_num_batched_tokens": "token budget of one step (prefill chunks plus decodes)",
    "num_usable_blocks": "KV blocks in use: the first N blocks of the cache; shrinking preempts "
                         "the requests holding blocks above (swapped out when the CPU pool has "
                         "room) and takes those blocks out of use",
}
MAX_VALUE = 2**31 - 1          # QSpinBox's limit; the engine checks the real ones


class KnobsDialog(QDialog):
    """``KnobsDialog(control, num_gpu_blocks, parent=None)``: a spin box per knob of
    :data:`engine.state.source.LIVE_KNOBS` (``spins[name]``) showing ``current`` (the values when it
    opened). After ``accept``, ``changes`` holds what was passed to ``control.set_knobs`` ({}
    when nothing changed: then it is not called)."""

    def __init__(self, control: EngineControl, num_gpu_blocks: int, parent: QWidget | None = None):
        super().__init__(parent)
        follow_window(self, parent)
        self.control = control
        self.current = control.knobs()
        self.changes: dict[str, int] = {}
        self.setWindowTitle("Live knobs")
        self.setMinimumWidth(420)
        limits = {"max_num_seqs": (1, MAX_VALUE), "max_num_batched_tokens": (1, MAX_VALUE),
                  "num_usable_blocks": (1, max(1, num_gpu_blocks))}
        form = QFormLayout()
        self.spins: dict[str, QSpinBox] = {}
        for name in LIVE_KNOBS:
            box = QSpinBox()
            box.setRange(*limits[name])
            box.setGroupSeparatorShown(True)
            if name in self.current:
                box.setValue(self.current[name])
            box.setToolTip(KNOB_TIPS[name])
            self.spins[name] = box
            form.addRow(name, box)
        note = QLabel(f"usable KV blocks: 1 .. {num_gpu_blocks:,} (the cache's blocks). Changes "
                      "apply before the next step; the map shows the preempted requests and the "
                      "blocks out of use at once. Only changed knobs are sent.")
        note.setWordWrap(True)
        note.setStyleSheet(f"color: {css(MUTED)};")
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.setStyleSheet(f"color: {css(ERROR)};")
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.button(QDialogButtonBox.Ok).setText("Apply")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(note)
        lay.addWidget(self.message)
        lay.addWidget(self.buttons)

    def changed(self) -> dict[str, int]:
        """The knobs whose spin box differs from the value the dialog opened with."""
        return {name: box.value() for name, box in self.spins.items()
                if box.value() != self.current.get(name)}

    def accept(self) -> None:
        changes = self.changed()
        if changes:
            try:
                self.control.set_knobs(**changes)
            except Exception as e:                      # refused at once: say why, stay open
                self.message.setText(f"The engine refused the change: {e}")
                return
        self.changes = changes
        super().accept()
