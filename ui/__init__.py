"""BatchScope's Qt views (PySide6 + pyqtgraph). Views read a ``StepSource`` and never build an engine."""
from ui.main_window import MainWindow

__all__ = ["MainWindow"]
