"""``batchscope check REC`` (and ``replay --check-invariants``): a recording verified end to end
(:func:`recordings.check.file_check.check_file`: SQLite integrity, schema, rows, invariants replayed
step by step, metrics recomputed, cut short or not), one line per problem."""
from __future__ import annotations

import sys
from typing import TextIO

from engine.plural import plural


def check_lines(path: str, *, max_problems: int = 100, quick: bool = False) -> tuple[list[str], int]:
    """(one line per problem, steps checked) for the recording at ``path``, per
    :func:`recordings.check.file_check.check_file` (``quick``: ``--quick``, a sample of the steps,
    :mod:`recordings.check.sampled`), with a progress bar on stderr. Raises
    :class:`recordings.errors.RecordingError` if the file cannot be read and ``ValueError`` if
    ``max_problems`` < 1."""
    from tqdm import tqdm


    from recordings.file.open_reader import open_reader
    from recordings.check.file_check import check_file
    from recordings.check.sampled import QUICK_EVERY

    if max_problems < 1:
        raise ValueError(f"--max-problems must be >= 1, got {max_problems}")
    with open_reader(path) as reader:
        num_steps = reader.latest_step() + 1
        with tqdm(disable=None, total=num_steps, unit="step", desc="checking", dynamic_ncols=True, leave=False,
                  mininterval=0.5) as bar:
            problems = check_file(reader, max_problems=max_problems, on_step=lambda _: bar.update(),
                                  quick_every=QUICK_EVERY if quick else None)
        return [str(p) for p in problems], num_steps


def run_check(path: str, *, max_problems: int = 100, out: TextIO | None = None, quick: bool = False) -> int:
    """Print each problem of the recording at ``path`` (to ``out``, default stdout), or one line
    saying it is clean; with ``quick`` (``--quick``) first a line saying which steps the
    invariants were checked on and which were skipped. Returns the exit code: 0 clean, 1 problems
    found or the file unreadable."""
    from recordings.errors import RecordingError
    from recordings.safe_text import visible

    from app.commands.recover import print_damage
    from recordings.damage.sqlite_damage import open_error_is_damage

    out = out or sys.stdout
    try:
        lines, num_steps = check_lines(path, max_problems=max_problems, quick=quick)
        if quick:
            print(visible(f"{path}: {sample_line(path, num_steps)}"), file=out)
    except (RecordingError, ValueError) as e:
        print(f"batchscope: {visible(e)}", file=sys.stderr)
        if isinstance(e, RecordingError) and open_error_is_damage(e):
            print_damage(path, out)       # what still reads, and the command that saves it
        return 1
    for line in lines:      # recorded ids and messages: no terminal escapes, no RTL tricks
        print(visible(f"{path}: {line}", keep_newlines=False), file=out)
    if any(": integrity: " in line or ": record: " in line for line in lines):   # damage
        print_damage(path, out)
    if not lines:
        what = "quick: clean in what was checked" if quick else f"{plural(num_steps, 'step')} checked: clean"
        print(f"{visible(path)}: {what}: SQLite integrity, schema, every "
              f"step's rows, no invariant violated (G1 blocks, G3 queues, G4 limits, G6 drain), "
              f"metrics recomputed equal the stored outcomes, closed by its writer", file=out)
        for line in _stopped_early(path):      # an intact file of a run stopped early: said, not a problem
            print(visible(f"{path}: {line}", keep_newlines=False), file=out)
    return 1 if lines else 0


def sample_line(path: str, num_steps: int) -> str:
    """What ``check --quick`` checked of the recording at ``path`` and what it skipped."""
    from recordings.file.open_reader import open_reader
    from recordings.check.sampled import QUICK_EVERY, sampled_intervals

    with open_reader(path) as reader:
        intervals = sampled_intervals(reader, QUICK_EVERY)
    checked = sum(b - a for a, b in intervals)
    shown = ", ".join(f"{a + 1}..{b}" for a, b in intervals[:6]) + (", ..." if len(intervals) > 6 else "")
    return (f"quick: invariants (G1-G4, G6) checked on {checked:,} of {num_steps:,} steps: one "
            f"keyframe interval in {QUICK_EVERY} and the last ({shown}), each replayed from its keyframe; "
            f"the other {num_steps - checked:,} steps skipped (a violation inside them alone is not "
            "found); whole file: SQLite quick_check (pages, not index contents), schema, every step's "
            "rows, metrics recomputed, cut short or not")


def _stopped_early(path: str) -> list[str]:
    """The INCOMPLETE lines of a recording closed by its writer before every request finished
    (``recordings.file.completeness``); none for a whole run."""
    from recordings.file.open_reader import open_reader
    from recordings.file.completeness import completeness

    with open_reader(path) as reader:
        return completeness(reader).format_lines()


def warn_before_replay(path: str) -> None:
    """``replay --check-invariants``: print the problems (or that there are none) to stderr before
    the window opens; an unreadable file is left to the window's own error message."""
    from recordings.errors import RecordingError
    from recordings.safe_text import visible

    try:
        lines, num_steps = check_lines(path)
    except RecordingError:
        return
    for line in lines or [f"{plural(num_steps, 'step')} checked: clean, no invariant violated"]:
        print(visible(f"batchscope: {path}: {line}", keep_newlines=False), file=sys.stderr)
