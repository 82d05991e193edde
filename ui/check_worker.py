"""``batchscope check`` in the window: a recording's invariants checked in a background thread.

:class:`CheckWorker` opens its own ``recordings.Reader`` on the file (SQLite connections are
not shared across threads) and runs :func:`recordings.checks.check_recording` on it, reporting
progress; the window shows it in the status bar and the problems in ``ui.check_dialog``. The
window cancels a running check when it opens another file or closes.
"""
from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QThread, Signal

PROGRESS_STEPS = 100        # progress is reported about this many times over a whole check


class _Cancelled(Exception):
    pass


class CheckWorker(QThread):
    """``CheckWorker(path, parent=None)``; ``start()`` runs the check. Signals (queued to the
    thread that owns the worker): ``progress(steps_checked, num_steps)``,
    ``checked(problems, num_steps)`` (``problems``: list of ``recordings.checks.Problem``, []
    when clean), ``failed(message)`` (the file could not be read). A cancelled check
    (:meth:`cancel`) emits none of them after the cancel."""

    progress = Signal(int, int)
    checked = Signal(object, int)
    failed = Signal(str)

    def __init__(self, path: str | Path, parent=None, max_problems: int = 100):
        super().__init__(parent)
        self.path, self.max_problems = Path(path), max_problems
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Stop at the next step checked; no signal follows."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def run(self) -> None:
        from recordings import Reader
        from recordings.checks import check_recording

        try:
            with Reader(self.path) as reader:
                num_steps = reader.latest_step() + 1
                every = max(1, num_steps // PROGRESS_STEPS)

                def on_step(step: int) -> None:
                    if self._cancel.is_set():
                        raise _Cancelled
                    if step % every == 0:
                        self.progress.emit(step + 1, num_steps)
                problems = check_recording(reader, max_problems=self.max_problems, on_step=on_step)
        except _Cancelled:
            return
        except Exception as e:  # noqa: BLE001 - any failure is the check's result, shown
            if not self._cancel.is_set():
                self.failed.emit(f"{type(e).__name__}: {e}")
            return
        if not self._cancel.is_set():
            self.checked.emit(problems, num_steps)
