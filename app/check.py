"""``batchscope check REC`` (and ``replay --check-invariants``): a recording's invariants, step by step."""
from __future__ import annotations

import sys
from typing import TextIO


def check_lines(path: str, *, max_problems: int = 100) -> tuple[list[str], int]:
    """(one line per invariant violated, steps checked) for the recording at ``path``, per
    :func:`recordings.checks.check_recording`, with a progress bar on stderr. Raises
    :class:`recordings.RecordingError` if the file cannot be read and ``ValueError`` if
    ``max_problems`` < 1."""
    from tqdm import tqdm

    from recordings import Reader
    from recordings.checks import check_recording

    if max_problems < 1:
        raise ValueError(f"--max-problems must be >= 1, got {max_problems}")
    with Reader(path) as reader:
        num_steps = reader.latest_step() + 1
        with tqdm(total=num_steps, unit="step", desc="checking", dynamic_ncols=True, leave=False,
                  mininterval=0.5) as bar:
            problems = check_recording(reader, max_problems=max_problems, on_step=lambda _: bar.update())
        return [str(p) for p in problems], num_steps


def run_check(path: str, *, max_problems: int = 100, out: TextIO | None = None) -> int:
    """Print each problem of the recording at ``path`` (to ``out``, default stdout), or one line
    saying it is clean. Returns the exit code: 0 clean, 1 problems found or the file unreadable."""
    from recordings import RecordingError

    out = out or sys.stdout
    try:
        lines, num_steps = check_lines(path, max_problems=max_problems)
    except (RecordingError, ValueError) as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(f"{path}: {line}", file=out)
    if not lines:
        print(f"{path}: {num_steps} steps checked: no invariant violated (G1 blocks, G3 queues, "
              f"G4 limits, G6 drain)", file=out)
    return 1 if lines else 0


def warn_before_replay(path: str) -> None:
    """``replay --check-invariants``: print the problems (or that there are none) to stderr before
    the window opens; an unreadable file is left to the window's own error message."""
    from recordings import RecordingError

    try:
        lines, num_steps = check_lines(path)
    except RecordingError:
        return
    for line in lines or [f"{num_steps} steps checked: no invariant violated"]:
        print(f"batchscope: {path}: {line}", file=sys.stderr)
