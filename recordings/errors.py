"""The one exception type of the recordings package."""
from __future__ import annotations


class RecordingError(Exception):
    """A recording cannot be written or read.

    The message names the file and the problem (not SQLite, not a BatchScope recording, newer
    schema, truncated or corrupt, writer thread failed...). The original exception, if any, is
    chained as ``__cause__``.
    """
