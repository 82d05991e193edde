"""Inject dialog validation and the control calls it makes; Engine > Inject from the window."""
from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QDialog

from ui.inject_dialog import InjectDialog


def test_empty_prompt_is_rejected_with_a_clear_message(qtbot, control):
    d = InjectDialog(control)
    qtbot.addWidget(d)
    d.prompt.setPlainText("   \n ")
    d.accept()
    assert d.result() != QDialog.Accepted
    assert "prompt is empty" in d.message.text()
    assert control.calls == []


def test_max_tokens_below_one_is_rejected(qtbot, control):
    d = InjectDialog(control)
    qtbot.addWidget(d)
    d.prompt.setPlainText("Hello")
    d.max_tokens.setValue(0)
    d.accept()
    assert d.result() != QDialog.Accepted and "max_tokens" in d.message.text()
    assert control.calls == []


def test_accept_calls_add_request_with_the_values(qtbot, control):
    d = InjectDialog(control)
    qtbot.addWidget(d)
    d.prompt.setPlainText("Explain paged attention")
    d.max_tokens.setValue(5)
    d.temperature.setValue(0.7)
    d.top_p.setValue(0.9)
    d.use_seed.setChecked(True)
    d.seed.setValue(42)
    d.accept()
    assert d.result() == QDialog.Accepted
    assert control.calls == [("add_request", "Explain paged attention", 5, 0.7, 0.9, 42)]
    assert d.request_id == "req-6"


def test_seed_is_optional(qtbot, control):
    d = InjectDialog(control)
    qtbot.addWidget(d)
    d.prompt.setPlainText("hi")
    d.accept()
    assert control.calls[-1][-1] is None


def test_engine_refusal_keeps_the_dialog_open(qtbot, control, monkeypatch):
    def refuse(**kwargs):
        raise ValueError("prompt longer than max_model_len (2048)")

    monkeypatch.setattr(control, "add_request", refuse)
    d = InjectDialog(control)
    qtbot.addWidget(d)
    d.prompt.setPlainText("x")
    d.accept()
    assert d.result() != QDialog.Accepted and "max_model_len" in d.message.text()


def test_inject_from_the_window_while_paused_selects_the_new_request(window, control, source):
    control.pause()

    def fill_and_accept():
        d = window.findChild(InjectDialog)
        d.prompt.setPlainText("one more request")
        d.max_tokens.setValue(3)
        d.accept()

    QTimer.singleShot(0, fill_and_accept)
    window.actions["inject"].trigger()
    assert control.calls[-1][:3] == ("add_request", "one more request", 3)
    assert window.selected == "req-6"
    window.transport.step()                        # the request arrives with the next step
    window.refresh()
    assert window.state.requests["req-6"].status in ("WAITING", "RUNNING")
    assert "req-6" in window.inspector.header.text()
