"""The one QApplication of a BatchScope process, with Qt's known-harmless noise filtered.

Qt's offscreen and some Wayland/xcb plugins print "This plugin does not support
propagateSizeHints()" for every window shown: nothing is wrong and the user can do nothing about
it, so it is dropped. Every other Qt message goes on to the handler that was installed before
(pytest-qt's, for instance) or, with none, to stderr as Qt prints it.
"""
from __future__ import annotations

import sys
from typing import Sequence

HARMLESS = ("This plugin does not support propagateSizeHints()",)
_installed: list = []           # [previous handler] once the filter is installed


def filter_qt_message(mode, context, message: str) -> None:
    """The Qt message handler: drop :data:`HARMLESS` messages, pass the rest on."""
    if any(h in message for h in HARMLESS):
        return
    previous = _installed[0] if _installed else None
    if previous is not None:
        previous(mode, context, message)
    else:
        print(message, file=sys.stderr, flush=True)


def install_message_filter() -> None:
    """Install :func:`filter_qt_message` as Qt's message handler (once per process)."""
    if _installed:
        return
    from PySide6.QtCore import qInstallMessageHandler

    _installed.append(qInstallMessageHandler(filter_qt_message))


def qt_application(argv: Sequence[str] = ()):
    """The process's ``QApplication`` (created with ``argv`` if none exists yet), named
    BatchScope, with :func:`install_message_filter` in place."""
    from PySide6.QtWidgets import QApplication

    install_message_filter()
    app = QApplication.instance() or QApplication(list(argv))
    app.setApplicationName("BatchScope")
    return app
