"""Hostile text stays text: HTML, terminal escape sequences, right-to-left overrides, NUL bytes and
invalid UTF-8 recorded as request ids, prompts, generated text, the model and trace names and a
step's error message, then read back by the reader, the CLI (summary, check) and every view of
the window (offscreen)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tests.support.hostile_files import CONTROLS, HOSTILE, INVALID_UTF8, MARKUP, make_hostile_recording, request_ids  # noqa: E402
from recordings.file.reader import Reader  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.safe_text import visible  # noqa: E402


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return make_hostile_recording(tmp_path_factory.mktemp("hostile") / "hostile.sqlite")


def test_the_reader_gives_the_text_back_as_it_was(hostile):
    with open_reader(hostile) as reader:
        ids = reader.request_ids()
        assert ids == request_ids()
        infos = [reader.request_info(rid) for rid in ids]
        assert infos[0].prompt_text == INVALID_UTF8.decode("utf-8", "replace")
        assert [i.prompt_text for i in infos[1:]] == HOSTILE[1:]
        texts = [reader.request_text(rid, reader.latest_step()) for rid in ids]
        joined = "".join(texts)
        assert any(c in joined for c in CONTROLS) and any(m in joined for m in MARKUP)
        for h in sorted(HOSTILE, key=len, reverse=True):    # made of the tokenizer's pieces only
            joined = joined.replace(h, "")
        assert joined == ""
        errors = [e for (e,) in reader.execute("SELECT error FROM steps WHERE error IS NOT NULL")]
        assert any(HOSTILE[0] in e and HOSTILE[1] in e for e in errors)


def test_the_cli_summary_and_check_print_escapes_not_controls(hostile, capsys):
    from app.cli import main
    assert main(["summary", str(hostile)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in CONTROLS), repr(out)
    assert "\\x1b[2J" in out and "\\u202eexe.txt" in out           # shown, escaped
    assert main(["check", str(hostile)]) == 0
    captured = capsys.readouterr()                  # (the progress bar on stderr redraws with \r)
    assert not any(c in captured.out + captured.err.replace("\r", "") for c in CONTROLS)


def test_the_cli_escapes_a_hostile_file_name(hostile, tmp_path, capsys):
    from app.cli import main
    named = tmp_path / ("\x1b[31m\u202e" + "run.sqlite")
    named.write_bytes(b"not sqlite at all")
    assert main(["check", str(named)]) == 1
    captured = capsys.readouterr()
    assert not any(c in captured.out + captured.err.replace("\r", "") for c in CONTROLS)
    assert "\\x1b[31m\\u202erun.sqlite" in captured.err


def test_every_view_of_the_window_shows_the_text_literally(hostile, qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import Qt as GuiQt
    from PySide6.QtWidgets import QAbstractItemView, QLabel, QWidget
    from ui import MainWindow

    reader = open_reader(hostile)
    w = MainWindow(reader, None, open_recording=Reader)
    qtbot.addWidget(w)
    w.timer.stop()          # frames are driven below
    w.resize(1400, 900)

    def check_widgets():
        for label in w.findChildren(QLabel):
            text = label.text()
            assert not any(c in text for c in CONTROLS), (label.parent(), repr(text))
            if label.textFormat() != Qt.PlainText and GuiQt.mightBeRichText(text):
                assert not any(m in text for m in MARKUP), (label, text)
        for widget in w.findChildren(QWidget):
            tip = widget.toolTip()
            assert not any(m in tip for m in MARKUP) and not any(c in tip for c in CONTROLS), (widget, tip)

    shown_ids: set[str] = set()
    for step in range(reader.latest_step() + 1):
        w.show_step(step)
        for view in w.findChildren(QAbstractItemView):
            model = view.model()
            if model is None:
                continue
            for r in range(min(model.rowCount(), 50)):
                for c in range(model.columnCount()):
                    shown_ids.add(str(model.data(model.index(r, c), Qt.DisplayRole)))
                    tip = str(model.data(model.index(r, c), Qt.ToolTipRole) or "")
                    assert not any(m in tip for m in MARKUP) and not any(x in tip for x in CONTROLS), tip
        check_widgets()
    assert set(request_ids()) <= shown_ids       # the tables show every id as it is (plain cells)
    for rid in request_ids():
        assert w.jump_to(rid)
        w.select_request(rid)
        w.refresh(force=True)
        check_widgets()
        header = w.inspector.header.text()
        assert visible(rid).replace("<", "&lt;").replace(">", "&gt;")[:12] in header
        assert all(lab.textFormat() == Qt.PlainText for lab in w.inspector.values.values())
        text = reader.request_text(rid, w.shown_step)      # (a text box keeps line breaks as \n)
        assert w.inspector.text.toPlainText() == text.replace("\r\n", "\n").replace("\r", "\n")
    assert w.status["run"].textFormat() == Qt.PlainText and "<b>bold</b>" in w.status["run"].text()
    assert w.status["run"].toolTip().startswith("<qt>")
    assert w.banner.label.textFormat() == Qt.PlainText
    w.grab().save(str(hostile.parent / "hostile_window.png"))
    w.close()
    reader.close()


def test_hover_tooltips_show_ids_as_text(qtbot, monkeypatch):
    """The block map's and the timeline's hover text (``ui.views.pointer``) names requests: escaped."""
    import pyqtgraph as pg
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import Qt as GuiQt
    from PySide6.QtWidgets import QToolTip
    from ui.views.pointer import track_pointer

    shown = []
    monkeypatch.setattr(QToolTip, "showText", lambda pos, text, *a: shown.append(text))
    view = pg.GraphicsView()
    qtbot.addWidget(view)
    texts = {"first": f"block 3: {HOSTILE[0]} {HOSTILE[1]}", "later": f"block 3\nheld by {HOSTILE[0]}{HOSTILE[1]}"}
    for where, text in texts.items():     # an id on the first line (Qt guesses from it) or below
        track_pointer(view, lambda pos: "key", lambda key, text=text: text, lambda key: None)
        view.scene().sigMouseMoved.emit(QPointF(1, 1))
        tip = shown[-1]
        assert not any(c in tip for c in CONTROLS) and "\\x1b[2J" in tip, where
        if GuiQt.mightBeRichText(tip):
            assert not any(m in tip for m in MARKUP) and "&lt;img src=x" in tip, where
        else:
            assert "<img src=x" in tip, where            # shown as plain text: literally
