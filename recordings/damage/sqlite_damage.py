"""What SQLite itself says is damaged in a recording: a truncated file, and per table and
index whether its b-tree reads (used by :func:`recordings.damage.report.find_damage`).

Each table is scanned in its own b-tree order (``NOT INDEXED``) and each index alone
(``INDEXED BY``), so the damage is named per table and index; where a table reads, its ``PRAGMA
quick_check`` (https://www.sqlite.org/pragma.html#pragma_quick_check, which also covers its
indexes) is run and summarised (how many messages, the first), not dumped. A check that itself
fails with "database disk image is malformed" still names its table. No page is parsed here.
:func:`open_error_is_damage` tells such damage from a file that is no recording at all.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from recordings.errors import RecordingError
from recordings.file.opening import NOTHING_READS, check_sqlite_file

QUICK_CHECK_LIMIT = 100     # quick_check stops after this many messages (its default)


def truncation(path: Path) -> list[str]:
    """["truncated file: ..."] when the file is shorter than its header says, else []."""
    try:
        check_sqlite_file(path)
    except RecordingError as exc:      # "...: truncated or corrupt recording (N bytes, the header ...)"
        detail = str(exc).rpartition("(")[2].rstrip(")")
        return [f"truncated file: {detail}; the pages past its end are lost"]
    return []


def structure_damage(reader) -> list[str]:
    """One line per table whose b-tree, or one of whose indexes, SQLite finds damaged in the
    file open in ``reader`` (``"table steps: rows do not read (database disk image is
    malformed)"``, ``"index requests_static of table requests: ..."``): a full scan of the table
    and of each index alone, and the table's ``quick_check`` summarised. [] when all read."""
    out: list[str] = []
    tables = reader.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                            "AND name NOT LIKE 'sqlite_%' ORDER BY rootpage")
    for (table,) in tables:
        scan = _scan_error(reader, f"SELECT * FROM [{table}] NOT INDEXED")
        indexes = [index for (index,) in reader.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL "
            "ORDER BY name", (table,)) if _scan_error(reader, _index_scan(reader, table, index))]
        check = "" if scan else _quick_check(reader, table)
        if scan or (check and not indexes):
            what = f"table {table}" + (f" and its index{'es' * (len(indexes) > 1)} {', '.join(indexes)}"
                                       if indexes else "")
            out.append(f"{what}: {f'rows do not read ({scan})' if scan else check}")
        elif indexes:
            out.append(f"index{'es' * (len(indexes) > 1)} {', '.join(indexes)} of table {table} "
                       "(the table reads; `recover` rebuilds indexes)")
    return out


def _index_scan(reader, table: str, index: str) -> str:
    """A query that reads every entry of ``index`` (and nothing else)."""
    cols = [c[2] for c in reader.execute(f"PRAGMA index_info([{index}])") if c[2]]
    order = ", ".join(f"[{c}]" for c in cols) or "rowid"
    return f"SELECT {order} FROM [{table}] INDEXED BY [{index}] ORDER BY {order}"


def _scan_error(reader, sql: str) -> str:
    """'' when every row of ``sql`` reads; else SQLite's message."""
    try:
        reader.execute(f"SELECT count(*) FROM ({sql})")
        return ""
    except RecordingError as exc:
        return str(exc.__cause__ or exc)


def _quick_check(reader, table: str) -> str:
    """SQLite's ``quick_check`` of ``table`` and its indexes in a few words ('' when clean): how
    many messages and the first, or the error when the check itself cannot run."""
    try:
        rows = reader.execute(f"PRAGMA quick_check([{table}])")
    except RecordingError as exc:
        return f"SQLite's check fails: {exc.__cause__ or exc}"
    messages = [line for (text,) in rows for line in str(text).splitlines()
                if line != "ok" and not line.startswith("***")]
    if not messages:
        return ""
    many = f"{len(messages)}{'+' if len(messages) >= QUICK_CHECK_LIMIT else ''} problems, first: " \
        if len(messages) > 1 else ""
    return f"SQLite's check: {many}{messages[0]}"


def open_error_is_damage(exc: BaseException) -> bool:
    """Whether a :class:`RecordingError` from opening a file means damage that
    :func:`recordings.damage.report.find_damage` may see past (truncated, corrupt, malformed), rather
    than a file that is not a recording at all, or one cut short inside its first page (nothing
    of it reads)."""
    text = str(exc)
    cause = exc.__cause__
    return (isinstance(cause, sqlite3.DatabaseError) or "truncated" in text or "corrupt" in text
            or "malformed" in text) and "not an SQLite database" not in text and "empty" not in text \
        and NOTHING_READS not in text
