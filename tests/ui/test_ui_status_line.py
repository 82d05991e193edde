"""Every text of the status bar and the views' title rows reads whole, or visibly shortened with
the whole text in its tooltip, at ordinary window sizes: the model name never loses its start
(it showed "molLM2-135M-Instruct" next to "checking…" and "incomplete: N unfinished")."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication

from recordings.file.open_reader import open_reader
from tests.support.fakes import FakeSource, shown_window
from ui.fitted_label import PADDING_PX, FittedLabel
from ui.status_line import StatusLine

SIZES = [(1600, 1000), (1280, 800), (1024, 700)]
MODEL = "fake/SmolLM2-135M"            # tests.support.fakes' run info


def fits(label: FittedLabel) -> bool:
    """The painted text fits the label's width (less its padding) by the label's font metrics."""
    return QFontMetrics(label.font()).horizontalAdvance(label.shown_text()) <= label.width() - 2 * PADDING_PX


def settle() -> None:
    for _ in range(5):
        QApplication.processEvents()


def test_a_fitted_label_shows_the_full_text_then_the_short_form_then_elides_keeping_its_start(qtbot):
    label = FittedLabel("step 88,888 of 88,888  (scrubbed)", "step 88,888/88,888")
    qtbot.addWidget(label)
    label.show()
    label.setToolTip("the shown step")
    label.setText("step 6,000 of 20,238  (scrubbed)", "step 6,000/20,238")
    hint, minimum = label.sizeHint().width(), label.minimumSizeHint().width()
    assert minimum < hint
    label.resize(hint, 20)
    assert label.shown_text() == "step 6,000 of 20,238  (scrubbed)" and label.is_whole() and fits(label)
    assert label.toolTip() == "the shown step"
    label.resize(minimum, 20)
    assert label.shown_text() == "step 6,000/20,238" and fits(label)
    assert label.toolTip().startswith("step 6,000 of 20,238  (scrubbed)") and "the shown step" in label.toolTip()
    label.resize(minimum // 2, 20)
    shown = label.shown_text()
    assert shown.endswith("…") and "step 6,000/20,238".startswith(shown[:-1]) and fits(label)
    label.resize(hint, 20)
    assert label.is_whole() and label.toolTip() == "the shown step"
    label.setText("step 6,001 of 20,238")          # a new text changes no size hint: no re-layout
    assert (label.sizeHint().width(), label.minimumSizeHint().width()) == (hint, minimum)


def test_a_status_line_shrinks_the_fields_that_matter_least_first_and_never_overlaps(qtbot):
    line = StatusLine()
    qtbot.addWidget(line)
    line.show()
    low = line.add(FittedLabel("5,554 output tok/s (16-step mean)", "5,554 tok/s"), 1)
    high = line.add(FittedLabel("KV 97% (15,884/16,384 blocks)", "KV 97%"), 2)
    run = line.add(FittedLabel("llama-3.1-8b · sim:h100 · bfloat16", "llama-3.1-8b"), 3, stretch=True)
    for lab, text in ((low, "5,554 output tok/s (16-step mean)"), (high, "KV 97% (15,884/16,384 blocks)"),
                      (run, "llama-3.1-8b · sim:h100 · bfloat16")):
        lab.setText(text, text.split(" (")[0].replace(" output", "").split(" · ")[0])
    full = line.sizeHint().width()
    line.resize(full + 200, 24)                    # room to spare: all whole, the stretch takes it
    assert all(lab.is_whole() for lab in (low, high, run)) and run.width() > run.sizeHint().width()
    line.resize(full - 40, 24)                     # a little short: only the least important gives way
    assert not low.is_whole() and high.is_whole() and run.is_whole()
    assert low.shown_text() == "5,554 tok/s"
    line.resize(line.minimumSizeHint().width(), 24)  # the narrowest: every short form, still whole
    assert [lab.shown_text() for lab in (low, high, run)] == ["5,554 tok/s", "KV 97%", "llama-3.1-8b"]
    for lab in (low, high, run):
        assert fits(lab) and lab.text() in lab.toolTip()
    edges = sorted((lab.x(), lab.x() + lab.width()) for lab in (low, high, run))
    assert all(a[1] <= b[0] for a, b in zip(edges, edges[1:])) and edges[-1][1] <= line.width()


@pytest.fixture
def cut_short(qtbot, tmp_path):
    """The window replaying a run cut short (requests unfinished), its check still running."""
    path = tmp_path / "cut.sqlite"
    FakeSource(12, record_to=path).close()
    reader = open_reader(path)
    w = shown_window(qtbot, reader)
    yield w
    w.close()
    reader.close()


def sized(w, size: tuple[int, int], step: int):
    """``w`` resized to ``size`` at ``step``, laid out."""
    w.resize(*size)
    w.show_step(step)
    settle()
    return w


@pytest.mark.parametrize("size", SIZES)
def test_the_status_bar_reads_whole_with_check_and_incomplete_shown(cut_short, size):
    w = sized(cut_short, size, 5)
    assert w.width() == size[0], "the window cannot get this narrow"
    assert w.end_btn.isVisible() and w.check_btn.isVisible()
    run = w.status["run"]
    assert run.text() == f"{MODEL} · cpu · float32" and run.shown_text().startswith(MODEL)
    fields = [lab for lab in w.status.values() if lab.isVisible()] + [w.end_btn, w.check_btn]
    for lab in fields:
        if isinstance(lab, FittedLabel):
            assert fits(lab), (lab.text(), lab.shown_text(), lab.width())
            assert lab.is_whole() or lab.text() in lab.toolTip()
        else:                                      # the buttons never shrink
            assert lab.width() >= lab.sizeHint().width()
    edges = sorted((lab.x(), lab.x() + lab.width()) for lab in fields)
    assert all(a[1] <= b[0] for a, b in zip(edges, edges[1:])), edges
    assert edges[-1][1] <= w.status_line.width()
    if size[0] >= 1600:                            # a wide window: every field whole
        assert all(lab.is_whole() for lab in fields if isinstance(lab, FittedLabel))


@pytest.mark.parametrize("size", SIZES)
def test_the_views_title_numbers_fit_their_labels(cut_short, size):
    w = sized(cut_short, size, 11)
    for view in (w.block_map, w.timeline):
        numbers = view.title_numbers
        assert fits(numbers) and numbers.shown_text(), (numbers.text(), numbers.width())
        assert numbers.is_whole() or numbers.text() in numbers.toolTip()
        assert numbers.geometry().right() < view.width()


def test_a_temporary_message_gets_the_whole_status_bar(cut_short):
    w = cut_short
    w.resize(1024, 700)
    settle()
    assert w.jump_to("99999")                     # a step past the end: said in a message
    settle()
    message = w.statusBar().currentMessage()
    assert message.startswith("step 99,999 is outside this run") and not w.status_line.isVisible()
    fm = QFontMetrics(w.statusBar().font())
    assert fm.horizontalAdvance(message) < w.statusBar().width() - 20
    w.statusBar().clearMessage()
    settle()
    assert w.status_line.isVisible() and w.status["run"].shown_text().startswith(MODEL)
