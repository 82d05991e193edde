"""Damaged recordings on the command line: ``batchscope recover DAMAGED OUT`` copies what is
readable into a new valid recording (``recordings.damage.salvage``), and ``batchscope check`` on a
damaged file prints what is readable and lost (``recordings.damage.report``) with that command."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from app.commands.suggest import replay_command

PHASES = {"scan": "finding what is readable", "copy": "copying", "verify": "checking the copy"}


RECOVER_HELP = ("copy what is still readable of a damaged recording (a corrupted page, a truncated or "
                "half-copied file) into a new valid recording: the run's settings, the steps from 0 up "
                "to the last one that replays, their requests and keyframes; says what was dropped. The "
                "damaged file is only read. `batchscope check DAMAGED` says first what is readable.")


def add_recover_parser(sub) -> None:
    """``batchscope recover DAMAGED OUT``: salvage a damaged recording."""
    rec = sub.add_parser("recover", help=RECOVER_HELP, description=RECOVER_HELP)
    rec.add_argument("recording", help="the damaged recording (.sqlite)")
    rec.add_argument("output", help="the new recording to write (.sqlite; must not exist)")


def check_recover_usage(args) -> None:
    """Raise ``app.usage.UsageError`` (exit 2) when the damaged file is missing, or the output
    exists (the damaged file itself included) or cannot be written (``app.usage.check_output``)."""
    from app.usage import UsageError, check_output

    src, out = Path(args.recording), Path(args.output)
    if not src.is_file():
        raise UsageError(f"recording file not found: {src}" if not src.exists() else f"recording {src} is not a file")
    check_output(out, "; name a new file for the salvaged recording (nothing is overwritten)",
                 recording=True)


def damage_report(path: str, desc: str = "finding what is readable"):
    """The file's one damage analysis (``recordings.damage.analysis.damage_analysis``: scanned
    once per version of the file, then cached) with a progress bar on stderr while it scans."""
    from tqdm import tqdm

    from recordings.damage.analysis import damage_analysis

    with tqdm(disable=None, unit="step", desc=desc, dynamic_ncols=True, leave=False, mininterval=0.5) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
        return damage_analysis(path, progress)


def print_damage(path: str, out: TextIO | None = None) -> bool:
    """Print what is readable and damaged in the recording at ``path`` and the salvage command;
    False when the file is not a recording at all (the reason is printed to stderr)."""
    from recordings.errors import RecordingError
    from recordings.safe_text import visible

    out = out or sys.stdout
    try:
        report = damage_report(path)
    except RecordingError as e:
        print(f"batchscope: {visible(e)}", file=sys.stderr)
        return False
    if not report.is_damaged:
        return True
    print(visible(f"{path}: the file is damaged; what still reads:"), file=out)
    for line in report.lines():
        print(visible(f"  {line}", keep_newlines=False), file=out)
    print(visible(f"  {report.suggestion()}", keep_newlines=False), file=out)
    return True


def run_recover(args, out: TextIO | None = None) -> int:
    """``batchscope recover``: 0 when the readable part was copied, 1 when nothing could be."""
    from tqdm import tqdm

    from recordings.errors import RecordingError
    from recordings.safe_text import visible
    from recordings.damage.salvage import salvage

    out = out or sys.stdout
    bars: dict[str, tqdm] = {}

    def progress(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = tqdm(disable=None, total=total, unit="step", dynamic_ncols=True, leave=False,
                                     mininterval=0.5, desc=PHASES[phase])
        bar.total = total
        bar.update(done - bar.n)
    try:
        report = damage_report(args.recording)     # the same analysis check and the window show
        result = salvage(args.recording, args.output, report=report, on_progress=progress)
    except RecordingError as e:
        print(f"batchscope: {visible(e)}", file=sys.stderr)
        return 1
    finally:
        for bar in bars.values():
            bar.close()
    print(visible(f"{args.output}: salvaged from {args.recording}"), file=out)
    for line in result.report.lines() + result.lines():
        print(visible(f"  {line}", keep_newlines=False), file=out)
    print(visible(f"  open it with: {replay_command(args.output)}"), file=out)
    return 0


def open_recording(path: str, *, progress: bool = True):
    """The window's way to open a recording (``batchscope replay`` and File > Open): a
    ``recordings.file.reader.Reader``; a damaged file that the reader refuses (a corrupted page it touches
    at open, a truncated file), or whose damage the file's one analysis finds
    (``recordings.damage.analysis``: run here for a closed file unless known; a scan of every
    row, ~1 s per 7 MB here), opens serving its readable steps
    (:meth:`recordings.file.reader.Reader.keep_readable`, the report kept as ``reader.damage``, with a
    progress bar on stderr while it is made). Raises ``recordings.errors.RecordingError`` for a file that is no recording, or
    when not even step 0 reads (the message then has the report)."""
    from recordings.file.open_reader import open_reader
    from recordings.errors import RecordingError
    from recordings.damage.analysis import damage_analysis, known_damage
    from recordings.damage.sqlite_damage import open_error_is_damage

    try:
        reader = open_reader(path)
    except RecordingError as e:
        if not open_error_is_damage(e):
            raise
        error = e
    else:                 # damage mid-file opens: the analysis first, so no step past it shows
        known = known_damage(path)
        if known is None and reader.is_complete():      # a file still being written: not yet
            try:
                known = damage_report(path) if progress else damage_analysis(path)
            except RecordingError:
                known = None
        if known is not None and known.is_damaged and known.last_good_step >= 0:
            reader.keep_readable(known)
        return reader
    report = damage_report(path) if progress else damage_analysis(path)
    if report.last_good_step < 0:
        raise RecordingError(f"{error}\n" + "\n".join(report.lines() + [report.suggestion()])) from error
    reader = open_reader(path, damaged=True)
    reader.keep_readable(report)
    return reader

