"""Save a screenshot of the compare window on two or more recordings of one workload.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/support/screenshot_compare.py OUT.png A.sqlite B.sqlite [--at 0.5] [--by step]

``--at``: the position, as a fraction of the run (default 0.4); ``--names static,fcfs``.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]


def grab(out: str, paths: list[str], at: float = 0.4, by: str = "time", select: str | None = None,
         names: list[str] | None = None) -> None:
    from PySide6.QtWidgets import QApplication


    from recordings.file.open_reader import open_reader
    from tests.support.screenshot import save_grab
    from recordings.compare.comparison import compare_recordings
    from ui.compare.window import CompareWindow

    app = QApplication.instance() or QApplication([])
    c = compare_recordings(paths, names)
    w = CompareWindow([open_reader(p) for p in paths], [h.name for h in c.headlines], c, by=by)
    w.show()
    w.seek(int(at * w.sync.last_tick))
    w.select_request(select)
    save_grab(app, w, out)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("recordings", nargs="+")
    p.add_argument("--at", type=float, default=0.4)
    p.add_argument("--by", default="time")
    p.add_argument("--select")
    p.add_argument("--names", help="run names, comma-separated (default: from the file names)")
    a = p.parse_args()
    grab(a.out, a.recordings, a.at, a.by, a.select, a.names.split(",") if a.names else None)
