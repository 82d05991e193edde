"""Opening a recording for replay: the reader that fits its schema version."""
from __future__ import annotations

import os
from pathlib import Path

from recordings.file.opening import file_version
from recordings.file.reader import Reader
from recordings.file.v1_reader import V1Reader


def open_reader(path: str | os.PathLike, cache_size: int = 8, *, damaged: bool = False) -> Reader:
    """A :class:`Reader` of the recording at ``path``: a :class:`V1Reader` for a schema-1 file
    (BatchScope before schema 2), else the reader of the current schema.

    ``cache_size`` and ``damaged`` are :class:`Reader`'s. Raises
    :class:`recordings.errors.RecordingError` if the file is missing, not a BatchScope recording,
    of an unsupported schema version, truncated or corrupt.
    """
    if file_version(Path(path), damaged) == 1:
        return V1Reader(path, cache_size, damaged=damaged)
    return Reader(path, cache_size, damaged=damaged)
