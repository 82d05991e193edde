"""The replayed recording's check and end in the main window's status bar, a mixin of
:class:`ui.main_window.MainWindow`: the file is checked in the background as ``batchscope
check`` does (``ui.check_worker``, a child process; cancelled when another file is opened or the
window closes), the "check: ..." button lists the problems and the "incomplete: ..." button the
requests a run cut short left unfinished (``ui.dialogs.check``; a click shows the step). A
damaged file (found by the check, or opened as damaged) replays up to its last readable step,
with the damage and the ``batchscope recover`` command in the banner and on the button."""
from __future__ import annotations

from PySide6.QtWidgets import QToolButton

from recordings.errors import RecordingError
from recordings.check.invariants import Problem
from ui.dialogs.check import FindingsDialog, problem_findings, unfinished_findings
from ui.check_worker import CheckWorker
from ui.style.colors import ERROR, css
from ui.plain_text import as_rich
from ui.run_end import run_end

CHECK_TIP = ("The recording checked as `batchscope check` does (integrity, rows, G1-G4 every step, G6 "
             "at the end, metrics, complete); "
             "click to list the problems")


class RecordingStatus:
    """``check_btn`` / ``end_btn`` of the status bar and the background check behind them (the
    window provides ``statusBar``, ``source``, ``show_step`` and ``select_request``)."""

    def _status_button(self, tip: str, slot) -> QToolButton:
        b = QToolButton()
        b.setAutoRaise(True)
        b.setToolTip(tip)
        b.clicked.connect(slot)
        b.hide()
        return b

    # --- the recording's check and end ------------------------------------------------------------
    def _start_check(self, source) -> None:
        """Cancel the running check; for a replayed recording (``source`` with a ``path``), mark
        a run cut short and start checking the file in the background."""
        self._stop_check()
        self.damage_text = None
        try:
            self.check_problems, self.run_end = None, run_end(source) if source is not None else None
        except RecordingError:          # a damaged file's requests do not all read
            self.check_problems, self.run_end = None, None
        end = self.run_end.short() if self.run_end is not None else ""
        self.end_btn.setText(end)
        self.end_btn.setToolTip(f"{self.run_end.summary()}: click to list the unfinished requests"
                                if end else "")
        self.end_btn.setMinimumWidth(self.end_btn.sizeHint().width())
        self.end_btn.setVisible(bool(end))
        path = getattr(source, "path", None)
        self.check_btn.setVisible(path is not None)
        if path is None:
            return
        if getattr(source, "damage", None) is not None:     # opened as damaged: already known
            self._damaged(source.damage)
            return
        self.check_btn.setText("checking…")
        self.check_btn.setToolTip(CHECK_TIP)
        self.check_btn.setStyleSheet("")
        self.check = worker = CheckWorker(path, self)
        self.check_btn.setMinimumWidth(self.check_btn.fontMetrics().horizontalAdvance("checking… 100%") + 16)
        worker.progress.connect(lambda done, total: worker is self.check and self.check_btn.setText(
            f"checking… {100 * done // max(total, 1)}%"))
        worker.checked.connect(lambda problems, total: worker is self.check and self._checked(problems, total))
        worker.failed.connect(lambda message: worker is self.check and self._checked(None, 0, message))
        worker.damaged.connect(lambda report: worker is self.check and self._damaged(report))
        worker.start()

    def _stop_check(self, wait: bool = False) -> None:
        """Cancel the running check: it stops at its next step, its signals are ignored from
        now on and it deletes itself once finished (``wait``: block until then, as the window
        closes: a thread must not outlive its window)."""
        worker, self.check = self.check, None
        if worker is None:
            return
        worker.cancel()
        if wait:
            worker.wait()
        elif worker.isFinished():
            worker.deleteLater()
        else:
            worker.finished.connect(worker.deleteLater)

    def _checked(self, problems: list | None, num_steps: int, error: str = "") -> None:
        self.check_problems = problems
        if problems is None:
            self.check_btn.setText("check failed")
            self.check_btn.setToolTip(as_rich(f"The recording could not be checked: {error}"))
            self.check_btn.setStyleSheet(f"color: {css(ERROR)};")
        elif problems:
            n = len(problems)
            self.check_btn.setText(f"check: {n} problem{'s' * (n != 1)}")
            self.check_btn.setStyleSheet(f"color: {css(ERROR)};")
        else:
            self.check_btn.setText("check: clean")
            self.check_btn.setToolTip(f"{num_steps:,} steps checked: SQLite integrity, schema, every "
                                      "step's rows, no invariant violated (G1 blocks, G3 queues, G4 "
                                      "limits, G6 drain), metrics equal the stored outcomes, complete")

    def _damaged(self, report) -> None:
        """A damaged file (``recordings.damage.report.DamageReport``): replay only its readable steps
        (``Reader.keep_readable``), say so in the banner and on the check button, whose list
        holds the report and the command that saves what reads."""
        keep = getattr(self.source, "keep_readable", None)
        if keep is not None and report.version >= 2:
            keep(report)
        n, k = report.last_step + 1, report.last_good_step
        self.check_problems = [Problem(-1, "damage", line) for line in report.lines() + [report.suggestion()]]
        self.check_btn.setText(f"damaged: steps 0..{k} of {n:,} readable" if k >= 0 else "damaged: no step reads")
        self.check_btn.setToolTip(as_rich("\n".join(report.lines() + [report.suggestion(),
                                                                         "Click to list the damage"])))
        self.check_btn.setStyleSheet(f"color: {css(ERROR)};")
        self.check_btn.setMinimumWidth(self.check_btn.sizeHint().width())
        self.damage_text = report.summary()
        self.refresh(force=True)

    def _show_findings(self, title: str, summary: str, findings: list) -> FindingsDialog:
        if self.findings is not None:
            self.findings.close()
        self.findings = FindingsDialog(title, summary, findings, self)
        self.findings.jumpRequested.connect(self._jump_to_finding)
        self.findings.show()
        return self.findings

    def show_problems(self) -> FindingsDialog | None:
        """The check's problems in a dialog (None before the check is done or when clean)."""
        if not self.check_problems:
            return None
        n = len(self.check_problems)
        summary = (f"{self.source.path}: damaged" if self.damage_text else
                   f"{self.source.path}: {n} problem{'s' * (n != 1)} found")
        return self._show_findings("Recording check", summary, problem_findings(self.check_problems))

    def show_unfinished(self) -> FindingsDialog | None:
        """The requests a run cut short left unfinished, in a dialog (None for a complete run)."""
        end = self.run_end
        if end is None or end.is_complete:
            return None
        return self._show_findings("Unfinished requests", end.summary(), unfinished_findings(end))

    def _jump_to_finding(self, step: int, request_id: str) -> None:
        self.show_step(step)
        if request_id:
            self.select_request(request_id)
