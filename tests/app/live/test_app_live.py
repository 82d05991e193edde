"""The live window on the real embedded model: the engine thread serves the demo workload, a
request injected through the dialog shows up in the waiting queue, runs, streams and finishes;
pause + single step runs exactly one scheduler iteration."""
from __future__ import annotations

import pytest

from app.cli import build_parser
from app.commands.window import make_live
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader
from ui import MainWindow
from ui.dialogs.inject import InjectDialog

pytestmark = pytest.mark.slow


@pytest.fixture
def live(qtbot, tmp_path):
    rec = tmp_path / "live.sqlite"
    args = build_parser().parse_args(["demo", "--limit", "3", "--record", str(rec), "--paused",
                                      "--max-output-tokens", "12"])
    source, worker, record = make_live(args)
    win = MainWindow(source, worker, open_recording=Reader)
    qtbot.addWidget(win)
    win.show()
    worker.start()
    qtbot.waitUntil(lambda: worker.built is not None or worker.last_error() is not None, timeout=180_000)
    assert worker.last_error() is None, worker.last_error()
    yield win, source, worker, record
    worker.stop()


def test_single_step_while_paused_runs_exactly_one_iteration(live, qtbot):
    win, source, worker, _ = live
    assert worker.is_paused()
    qtbot.waitUntil(lambda: len(source.latest_state()) >= 1, timeout=30_000)
    assert source.latest_step() == -1                   # paused from the start: nothing ran
    worker.step_once()
    qtbot.waitUntil(lambda: source.latest_step() == 0, timeout=30_000)
    qtbot.wait(500)
    assert source.latest_step() == 0                    # exactly one, and it stays paused


def test_injected_request_waits_runs_streams_and_finishes(live, qtbot):
    win, source, worker, record = live
    dialog = InjectDialog(worker, win)
    dialog.prompt.setPlainText("Name three colours of the rainbow.")
    dialog.max_tokens.setValue(6)
    dialog.accept()
    rid = dialog.request_id
    assert rid
    qtbot.waitUntil(lambda: source.latest_state().view(rid) is not None, timeout=30_000)
    assert source.latest_state().view(rid).status == "WAITING"         # shown while still paused
    win.refresh(force=True)
    assert rid in [r.request_id for r in win.state.waiting]
    worker.resume()
    qtbot.waitUntil(lambda: source.latest_state().view(rid).is_finished, timeout=120_000)
    view = source.latest_state().view(rid)
    assert view.status == "FINISHED_LENGTH" or view.finish_reason == "stop"
    assert 1 <= view.num_output_tokens <= 6
    assert source.request_text(rid, source.latest_step()).strip()      # generated text streamed
    win.select_request(rid)
    win.refresh(force=True)
    assert rid in [r.request_id for r in win.state.finished]
    worker.stop()
    reader = open_reader(record)                                              # and it was recorded
    assert reader.state_at(reader.latest_step()).view(rid) == view
    assert reader.request_info(rid).num_output_tokens == view.num_output_tokens
    assert reader.request_text(rid, reader.latest_step()) == source.request_text(rid, source.latest_step())
