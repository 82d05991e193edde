"""Open a recording read-only, turning every way a file can be wrong into a RecordingError.

Checks, in order: the file exists and is an SQLite file (header magic), it is not truncated (the
header's page count fits the file when no WAL is pending), it is a BatchScope recording
(``application_id``) of a schema version this code reads, and its tables answer.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from recordings.errors import RecordingError
from recordings.schema import APPLICATION_ID, check_version, latest_version

_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100


def check_sqlite_file(path: Path) -> None:
    """Raise :class:`RecordingError` unless ``path`` looks like a whole SQLite database file."""
    if not path.exists():
        raise RecordingError(f"{path}: no such file")
    if not path.is_file():
        raise RecordingError(f"{path}: not a file")
    size = path.stat().st_size
    if size == 0:
        raise RecordingError(f"{path}: the file is empty, not a BatchScope recording")
    with path.open("rb") as f:
        header = f.read(_HEADER_SIZE)
    if not header.startswith(_MAGIC):
        raise RecordingError(f"{path}: not an SQLite database (so not a BatchScope recording)")
    if len(header) < _HEADER_SIZE:
        raise RecordingError(f"{path}: truncated SQLite file ({size} bytes)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    num_pages = int.from_bytes(header[28:32], "big")
    wal = Path(f"{path}-wal")
    wal_pending = wal.exists() and wal.stat().st_size > 0
    if not wal_pending and page_size and (size % page_size or size < num_pages * page_size):
        raise RecordingError(
            f"{path}: truncated or corrupt recording ({size} bytes, the header expects "
            f"{num_pages} pages of {page_size} bytes)")


_TABLES = {1: ("runs", "requests", "steps", "step_requests", "events", "tokens", "request_states",
               "keyframes"),
           2: ("runs", "requests", "steps", "events", "block_events", "transitions", "keyframes")}


def file_version(path: Path) -> int:
    """The schema version of the recording at ``path`` (0 when it cannot tell; opening it then
    raises the precise :class:`RecordingError`)."""
    try:
        check_sqlite_file(path)
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except (RecordingError, OSError, sqlite3.Error):
        return 0


def open_readonly(path: str | os.PathLike, version: int | None = None) -> sqlite3.Connection:
    """A read-only connection (usable from any thread, one at a time) to the recording at
    ``path``, which must be of schema ``version`` (default: the latest). Raises
    :class:`RecordingError` naming the file and the problem."""
    path = Path(path)
    check_sqlite_file(path)
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise RecordingError(f"{path}: cannot open: {exc}") from exc
    try:
        _check_recording(conn, path, latest_version() if version is None else version)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        conn.close()
        raise RecordingError(f"{path}: corrupt or unreadable recording: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _check_recording(conn: sqlite3.Connection, path: Path, expected: int) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        raise RecordingError(f"{path}: an SQLite database but not a BatchScope recording")
    check_version(version, path)
    if version != expected:
        raise RecordingError(
            f"{path}: recording schema version {version}, expected {expected}")
    # touch every table once, so a damaged file fails here rather than mid-replay
    for table in _TABLES[min(version, max(_TABLES))]:  # later migrations only add tables
        conn.execute(f"SELECT * FROM {table} ORDER BY 1 DESC LIMIT 1").fetchall()  # key order
    if conn.execute("SELECT count(*) FROM runs").fetchone()[0] != 1:
        raise RecordingError(f"{path}: the recording has no run row (incomplete file)")
