"""Copy what is readable of a damaged recording into a fresh, valid one (``batchscope recover``).

:func:`salvage` works in four passes, never writing to the damaged file:

1. copy: a new file with this code's schema (``recordings.file.schema.migrate``; fresh indexes, so a
   damaged index costs nothing) gets every row of the damaged one that still reads, through a
   ``Reader(damaged=True)`` and sqlite-utils: each table read in its own key order (``NOT
   INDEXED``) by ranges of steps (``seq`` for ``requests``), a range that fails halved until
   the rows that do not read are single (``recordings.damage.report.bad_ranges``);
2. rebuild: the ``requests`` rows that did not read are rebuilt from the copied steps
   (``recordings.damage.rebuild_requests``: arrival exact, ids ``lost-<seq>``, what no step
   holds left NULL and said);
3. keep: the last kept step ``k`` is the last of the run of steps from 0 that
   ``Reader.state_at`` replays on the copy (:func:`recordings.damage.report.find_damage`: a step whose
   row is missing or a request row lost ends it) and before the first step one of whose
   events, block events or transitions did not read (the copy would replay it, wrongly). A
   keyframe whose bytes do not decode is dropped first, and where keyframes are missing (rows
   that did not read or decode) new ones are replayed on the copy and stored, every
   ``keyframe_interval`` steps as the writer keeps them, so seeking stays as cheap. Rows of
   later steps are deleted, with the requests that arrived after ``k``, and the outcome of a
   request that finished after ``k`` is cleared (at ``k`` it was live);
4. ``VACUUM INTO`` the output (SQLite's own compacting copy), then the work file is removed.

``runs.run_info_json`` gains ``salvaged`` (the source, the steps kept and what the damage was),
and ``closed_at`` is cleared when steps were dropped, so the copy reads as a run cut short.
This is the idea of SQLite's ``.recover`` (copy every row that still reads into a new database)
at the level of BatchScope's rows, so the copy is a recording the reader and ``batchscope check``
accept, not a bag of orphan rows. No SQLite page is parsed here.
"""
from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import sqlite_utils

from engine.plural import plural
from engine.run_info import RunInfo
from recordings.file import codec
from recordings.damage.analysis import damage_analysis
from recordings.damage.rebuild_requests import RebuiltRequests, rebuild_requests
from recordings.damage.report import DamageReport, Range, bad_ranges, find_damage, read_rows
from recordings.errors import RecordingError
from recordings.file.schema import migrate

CHILD_TABLES = ("events", "block_events", "transitions")   # a step lacking one of its rows is wrong
STEP_TABLES = ("steps", *CHILD_TABLES, "keyframes")
CHUNK_STEPS = 512
DEFAULT_KEYFRAME_INTERVAL = 128   # RecordingWriter's, for a file that does not name its own
OUTCOME_COLUMNS = ("status", "finish_reason", "finish_step", "num_output_tokens", "ttft",
                   "mean_itl", "num_preemptions", "error")


@dataclass(frozen=True)
class SalvageResult:
    """What :func:`salvage` kept and dropped: ``last_step`` (the last kept step), ``num_steps``
    (steps the damaged file named), ``num_requests`` kept, ``dropped_requests`` (arrived after
    ``last_step``), ``unreadable_requests`` (rows that did not read and could not be rebuilt:
    no readable step names them), ``num_keyframes`` kept, ``rederived_keyframes`` (replayed and
    stored again), the source's :class:`recordings.damage.report.DamageReport` and the request
    rows rebuilt from the steps (``recordings.damage.rebuild_requests``)."""

    path: Path
    last_step: int
    num_steps: int
    num_requests: int
    dropped_requests: int
    unreadable_requests: int
    num_keyframes: int
    rederived_keyframes: int
    report: DamageReport
    rebuilt: RebuiltRequests = field(default_factory=RebuiltRequests)

    def lines(self) -> list[str]:
        """What was kept and dropped, one line each."""
        n, k = self.num_steps, self.last_step
        out = [f"kept steps 0..{k} ({k + 1:,} of {n:,}), {plural(self.num_requests, 'request')}, "
               f"{plural(self.num_keyframes, 'keyframe')}"]
        if k < self.report.last_saved_step:
            out.append(f"(steps {k + 1}..{self.report.last_saved_step} read but did not replay in the copy: "
                       "their bytes do not decode)")
        if k + 1 < n:
            out.append(f"dropped steps {k + 1}..{n - 1} ({n - k - 1:,}): lost or unreadable, or after "
                       "the first damaged step (a recording has no gaps)")
        if self.dropped_requests:
            out.append(f"dropped {plural(self.dropped_requests, 'request')} that arrived after step {k}")
        if self.rederived_keyframes:
            out.append(f"re-derived {plural(self.rederived_keyframes, 'keyframe')} whose rows did not read or decode")
        out += self.rebuilt.lines()
        return out


def salvage(src: str | Path, out: str | Path, *, report: DamageReport | None = None,
            on_progress: Callable[[str, int, int], None] | None = None) -> SalvageResult:
    """Copy the readable part of the recording at ``src`` into a new recording at ``out`` (see
    the module doc). ``report``: the file's damage report when already known (default: its one analysis,
    ``recordings.damage.analysis.damage_analysis``).
    ``on_progress(phase, done, total)``: ``"scan"`` (steps of the damaged file read),
    ``"copy"`` (steps copied), ``"verify"`` (steps of the copy decoded). Raises
    :class:`RecordingError` when ``out`` exists, the file is not a recording, is of schema 1,
    or step 0 does not read (nothing to keep)."""
    src, out = Path(src), Path(out)
    if out.exists():
        raise RecordingError(f"{out}: already exists; name a new file for the salvaged recording")

    def phase(name: str):
        return None if on_progress is None else lambda done, total: on_progress(name, done, total)
    if report is None:       # the file's one analysis (rows read; the copy is decoded)
        report = damage_analysis(src, phase("scan"))
    if report.version < 2:
        raise RecordingError(f"{src}: a schema-{report.version} recording is not salvaged (too old)")
    work = out.with_name(out.name + ".partial")
    work.unlink(missing_ok=True)
    try:
        unreadable = _copy_rows(src, work, report, phase("copy"))
        rebuilt = _rebuild_requests(work, unreadable["requests"])
        kept = find_damage(work, phase("verify"))
        if kept.bad_keyframes:       # bytes changed under SQLite's notice: replayed instead
            _delete_keyframes(work, kept.bad_keyframes)
            kept = find_damage(work, phase("verify"))
        lost_rows = [a for table in CHILD_TABLES for a, _ in unreadable[table]]
        last = min(report.last_saved_step, kept.last_good_step,     # what check said, unless the copy
                   min(lost_rows, default=report.last_step + 1) - 1)    # replays less (bytes that do not decode)
        if last < 0:
            raise RecordingError(f"{src}: step 0 does not read, so nothing can be salvaged "
                                 f"({'; '.join(report.lines())})")
        rederived = _rederive_keyframes(work, last)
        counts = _keep_until(work, last, report)
        _vacuum_into(work, out)
    finally:
        work.unlink(missing_ok=True)
    return SalvageResult(out, last, report.last_step + 1, counts[0], counts[1],
                         len(rebuilt.missing), counts[2], rederived, report, rebuilt)


def _copy_rows(src: Path, work: Path, report: DamageReport,
               on_progress: Callable[[int, int], None] | None) -> dict[str, list[Range]]:
    """Every row of ``src`` that reads into a new recording at ``work``; per table, the key
    ranges (steps, ``seq`` for requests) that do not read."""
    from recordings.file.open_reader import open_reader

    os.close(os.open(work, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    db = sqlite_utils.Database(str(work), execute_plugins=False)
    unreadable: dict[str, list[Range]] = {}
    try:
        migrate(db, work)
        with open_reader(src, damaged=True) as reader, db.atomic():
            db["runs"].insert_all(_select(reader, "runs", "1", ()))
            unreadable["requests"] = _copy_range(reader, db, "requests", "seq", 0, report.num_requests)
            last, total = report.last_step, report.last_step + 2
            for a in range(-1, last + 1, CHUNK_STEPS):
                b = min(a + CHUNK_STEPS, last + 1)
                for table in STEP_TABLES:
                    unreadable.setdefault(table, []).extend(_copy_range(reader, db, table, "step", a, b))
                if on_progress is not None:
                    on_progress(b + 1, total)
    finally:
        db.close()
    return unreadable


def _rebuild_requests(work: Path, lost: list[Range]) -> RebuiltRequests:
    """The ``requests`` rows that did not read, rebuilt in the copy at ``work`` from its steps
    (``recordings.damage.rebuild_requests``)."""
    db = sqlite_utils.Database(str(work), execute_plugins=False)
    try:
        with db.atomic():
            return rebuild_requests(db, lost)
    finally:
        db.close()


def _delete_keyframes(work: Path, steps: list[int]) -> None:
    db = sqlite_utils.Database(str(work), execute_plugins=False)
    try:
        with db.atomic():
            for k in steps:
                db.execute("DELETE FROM keyframes WHERE step = ?", (k,))
    finally:
        db.close()


def _rederive_keyframes(work: Path, last: int) -> int:
    """Keyframes replayed and stored again where the copy at ``work`` lacks them: every
    ``keyframe_interval`` steps (the run's, as the writer keeps at the latest) in each longer gap
    up to step ``last``, so a seek replays no more than in the original. How many."""
    from recordings.file.open_reader import open_reader

    with open_reader(work) as reader:
        interval = reader.execute("SELECT keyframe_interval FROM runs")[0][0] or DEFAULT_KEYFRAME_INTERVAL
        have = [k for (k,) in reader.execute("SELECT step FROM keyframes WHERE step <= ? ORDER BY step",
                                             (last,))]
        wanted = [k for prev, nxt in zip(have, have[1:] + [last + 1])
                  for k in range(prev + interval, nxt, interval)]
        states = [reader.state_at(k) for k in wanted]
    if not states:
        return 0
    db = sqlite_utils.Database(str(work), execute_plugins=False)
    try:
        with db.atomic():
            for state in states:
                blob, finished = codec.state_blob(state)
                db["keyframes"].insert({"step": state.step, "state_npz": blob, "finished_json": finished})
    finally:
        db.close()
    return len(states)


def _copy_range(reader, db: sqlite_utils.Database, table: str, key: str, lo: int, hi: int) -> list:
    """Copy the rows of ``table`` with ``lo <= key < hi`` that read
    (:func:`recordings.damage.report.read_rows`); the key ranges that do not."""
    def copy(a: int, b: int) -> bool:
        rows = read_rows(reader, table, key, a, b)
        if rows is None:
            return False
        db[table].insert_all(rows, batch_size=200)
        return True
    return bad_ranges(copy, lo, hi, chunk=max(1, hi - lo))


def _select(reader, table: str, where: str, params: tuple, hint: str = "") -> list[dict]:
    cols = [c[1] for c in reader.execute(f"PRAGMA table_info([{table}])")]
    rows = reader.execute(f"SELECT {', '.join(f'[{c}]' for c in cols)} FROM [{table}] {hint} "
                          f"WHERE {where}", params)
    return [dict(zip(cols, r)) for r in rows]


def _keep_until(work: Path, last: int, report: DamageReport) -> tuple[int, int, int]:
    """Delete what follows step ``last`` from the copy at ``work`` and mark it salvaged;
    (requests kept, requests dropped as arriving later, keyframes kept)."""
    db = sqlite_utils.Database(str(work), execute_plugins=False)
    try:
        with db.atomic():
            for table in STEP_TABLES:
                db.execute(f"DELETE FROM [{table}] WHERE step > ?", (last,))
            dropped = db.execute("DELETE FROM requests WHERE arrival_step > ?", (last,)).rowcount
            db.execute(f"UPDATE requests SET {', '.join(f'{c} = NULL' for c in OUTCOME_COLUMNS)} "
                       "WHERE finish_step > ?", (last,))
            (run_id, info_json), = db.execute("SELECT run_id, run_info_json FROM runs").fetchall()
            n = report.last_step + 1
            info = RunInfo.from_json(json.loads(info_json), where=str(report.path)).replace(salvaged={
                "source": str(report.path), "last_step": last, "num_steps_in_source": n, "damage": report.lines()})
            db["runs"].update(run_id, {"run_info_json": json.dumps(info.to_json())})
            if last + 1 < n:
                db["runs"].update(run_id, {"closed_at": None})
            kept = db.execute("SELECT count(*) FROM requests").fetchone()[0]
            keyframes = db.execute("SELECT count(*) FROM keyframes").fetchone()[0]
    finally:
        db.close()
    return kept, dropped, keyframes


def _vacuum_into(work: Path, out: Path) -> None:
    """SQLite's ``VACUUM INTO``: a compact copy of ``work`` at ``out`` (owner-only, as
    recordings are)."""
    os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))   # VACUUM INTO fills an empty file
    conn = sqlite3.connect(work)
    try:
        conn.execute("VACUUM INTO ?", (str(out),))
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    finally:
        conn.close()
