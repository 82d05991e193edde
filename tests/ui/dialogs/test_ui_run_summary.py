"""View > Run summary: the window shows the metrics `batchscope summary` prints, recomputed from
the recording, and recomputes goodput when an SLO is typed in."""
from __future__ import annotations

import pytest

from tests.support.fakes import FakeSource
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader
from recordings.metrics.serving import Slo
from recordings.metrics.summary_lines import summary_lines
from ui import MainWindow
from ui.dialogs.run_summary import RunSummaryDialog, recording_path


@pytest.fixture
def recorded(tmp_path):
    path = tmp_path / "fake.sqlite"
    FakeSource(record_to=path).close()
    return path


def test_window_shows_the_cli_summary_of_a_replay(qtbot, recorded):
    reader = open_reader(recorded)
    w = MainWindow(reader, None, open_recording=Reader)
    w.timer.stop()
    qtbot.addWidget(w)
    dialog = w.show_run_summary()
    qtbot.addWidget(dialog)
    text = dialog.text.toPlainText()
    assert text == "\n".join(summary_lines(reader))
    for label in ("E2E latency p50/p90/p99 (steps)", "queue time p50/p90/p99 (steps)",
                  "TPOT p50/p90/p99 (steps)", "prefill / decode time (steps)"):
        assert label in text
    assert "goodput" not in text                       # no SLO yet
    dialog.slo_ttft.setValue(250)
    dialog.refresh()
    assert dialog.slo() == Slo(ttft_ms=250)
    assert dialog.text.toPlainText() == "\n".join(summary_lines(reader, Slo(ttft_ms=250)))
    assert "goodput" in dialog.text.toPlainText() and "n/a" in dialog.text.toPlainText()   # virtual clock
    reader.close()


def test_a_source_without_a_recording_says_so(qtbot, tmp_path):
    w = MainWindow(FakeSource(), None)
    w.timer.stop()
    qtbot.addWidget(w)
    assert recording_path(w.source) is None
    assert w.show_run_summary() is None
    assert "No recording" in w.statusBar().currentMessage()
    dialog = RunSummaryDialog(tmp_path / "missing.sqlite")
    qtbot.addWidget(dialog)
    assert dialog.text.toPlainText().startswith(f"cannot summarise {tmp_path / 'missing.sqlite'}")
