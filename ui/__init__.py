"""BatchScope's Qt views (PySide6 + pyqtgraph). Views read a ``StepSource``; none builds an
engine or opens a recording. ``MainWindow(source, control=None, open_recording=None)``."""
from ui.main_window import MainWindow

__all__ = ["MainWindow"]
