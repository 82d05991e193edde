"""Inject dialog validation and the control calls it makes; Engine > Inject from the window."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QDialog

from ui.dialogs.inject import InjectDialog


@pytest.fixture
def dialog(qtbot, control):
    d = InjectDialog(control)
    qtbot.addWidget(d)
    return d


def submit(d: InjectDialog, prompt: str, max_tokens: int = 16) -> bool:
    """Fill the prompt and max_tokens, press OK; True if the dialog accepted."""
    d.prompt.setPlainText(prompt)
    d.max_tokens.setValue(max_tokens)
    d.accept()
    return d.result() == QDialog.Accepted


def test_empty_prompt_is_rejected_with_a_clear_message(dialog, control):
    assert not submit(dialog, "   \n ")
    assert "prompt is empty" in dialog.message.text()
    assert control.calls == []


def test_max_tokens_below_one_is_rejected(dialog, control):
    assert not submit(dialog, "Hello", max_tokens=0)
    assert "max_tokens" in dialog.message.text() and control.calls == []


def test_accept_calls_add_request_with_the_values(dialog, control):
    dialog.temperature.setValue(0.7)
    dialog.top_p.setValue(0.9)
    dialog.use_seed.setChecked(True)
    dialog.seed.setValue(42)
    assert submit(dialog, "Explain paged attention", max_tokens=5)
    assert control.calls == [("add_request", "Explain paged attention", 5, 0.7, 0.9, 42, {})]
    assert dialog.request_id == "req-6"


def test_seed_is_optional(dialog, control):
    assert submit(dialog, "hi")
    assert control.calls[-1][5] is None


def test_engine_refusal_keeps_the_dialog_open(dialog, control, monkeypatch):
    def refuse(**kwargs):
        raise ValueError("prompt longer than max_model_len (2048)")

    monkeypatch.setattr(control, "add_request", refuse)
    assert not submit(dialog, "x")
    assert "max_model_len" in dialog.message.text()


def test_inject_from_the_window_while_paused_selects_the_new_request(window, control, source):
    control.pause()

    def fill_and_accept():
        submit(window.findChild(InjectDialog), "one more request", max_tokens=3)

    QTimer.singleShot(0, fill_and_accept)
    window.actions["inject"].trigger()
    assert control.calls[-1][:3] == ("add_request", "one more request", 3)
    assert window.selected == "req-6"
    window.transport.step()                        # the request arrives with the next step
    window.refresh()
    assert window.state.requests["req-6"].status in ("WAITING", "RUNNING")
    assert "req-6" in window.inspector.header.text()
