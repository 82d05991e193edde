"""``batchscope check`` in the window: a recording's invariants checked in a child process.

:class:`CheckWorker` runs this file as a child Python process (``python check_worker.py PATH
MAX_PROBLEMS``, without importing the ``ui`` package) that opens its own ``recordings.file.reader.Reader`` on the file and runs
:func:`recordings.check.file_check.check_file` (integrity, schema, rows, invariants, metrics, cut
short), writing one JSON object a line on stdout: progress,
then each problem, then the end (or the error that stopped it). A process, not a thread: the
check is Python, and in a thread of the window's process it would hold the GIL against the GUI
thread (scrubbing frames took twice as long, p50 68 ms against 33, while a 3,000-step recording
was checked on a busy 2-core machine; in a child process at ``nice`` 10 they took as long as
without a check). The window shows the
progress in the status bar and the problems in ``ui.dialogs.check``, and cancels a check (kills
the child) when it opens another file or closes.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal

from recordings.check.invariants import Problem
from recordings.damage.report import DamageReport

PROGRESS_STEPS = 100        # progress is reported about this many times over a whole check
_ROOT = Path(__file__).resolve().parents[1]      # the folder holding the ui and recordings packages
_BOOT = "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')"


class CheckWorker(QObject):
    """``CheckWorker(path, parent=None, max_problems=100)``; ``start()`` starts the check.
    Signals (in the thread that owns the worker): ``progress(steps_checked, num_steps)``,
    ``checked(problems, num_steps)`` (``problems``: list of ``recordings.check.invariants.Problem``, []
    when clean), ``failed(message)`` (the file
    could not be read, or the child died), ``damaged(report)`` (the file is damaged: its
    ``recordings.damage.report.DamageReport``, after ``checked``, instead of ``failed``), then ``finished()``. A cancelled check
    (:meth:`cancel`) emits only ``finished``."""

    progress = Signal(int, int)
    checked = Signal(object, int)
    failed = Signal(str)
    damaged = Signal(object)
    finished = Signal()

    def __init__(self, path: str | Path, parent: QObject | None = None, max_problems: int = 100):
        super().__init__(parent)
        self.path, self.max_problems = Path(path), max_problems
        self.cancelled = False
        self._problems: list = []
        self._result: tuple | None = None       # ("done", num_steps) or ("error", message)
        self._damage = None                     # a DamageReport, when the child found damage
        self._buffer = b""
        self.process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONPATH", os.pathsep.join(p for p in (str(_ROOT), env.value("PYTHONPATH")) if p))
        self.process.setProcessEnvironment(env)
        self.process.readyReadStandardOutput.connect(self._read)
        self.process.finished.connect(self._done)
        self.process.errorOccurred.connect(self._start_failed)

    def start(self) -> None:
        # this file run as a script: importing the ui package would load every view (seconds)
        self.process.start(sys.executable, ["-c", _BOOT, __file__, str(self.path), str(self.max_problems)])

    def cancel(self) -> None:
        """Stop the check (kill the child); no signal but ``finished`` follows."""
        self.cancelled = True
        if self.process.state() != QProcess.ProcessState.NotRunning:
            self.process.kill()

    def isRunning(self) -> bool:
        return self.process.state() != QProcess.ProcessState.NotRunning

    def isFinished(self) -> bool:
        return self._result is not None or (self.cancelled and not self.isRunning())

    def wait(self, msecs: int = -1) -> bool:
        """Block until the child ended (``msecs`` < 0: however long); True if it did."""
        return not self.isRunning() or self.process.waitForFinished(msecs)

    def _read(self) -> None:
        self._buffer += bytes(self.process.readAllStandardOutput())
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if self.cancelled or not line.strip():
                continue
            msg = json.loads(line)
            if "progress" in msg:
                self.progress.emit(*msg["progress"])
            elif "problem" in msg:
                self._problems.append(Problem(*msg["problem"]))
            elif "done" in msg:
                self._result = ("done", int(msg["done"]))
            elif "error" in msg:
                self._result = ("error", str(msg["error"]))
            elif "damage" in msg:
                self._damage = DamageReport.from_json(msg["damage"])

    def _done(self, exit_code: int, _status) -> None:
        self._read()
        if not self.cancelled:
            result = self._result
            if result is not None and result[0] == "done":
                self.checked.emit(self._problems, result[1])
            elif result is not None:
                if self._damage is None:        # a damaged file: what still reads says more
                    self.failed.emit(result[1])
            else:
                err = bytes(self.process.readAllStandardError()).decode("utf-8", "replace").strip()
                self._result = ("error", f"the check stopped (exit code {exit_code}): {err[-500:]}")
                self.failed.emit(self._result[1])
            if self._damage is not None:
                self.damaged.emit(self._damage)
        self.finished.emit()

    def _start_failed(self, error) -> None:
        if error == QProcess.ProcessError.FailedToStart and not self.cancelled:
            self._result = ("error", f"the check could not start: {self.process.errorString()}")
            self.failed.emit(self._result[1])
            self.finished.emit()


def _emit(**msg) -> None:
    print(json.dumps(msg), flush=True)


def main(argv: list[str]) -> int:
    """The child: check the recording at ``argv[0]`` (at most ``argv[1]`` problems), reporting
    on stdout as JSON lines. Returns 0 when the check ran (clean or not), 1 when it could not."""
    from recordings.file.open_reader import open_reader
    from recordings.check.file_check import check_file

    path, max_problems = argv[0], int(argv[1])
    if hasattr(os, "nice"):
        os.nice(10)                    # the window's frames come first when the CPUs are busy
    try:
        with open_reader(path) as reader:
            num_steps = reader.latest_step() + 1
            every = max(1, num_steps // PROGRESS_STEPS)

            def on_step(step: int) -> None:
                if step % every == 0:
                    _emit(progress=[step + 1, num_steps])
            problems = check_file(reader, max_problems=max_problems, on_step=on_step)
            _emit(progress=[num_steps, num_steps])      # every step checked: 100%
    except Exception as e:  # noqa: BLE001 - any failure is the check's result, shown
        _emit(error=f"{type(e).__name__}: {e}")
        _emit_damage(path)
        return 1
    for p in problems:
        _emit(problem=[p.step, p.invariant, p.message])
    _emit(done=num_steps)
    if any(p.invariant in ("integrity", "record") for p in problems):
        _emit_damage(path)
    return 0


def _emit_damage(path: str) -> None:
    """Report what still reads (``recordings.damage.report``) when the file is damaged."""
    from recordings.damage.analysis import damage_analysis

    try:
        report = damage_analysis(path)        # the analysis check, recover and summary share
    except Exception:  # noqa: BLE001 - not a recording at all: the error said it
        return
    if report.is_damaged:
        _emit(damage=report.to_json())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
