"""Starting the window: live on the engine (``demo``) or on a recording (``replay``)."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path


def default_recording_path() -> Path:
    """A new file under ``$BATCHSCOPE_CACHE/runs`` (default ``~/.cache/batchscope/runs``)."""
    root = Path(os.environ.get("BATCHSCOPE_CACHE", Path.home() / ".cache" / "batchscope")) / "runs"
    root.mkdir(parents=True, exist_ok=True)
    return root / f"live-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.sqlite"


def make_live(args: argparse.Namespace):
    """The live source and the engine worker for ``batchscope demo`` (worker not yet started)."""
    from app.bridge import EngineWorker, empty_state
    from app.cli import engine_config
    from app.factory import build_engine
    from app.live_source import LiveSource
    from app.workload_setup import add_workload, load_workload
    from recordings import RecordingWriter

    config = engine_config(args)
    record = Path(args.record) if args.record else default_recording_path()
    source = LiveSource(empty_state(config.max_num_seqs))
    holder: dict = {}

    def build():
        built = build_engine(config, recorder_factory=None)
        wl = load_workload(args, built.tokenizer, built.vocab_size)
        built.run_info["trace"] = wl.trace_info
        built.run_info["recording"] = str(record)
        built.engine.recorder = RecordingWriter(record, built.run_info)
        holder["workload"] = wl
        return built

    def on_ready(built) -> None:
        add_workload(built.engine, holder["workload"].requests, clock=built.config.clock,
                     steps_per_second=args.steps_per_second)

    from app.cli import PROCESS_START
    worker = EngineWorker(build, source, on_ready=on_ready, start_paused=args.paused, started_at=PROCESS_START)
    return source, worker, record


def _quit_on_signals(app) -> None:
    """Ctrl+C / SIGTERM in the terminal close the window cleanly (so the recording is closed).
    Qt's event loop blocks Python's signal handlers; a short idle timer lets them run."""
    import signal

    from PySide6.QtCore import QTimer

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)
    timer.start(250)


def launch(args: argparse.Namespace, command: str) -> int:
    """Open the window. ``command`` is ``demo`` (live engine) or ``replay`` (a recording)."""
    from PySide6.QtWidgets import QApplication

    from recordings import Reader, RecordingError
    from ui import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("BatchScope")
    _quit_on_signals(app)
    if command == "replay":
        try:
            source = Reader(args.recording)
        except RecordingError as e:
            print(f"batchscope: {e}", file=sys.stderr)
            return 1
        win = MainWindow(source, None, open_recording=Reader, title=f"BatchScope — {args.recording}")
        win.show()
        return app.exec()
    source, worker, record = make_live(args)
    win = MainWindow(source, worker, open_recording=Reader, title=f"BatchScope — live ({record.name})")
    win.show()
    worker.start()
    try:
        return app.exec()
    finally:
        worker.stop()
        print(f"recording saved: {record}  (batchscope replay {record})", file=sys.stderr)
