"""BatchScope's Qt views (PySide6 + pyqtgraph). Views read a ``StepSource``; none builds an
engine or opens a recording. ``MainWindow(source, control=None, open_recording=None)``."""
from ui.qt_compat import guard_singletons

guard_singletons()          # before any widget exists: see ui/qt_compat.py

from ui.main_window import MainWindow  # noqa: E402

__all__ = ["MainWindow"]
