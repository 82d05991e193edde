"""One damage analysis per recording, shared by every tool: ``batchscope check``, ``recover``,
``summary`` and the window tell the same story because they read the same report.

:func:`damage_analysis` runs :func:`recordings.damage.report.find_damage` once per version of a
file (its size and modification time, and its ``-wal`` file's) and keeps the report in memory and,
for a damaged file, beside it as ``<file>.damage.json`` (when its folder takes a file; a cache that
cannot be written or read is skipped, never an error). A changed file gets a new analysis. The rows are read
and their keyframes checked but not decoded (``decode=False``: ~10x faster, every readable range's
ends still replayed; see ``find_damage``), so a scan costs about what opening the window costs.
:func:`known_damage` answers from the caches only (no scan), for callers that must not wait.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from recordings.damage.report import DamageReport, find_damage

CACHE_SUFFIX = ".damage.json"
_FORMAT = 1                      # bump when DamageReport's meaning changes
_MEMORY: dict[str, tuple[tuple, DamageReport]] = {}


def damage_analysis(path: str | Path, on_progress: Callable[[int, int], None] | None = None) -> DamageReport:
    """The :class:`recordings.damage.report.DamageReport` of the recording at ``path``, computed
    once per version of the file (see the module doc). ``on_progress(done, total)`` follows a
    scan (not called when a cache answers). Raises :class:`recordings.errors.RecordingError`
    when the file is not a recording at all."""
    path = Path(path)
    report = known_damage(path)
    if report is not None:
        return report
    key = _version(path)
    report = find_damage(path, on_progress, decode=False)
    _MEMORY[str(path.resolve())] = (key, report)
    if report.is_damaged:        # an intact file gets no file beside it
        _save(path, key, report)
    return report


def known_damage(path: str | Path) -> DamageReport | None:
    """The report of this version of the file when an earlier :func:`damage_analysis` left one
    (in this process or beside the file), else None. Never scans."""
    path = Path(path)
    key = _version(path)
    if key is None:
        return None
    held = _MEMORY.get(str(path.resolve()))
    if held is not None and held[0] == key:
        return held[1]
    try:
        data = json.loads(cache_path(path).read_text(encoding="utf-8"))
        if data.get("format") != _FORMAT or tuple(data.get("version") or ()) != key:
            return None
        report = DamageReport.from_json({**data["report"], "path": str(path)})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    _MEMORY[str(path.resolve())] = (key, report)
    return report


def cache_path(path: Path) -> Path:
    """Where the analysis of ``path`` is kept: ``<path>.damage.json``."""
    return path.with_name(path.name + CACHE_SUFFIX)


def _version(path: Path) -> tuple | None:
    """(size, mtime_ns) of the file and of its ``-wal`` (0, 0 when absent); None when the file
    cannot be stat'ed."""
    try:
        st = path.stat()
    except OSError:
        return None
    try:
        wal = os.stat(f"{path}-wal")
        wal_key = (wal.st_size, wal.st_mtime_ns)
    except OSError:
        wal_key = (0, 0)
    return (st.st_size, st.st_mtime_ns, *wal_key)


def _save(path: Path, key: tuple | None, report: DamageReport) -> None:
    """Keep ``report`` beside the file (owner-only, as recordings are); skipped when the folder
    takes no file."""
    if key is None:
        return
    target = cache_path(path)
    data = json.dumps({"format": _FORMAT, "version": list(key), "report": report.to_json()})
    try:
        fd = os.open(target.with_name(target.name + ".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(target.with_name(target.name + ".tmp"), target)
    except OSError:
        pass
