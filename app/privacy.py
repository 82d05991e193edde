"""``--record-mode`` and ``--no-text``: who can read a recording, and whether it holds any text.

Recordings of production traffic carry prompts and generated text. By default a recording (and
SQLite's ``-wal`` / ``-shm`` files beside it) is readable by its owner only (mode ``0600``);
``--record-mode 0640`` (octal permission bits; the umask can only narrow them) shares it.
``--no-text`` stores token ids and lengths only: no prompt text, no generated text, no stop
strings (``recordings.file.writer.RecordingWriter(store_text=False)``). Files written from a recording (its
exports) are readable by no one the recording is not readable by (:func:`no_wider_than`).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import stat
from typing import Any, Iterator


def file_mode(text: str) -> int:
    """Octal permission bits (``0600``, ``640``, ``0o644``) -> int; ``argparse.ArgumentTypeError``
    (a usage error, exit 2) for anything else or a value outside 0..0777."""
    try:
        mode = int(text.removeprefix("0o"), 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not octal permission bits such as 0600") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"{text!r} is outside the permission bits 0000..0777")
    return mode


def add_recording_privacy_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--record-mode`` and ``--no-text`` to a command that records (``run``, ``demo``)."""
    parser.add_argument("--record-mode", type=file_mode, default=0o600, metavar="OCTAL",
                        help="permission bits of the recording and its -wal/-shm files "
                             "(default: 0600, owner only: recordings hold prompts)")
    parser.add_argument("--no-text", action="store_true",
                        help="store no text in the recording (no prompt, output or stop strings): "
                             "token ids and lengths only")


def writer_privacy_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RecordingWriter`` keyword arguments of the two flags (defaults when absent)."""
    return {"file_mode": getattr(args, "record_mode", 0o600),
            "store_text": not getattr(args, "no_text", False)}


@contextlib.contextmanager
def no_wider_than(path: str | os.PathLike) -> Iterator[None]:
    """While inside, files this process creates get no read/write bit that the file at ``path``
    lacks (the umask is narrowed to it; directories keep their search bits): an export of a
    0600 recording is 0600. Raises ``OSError`` if ``path`` cannot be stat'ed."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    old = os.umask(0o077)
    os.umask(old | (0o666 & ~mode))
    try:
        yield
    finally:
        os.umask(old)
