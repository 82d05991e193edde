"""The window checks a replayed recording in the background (as ``batchscope check``) and marks a
run cut short as incomplete, listing its unfinished requests; both lists jump to their step."""
from __future__ import annotations

import sqlite3

from tests.support.fakes import FakeSource, shown_window
from recordings.file.open_reader import open_reader
from ui.check_worker import CheckWorker


def recording(tmp_path, num_steps: int, name: str = "run.sqlite"):
    """A recording of the fake run stopped after ``num_steps`` steps (closed cleanly)."""
    path = tmp_path / name
    source = FakeSource(num_steps, record_to=path)
    source.close()
    return path


def wait_checked(qtbot, w):
    qtbot.waitUntil(lambda: w.check_problems is not None, timeout=30_000)


def test_a_clean_complete_recording_checks_clean(qtbot, tmp_path):
    path = recording(tmp_path, 80)                   # every request finished by then
    w = shown_window(qtbot, open_reader(path))
    assert w.check_btn.isVisible() and w.check_btn.text().startswith("checking")
    wait_checked(qtbot, w)
    assert w.check_problems == [] and w.check_btn.text() == "check: clean"
    assert w.end_btn.isHidden() and "incomplete" not in w.windowTitle()
    assert w.show_problems() is None and w.show_unfinished() is None


def test_the_background_check_shows_progress_up_to_100_percent_then_the_result(qtbot, tmp_path):
    path = recording(tmp_path, 252)            # progress comes every 2nd step; the last, 251, is odd
    w = shown_window(qtbot, open_reader(path))
    shown: list[str] = []
    w.check.progress.connect(lambda *_: shown.append(w.check_btn.text()))
    wait_checked(qtbot, w)
    percents = [int(t.removeprefix("checking… ").rstrip("%")) for t in shown]
    assert percents and percents == sorted(percents) and percents[-1] == 100, shown
    assert w.check_btn.text() == "check: clean"


def test_a_run_cut_short_is_marked_incomplete_and_lists_its_unfinished_requests(qtbot, tmp_path):
    path = recording(tmp_path, 12)
    reader = open_reader(path)
    live = reader.state_at(11).request_ids
    assert live
    w = shown_window(qtbot, reader)
    summary = f"incomplete: run stopped at step 11, {len(live)} requests unfinished"
    assert w.end_btn.isVisible() and summary in w.end_btn.toolTip() and summary in w.windowTitle()
    assert w.end_btn.text() == f"incomplete: {len(live)} unfinished"
    dialog = w.show_unfinished()
    qtbot.addWidget(dialog)
    assert [f.request_id for f in dialog.findings] == list(live)
    w.show_step(3)
    dialog.table.cellClicked.emit(1, 2)
    assert w.shown_step == 11 and w.selected == live[1]
    wait_checked(qtbot, w)
    assert w.check_problems == []                   # cut short is not a violation


def test_problems_are_listed_and_jump_to_their_step(qtbot, tmp_path):
    path = recording(tmp_path, 30)
    with sqlite3.connect(path) as db:                # a corrupted count: G1 fails at step 20
        db.execute("UPDATE steps SET num_free_blocks = num_free_blocks + 1 WHERE step = 20")
    w = shown_window(qtbot, open_reader(path))
    wait_checked(qtbot, w)
    assert w.check_problems and w.check_problems[0].step == 20
    assert w.check_btn.text().startswith("check: 1 problem")
    dialog = w.show_problems()
    qtbot.addWidget(dialog)
    assert dialog.table.item(0, 0).text() == "20" and dialog.table.item(0, 1).text() == "G1"
    dialog.table.cellClicked.emit(0, 0)
    assert w.shown_step == 20 and not w.following


def test_opening_another_file_cancels_the_running_check(qtbot, tmp_path, monkeypatch):
    first, second = recording(tmp_path, 80, "a.sqlite"), recording(tmp_path, 12, "b.sqlite")
    w = shown_window(qtbot, open_reader(first))
    old = w.check
    stopped: list[bool] = []
    old.finished.connect(lambda: stopped.append(True))
    already = old.isFinished()
    w.set_source(open_reader(second))                    # does not wait for the old check to stop
    assert old.cancelled and w.check is not old
    qtbot.waitUntil(lambda: already or bool(stopped), timeout=10_000)
    wait_checked(qtbot, w)
    assert w.run_end is not None and not w.run_end.is_complete
    w.close()
    assert w.check is None


def test_the_worker_reports_progress_and_stops_when_cancelled(qtbot, tmp_path):
    path = recording(tmp_path, 80)
    worker = CheckWorker(path)
    seen, results = [], []
    worker.progress.connect(lambda done, total: seen.append((done, total)))
    worker.checked.connect(lambda problems, total: results.append((problems, total)))
    with qtbot.waitSignal(worker.finished, timeout=30_000):
        worker.start()
    qtbot.wait(50)                                  # queued signals delivered
    assert results == [([], 80)] and seen[-1][1] == 80 and seen == sorted(seen)
    cancelled = CheckWorker(path)
    results.clear()
    cancelled.progress.connect(lambda *_a: cancelled.cancel())
    cancelled.checked.connect(lambda *a: results.append(a))
    with qtbot.waitSignal(cancelled.finished, timeout=30_000):
        cancelled.start()
    qtbot.wait(50)
    assert results == [] and cancelled.cancelled


def test_a_live_engine_is_not_checked(qtbot, source, control):
    w = shown_window(qtbot, source, control)
    assert w.check is None and w.check_btn.isHidden() and w.end_btn.isHidden()



class FileSource(FakeSource):
    """A ``RecordingSource`` whose file (``path``) is not a recording the check can read."""

    damage = None

    def __init__(self, path):
        super().__init__(4)
        self.path = path

    def is_complete(self) -> bool:
        return True

    def keep_readable(self, report) -> None:
        self.damage = report


def test_a_file_the_check_cannot_read_says_so(qtbot, tmp_path):
    source = FileSource(tmp_path / "not-a-recording.sqlite")
    source.path.write_bytes(b"this is not SQLite")
    w = shown_window(qtbot, source)
    qtbot.waitUntil(lambda: w.check_btn.text() == "check failed", timeout=30_000)
    assert "could not be checked" in w.check_btn.toolTip() and w.show_problems() is None


def test_a_file_still_being_written_can_be_followed(qtbot, tmp_path):
    path = tmp_path / "growing.sqlite"
    source = FakeSource(6, record_to=path)
    try:
        source.writer.flush()
        reader = open_reader(path)
        w = shown_window(qtbot, reader)
        assert not w.run_end.closed and "not closed" in w.windowTitle()
        assert w.transport.live_btn.isVisible()
        source.advance(5)
        source.writer.flush()
        w.refresh()
        assert w.shown_step == reader.latest_step() == 10
    finally:
        source.close()


def test_a_long_list_is_cut_and_says_so(qtbot):
    from ui.dialogs.check import MAX_ROWS, Finding, FindingsDialog
    d = FindingsDialog("Unfinished requests", "many", [Finding(7, "waiting", f"r{i}", f"r{i}")
                                                       for i in range(MAX_ROWS + 5)])
    qtbot.addWidget(d)
    assert d.table.rowCount() == MAX_ROWS and "5 more left out" in d.summary.text()
    with qtbot.waitSignal(d.jumpRequested) as sig:
        d.table.cellClicked.emit(3, 1)
    assert sig.args == [7, "r3"]
