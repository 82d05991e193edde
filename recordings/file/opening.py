"""Open a recording read-only, turning every way a file can be wrong into a RecordingError.

Checks, in order: the file exists and is an SQLite file (header magic), it is not truncated (the
header's page count fits the file when no WAL is pending), it is a BatchScope recording
(``application_id``) of a schema version this code reads, and its tables answer.

Files users open come from others: nothing in one may run code. Connections are read-only
(``mode=ro``) with ``PRAGMA trusted_schema = OFF`` (a view, trigger, index or default in the file
may then call no function that is not marked innocuous, nor use virtual tables: see
https://www.sqlite.org/pragma.html#pragma_trusted_schema), ``cell_size_check`` on (a damaged page
is an error, not a wild read), extension loading off, and SQLite's defensive mode where Python
exposes it (``Connection.setconfig``, Python 3.12+). Triggers never fire: nothing is written.

A file in WAL mode with no ``-wal`` file beside it (a copy of a crashed or still-running
recording made without its ``-wal``) is opened ``immutable`` (no writer can be using it, and
SQLite then creates no ``-wal`` / ``-shm`` files next to it): it holds the steps up to the last
checkpoint, and :func:`missing_wal` says so.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import sqlite_utils

from recordings.errors import RecordingError
from recordings.file.schema import APPLICATION_ID, VIEWS, check_version, latest_version, migrate

_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100
NOTHING_READS = "so no step, request or setting can be read"   # in the error for a file without page 1


def missing_wal(path: Path) -> bool:
    """Whether the SQLite file at ``path`` is in WAL mode (header bytes 18-19 == 2) with no
    ``-wal`` file beside it: the rows committed after its last checkpoint are not in it."""
    try:
        with Path(path).open("rb") as f:
            header = f.read(_HEADER_SIZE)
    except OSError:
        return False
    return (header.startswith(_MAGIC) and len(header) == _HEADER_SIZE and header[18] == 2
            and header[19] == 2 and not Path(f"{path}-wal").exists())


def connect_readonly(path: Path, damaged: bool = False) -> sqlite3.Connection:
    """A hardened read-only connection to the SQLite file at ``path`` (see the module doc): usable
    from any thread, one at a time. ``damaged``: for reading what is left of a truncated file,
    SQLite's ``writable_schema`` is on (it then takes the page count from the file's size instead
    of refusing the file; nothing can be written through a ``mode=ro`` connection) and
    defensive mode, which forbids that pragma, is left off. Raises ``sqlite3.Error`` if SQLite
    cannot open it."""
    uri = path.resolve().as_uri() + "?mode=ro" + ("&immutable=1" if missing_wal(path) else "")
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA trusted_schema = OFF")
        conn.execute("PRAGMA cell_size_check = ON")
        if hasattr(conn, "enable_load_extension"):   # absent when Python was built without it
            conn.enable_load_extension(False)
        if damaged:
            conn.execute("PRAGMA writable_schema = ON")
        elif hasattr(conn, "setconfig") and hasattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE"):
            conn.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)   # Python 3.12+
    except BaseException:
        conn.close()
        raise
    return conn


def check_sqlite_file(path: Path, damaged: bool = False) -> None:
    """Raise :class:`RecordingError` unless ``path`` looks like a whole SQLite database file
    (``damaged``: an SQLite file, whole or not, as long as its first page, the schema, is
    there)."""
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
    wal = Path(f"{path}-wal")
    wal_pending = wal.exists() and wal.stat().st_size > 0
    if size < page_size and not wal_pending:   # no page 1, which holds the schema: nothing reads
        raise RecordingError(
            f"{path}: truncated recording: its first page, which holds the list of tables, is cut "
            f"short, {NOTHING_READS} ({size} bytes, the header expects pages of {page_size} bytes)")
    if damaged:
        return
    num_pages = int.from_bytes(header[28:32], "big")
    if not wal_pending and page_size and (size % page_size or size < num_pages * page_size):
        raise RecordingError(
            f"{path}: truncated or corrupt recording ({size} bytes, the header expects "
            f"{num_pages} pages of {page_size} bytes)")


_TABLES = {1: ("runs", "requests", "steps", "step_requests", "events", "tokens", "request_states",
               "keyframes"),
           2: ("runs", "requests", "steps", "events", "block_events", "transitions", "keyframes")}


def file_version(path: Path, damaged: bool = False) -> int:
    """The schema version of the recording at ``path`` (0 when it cannot tell; opening it then
    raises the precise :class:`RecordingError`); ``damaged`` as in :func:`open_readonly`."""
    try:
        check_sqlite_file(path, damaged)
        conn = connect_readonly(path, damaged)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except (RecordingError, OSError, sqlite3.Error):
        return 0


def open_readonly(path: str | os.PathLike, version: int | None = None,
                  damaged: bool = False) -> sqlite3.Connection:
    """A read-only connection (usable from any thread, one at a time) to the recording at
    ``path``, which must be of schema ``version`` (default: the latest). ``damaged``: open what
    is left of a damaged file (``recordings.damage.report``): a truncated file is read up to its end and
    the tables are not touched here, so only the rows a query reaches can fail. Raises
    :class:`RecordingError` naming the file and the problem."""
    path = Path(path)
    check_sqlite_file(path, damaged)
    try:
        conn = connect_readonly(path, damaged)
    except sqlite3.Error as exc:
        raise RecordingError(f"{path}: cannot open: {exc}") from exc
    try:
        _check_recording(conn, path, latest_version() if version is None else version, damaged)
        if (version or latest_version()) in (2, 3):    # schema 4 has no views
            _trusted_views(conn)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        conn.close()
        raise RecordingError(f"{path}: corrupt or unreadable recording: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _trusted_views(conn: sqlite3.Connection) -> None:
    """Shadow the file's views with TEMP views of our own definitions (``schema.VIEWS``): SQL
    on ``tokens`` / ``step_requests`` then never runs what the file stores as their definition."""
    for name, select in VIEWS.items():
        conn.execute(f"CREATE TEMP VIEW {name} AS {select}")


def _check_recording(conn: sqlite3.Connection, path: Path, expected: int, damaged: bool = False) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        empty = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
        if empty and missing_wal(path):
            raise RecordingError(
                f"{path}: holds no steps: it is the main file of a recording in WAL mode whose "
                f"rows are all in its write-ahead log, {path.name}-wal, which is missing (a copy "
                "of a run that was still being written or crashed before its first checkpoint); "
                "copy the -wal file next to it and open it again")
        raise RecordingError(f"{path}: an SQLite database but not a BatchScope recording")
    check_version(version, path)
    if version != expected:
        raise RecordingError(
            f"{path}: recording schema version {version}, expected {expected}")
    # touch every table once, so a damaged file fails here rather than mid-replay
    for table in () if damaged else _TABLES[min(version, max(_TABLES))]:  # later migrations only add tables
        conn.execute(f"SELECT * FROM {table} ORDER BY 1 DESC LIMIT 1").fetchall()  # key order
    if conn.execute("SELECT count(*) FROM runs").fetchone()[0] != 1:
        raise RecordingError(f"{path}: the recording has no run row (incomplete file)")


def upgrade_file(path: str | Path) -> int:
    """Bring the recording at ``path`` to the latest schema in place; returns its new version.

    Raises :class:`RecordingError` if it is not a BatchScope recording or is newer than the code.
    """
    check_sqlite_file(Path(path))
    db = sqlite_utils.Database(str(path), execute_plugins=False)
    try:
        return migrate(db, path)
    except sqlite3.DatabaseError as exc:
        raise RecordingError(f"{path}: corrupt or unreadable recording: {exc}") from exc
    finally:
        db.close()
