"""Starting the window: live on the engine (``demo``) or on a recording (``replay``)."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from app.commands.suggest import replay_command


def default_recording_path() -> Path:
    """A new file under ``runs/`` of BatchScope's cache folder (the model cache's root:
    ``$BATCHSCOPE_CACHE``, else ``$XDG_CACHE_HOME/batchscope``, else ``~/.cache/batchscope``)."""
    from engine.model.gguf_convert import cache_root

    root = cache_root() / "runs"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:              # app.usage.check_output says so, as for any output path
        pass
    return root / f"live-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.sqlite"


def make_live(args: argparse.Namespace):
    """The live source and the engine worker for ``batchscope demo`` (worker not yet started)."""
    from app.live.bridge import EngineWorker, empty_state
    from app.args import engine_config
    from app.factory import build_engine
    from app.live.source import LiveSource
    from app.workload_setup import add_workload, check_args, load_workload, read_trace
    from app.privacy import writer_privacy_kwargs
    from app.usage import RECORD_EXISTS, check_output
    from recordings.file.writer import RecordingWriter

    config = engine_config(args)
    check_args(args)
    trace = read_trace(args)
    record = Path(args.record) if args.record else default_recording_path()
    if not args.record:          # app.usage checked a --record path with the command line
        check_output(record, RECORD_EXISTS, make_folder=True, recording=True)
    from recordings.file.reader import Reader
    source = LiveSource(empty_state(config.max_num_seqs), open_reader=Reader)
    holder: dict = {}

    def build():
        built = build_engine(config, recorder_factory=None)
        wl = load_workload(args, trace, built.tokenizer, built.vocab_size)
        built.run_info = built.run_info.replace(trace=wl.trace_info, recording=str(record))
        built.engine.recorder = RecordingWriter(record, built.run_info, **writer_privacy_kwargs(args))
        holder["workload"] = wl
        return built

    def on_ready(built) -> None:
        add_workload(built.engine, holder["workload"].requests, clock=built.config.clock,
                     steps_per_second=args.steps_per_second)

    from app import PROCESS_START
    worker = EngineWorker(build, source, on_ready=on_ready, start_paused=args.paused, started_at=PROCESS_START,
                          threads=getattr(args, "thread_governor", None))
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


def _has_display() -> bool:
    """False on a Linux machine with neither a display nor an explicit Qt platform plugin, where Qt
    would abort the process."""
    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def check_window_libraries() -> int:
    """0 when Qt can open its window here; else prints why to stderr and returns 1: no display,
    or system libraries that Qt's xcb plugin needs are missing (with one install command for all
    of them, see ``app.qt_libs``), where Qt itself would abort the process naming only one."""
    from app.qt_libs import check_qt_libraries

    if not _has_display():
        print("batchscope: no display found (DISPLAY/WAYLAND_DISPLAY unset): run it on a desktop, under "
              "Xvfb, or headless with QT_QPA_PLATFORM=offscreen; `batchscope run` needs no window",
              file=sys.stderr)
        return 1
    problem = check_qt_libraries()
    if problem:
        print(f"batchscope: {problem}", file=sys.stderr)
        return 1
    return 0


def warn_if_incomplete(reader) -> None:
    """Say on stderr when a recording about to be replayed holds a run cut short (killed, or
    stopped before every request finished), with its unfinished requests
    (``recordings.file.completeness``)."""
    from recordings.file.completeness import completeness

    for line in completeness(reader).format_lines():
        print(f"batchscope: {line}", file=sys.stderr)


def stop_worker(worker, patience_s: float = 2.0) -> None:
    """Stop the engine thread (``app.live.bridge.EngineWorker``) and wait until it has ended, saying so
    after ``patience_s`` seconds. A forward pass cannot be interrupted, and leaving the interpreter
    while the thread is inside one aborts the process (exit status 134: Python ends the thread in
    torch's C++ frames, which then call std::terminate), with the recording left unclosed."""
    worker.stop(timeout=patience_s)
    if worker.is_alive():
        print("batchscope: waiting for the engine's current step to finish, then the recording is "
              "closed…", file=sys.stderr, flush=True)
        worker.join()


def start_replay(win, args: argparse.Namespace) -> bool:
    """Apply ``replay``'s ``--speed``, ``--at`` and ``--play`` to the window ``win``; False (and
    the reason on stderr) when ``--at`` names no step of the recording."""
    from ui.transport import SPEEDS

    speed = getattr(args, "speed", "10")
    win.transport.speed.setCurrentIndex(SPEEDS.index("max" if speed == "every" else int(speed)))
    if getattr(args, "at", None) and not win.jump_to(args.at):
        print(f"batchscope: --at {args.at}: {win.statusBar().currentMessage()}", file=sys.stderr)
        return False
    if getattr(args, "play", False):
        win.transport.play_btn.click()
    return True


def freeze_startup() -> None:
    """Keep what start-up made (Qt wrappers, pyqtgraph, the reader's tables: ~90k objects) out
    of the cyclic collector's full passes (``app.long_lived.freeze_long_lived``, as the live
    engine worker does once its model is loaded): a full collection during a replay's scrub then
    walks only what was made since, not ~45 ms of start-up objects in one frame, and runs
    rarely (see that module for the threshold and why)."""
    from app.long_lived import freeze_long_lived

    freeze_long_lived()


def launch(args: argparse.Namespace, command: str) -> int:
    """Open the window. ``command`` is ``demo`` (live engine) or ``replay`` (a recording).
    Inputs are checked before Qt starts; returns 2 with a one-line message when they are bad (a
    flag, a malformed trace), 1 when the recording cannot be opened or Qt cannot start here."""
    from app.commands.recover import open_recording
    from recordings.errors import RecordingError

    try:
        if command == "replay":
            source = open_recording(args.recording)
            if source.damage is not None:          # what reads is replayed; the banner says why
                print(f"batchscope: {source.damage.summary()}", file=sys.stderr)
            else:
                warn_if_incomplete(source)
        else:
            source, worker, record = make_live(args)
    except (RecordingError, OSError) as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 1
    except ValueError as e:                       # ConfigError, TraceFormatError, a workload flag
        print(f"batchscope: {e}", file=sys.stderr)
        return 2
    if check_window_libraries():
        return 1
    from ui import MainWindow
    from ui.qt_app import qt_application

    app = qt_application(sys.argv[:1])
    _quit_on_signals(app)
    if command == "replay":
        win = MainWindow(source, None, open_recording=open_recording, title=f"BatchScope — {args.recording}")
        if not start_replay(win, args):
            return 2
        win.show()
        freeze_startup()
        return app.exec()
    win = MainWindow(source, worker, open_recording=open_recording, title=f"BatchScope — live ({record.name})")
    win.show()
    worker.start()
    try:
        return app.exec()
    finally:
        stop_worker(worker)
        if record.exists():
            print(f"recording saved: {record}  ({replay_command(record)})", file=sys.stderr)
