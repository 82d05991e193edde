"""Regenerate docs/screenshot-live.png and docs/screenshot-replay.png from a real run.

    QT_QPA_PLATFORM=offscreen .venv/bin/python docs/take_screenshots.py [--seconds 25]

Starts the live demo (embedded SmolLM2, built-in Azure slice), grabs the window after --seconds,
then opens the run's recording in a replay window at its middle step and grabs that too.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--record", default="/tmp/batchscope-screenshot.sqlite")
    a = ap.parse_args()
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.cli import build_parser
    from app.commands.window import make_live
    from recordings.file.reader import Reader
    from recordings.file.open_reader import open_reader
    from ui import MainWindow

    for leftover in (a.record, f"{a.record}-wal", f"{a.record}-shm"):   # the last run's, sidecars too
        Path(leftover).unlink(missing_ok=True)
    args = build_parser().parse_args(["demo", "--record", a.record])
    app = QApplication.instance() or QApplication([])
    source, worker, record = make_live(args)
    win = MainWindow(source, worker, open_recording=Reader, title="BatchScope — live")
    win.resize(1600, 1000)
    win.show()
    worker.start()
    t0 = time.monotonic()
    first_token: list[float] = []

    def poll() -> None:
        if not first_token and any(r.num_output_tokens for r in source.latest_state().requests.values()):
            first_token.append(time.monotonic() - t0)
        if time.monotonic() - t0 >= a.seconds:
            running = source.latest_state().running
            if running:
                win.select_request(running[0].request_id)
            win.refresh(force=True)
            app.processEvents()
            win.grab().save(str(ROOT / "docs" / "screenshot-live.png"))
            app.quit()
    timer = QTimer()
    timer.timeout.connect(poll)
    timer.start(100)
    app.exec()
    worker.stop()
    print(f"first token after {first_token[0] if first_token else float('nan'):.1f} s "
          f"(window shown -> first generated token, model load included); steps: {source.latest_step() + 1}")
    reader = open_reader(record)
    rep = MainWindow(reader, None, title="BatchScope — replay")
    rep.resize(1600, 1000)
    rep.show()
    rep.show_step(reader.latest_step() // 2)
    mid = reader.state_at(reader.latest_step() // 2).running
    if mid:
        rep.select_request(mid[-1].request_id)
    app.processEvents()
    rep.refresh(force=True)
    app.processEvents()
    rep.grab().save(str(ROOT / "docs" / "screenshot-replay.png"))
    print("saved docs/screenshot-live.png and docs/screenshot-replay.png")


if __name__ == "__main__":
    main()
