"""Fault injection for the app tests: the recording's disk fills up at a given step."""
from __future__ import annotations

from recordings.file import codec


def fill_disk_at(monkeypatch, step: int) -> None:
    """Make the writer thread fail with ENOSPC when it encodes ``step`` (as SQLite would on a
    full disk); steps before it are written normally."""
    real = codec.step_rows

    def failing(record, *args):
        if record.step == step:
            raise OSError(28, "No space left on device")
        return real(record, *args)

    monkeypatch.setattr(codec, "step_rows", failing)
