"""One damage analysis per recording, shared by every tool: ``batchscope check``, ``recover``,
``summary`` and the window tell the same story because they read the same report.

:func:`damage_analysis` runs :func:`recordings.damage.report.find_damage` once per version of a
file (its size and modification time, and its ``-wal`` file's) and keeps the report in memory and
on disk: a damaged file's beside it as ``<file>.damage.json`` (it travels with the file), an intact
file's in BatchScope's cache folder (``damage/``), so a big recording is scanned once per version
(a cache that cannot be written or read is skipped, never an error). A changed file gets a new analysis. The rows are read
and their keyframes checked but not decoded (``decode=False``: ~10x faster, every readable range's
ends still replayed; see ``find_damage``), so a scan costs about what opening the window costs.
:func:`known_damage` answers from the caches only (no scan), for callers that must not wait.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

from engine.cache_folder import cache_root
from recordings.damage.report import DamageReport, find_damage

CACHE_SUFFIX = ".damage.json"
_FORMAT = 2                      # bump when DamageReport's meaning changes (2: last_saved_step)
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
    # a damaged file's report beside it (it travels with the file); an intact one's in the cache
    # folder, so a big recording is scanned once per version, not at every open
    _save(cache_path(path) if report.is_damaged else clean_cache_path(path), key, report)
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
    report = None
    for where in (cache_path(path), clean_cache_path(path)):
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
            if data.get("format") != _FORMAT or tuple(data.get("version") or ()) != key:
                continue
            report = DamageReport.from_json({**data["report"], "path": str(path)})
            break
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if report is None:
        return None
    _MEMORY[str(path.resolve())] = (key, report)
    return report


def cache_path(path: Path) -> Path:
    """Where the analysis of ``path`` is kept: ``<path>.damage.json``."""
    return path.with_name(path.name + CACHE_SUFFIX)


def clean_cache_path(path: Path) -> Path:
    """Where the analysis of an intact ``path`` is kept: ``damage/<hash of its full path>.json`` in
    BatchScope's cache folder (:func:`engine.cache_folder.cache_root`)."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return cache_root() / "damage" / f"{digest}.json"


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


def _save(target: Path, key: tuple | None, report: DamageReport) -> None:
    """Keep ``report`` at ``target`` (owner-only, as recordings are); skipped when its folder
    takes no file."""
    if key is None:
        return
    data = json.dumps({"format": _FORMAT, "version": list(key), "report": report.to_json()})
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target.with_name(target.name + ".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(target.with_name(target.name + ".tmp"), target)
    except OSError:
        pass
