"""RecordingWriter: records a run to SQLite from a background thread.

The engine thread only puts objects on a bounded queue; when the writer falls behind, the engine
waits (nothing is dropped) and records how long in the next step's ``recorder_wait_ns``. One writer
thread turns them into schema-5 rows and commits them in batches (every ``flush_interval_s`` or
every ``BATCH_ITEMS`` items), with WAL on so readers can open the file while it grows. A step's rows
always share the transaction of its ``steps`` row, so a killed process leaves a file that holds
every committed step whole and nothing of the others.

Keyframes: the writer keeps its own :class:`engine.state.timeline.StateTimeline` (the one
implementation of state + record) and stores a snapshot when :func:`keyframe_due` says so: once
the bytes of the steps written since the last keyframe reach ``KEYFRAME_COST_RATIO`` times what a
keyframe costs (the mean size of those since the last whole one), or ``MAX_REPLAY_BYTES`` if
less (at least ``MIN_KEYFRAME_GAP`` steps apart), and at the latest every ``keyframe_interval``
steps. A seek loads one keyframe and replays the steps
after it, whose cost grows with their bytes, so the byte cap bounds a seek's replay; the ratio
keeps keyframes at most about 1 / (ratio + 1) of the file however big the state is (a waiting
queue of 10k requests makes a keyframe several times a decode step's rows). Under prefix
caching one keyframe in ``HASH_BASE_EVERY`` holds the blocks' prefix hashes (8 random bytes a
cached block: most of a keyframe's bytes); the others name it as their ``hash_base`` and the
reader replays the hash tags of the block events since (``codec.state_blob``). Likewise one
keyframe in ``HASH_BASE_EVERY`` holds the whole block map (owner and position of every block:
~42 kB at 16,384 fragmented blocks); the others hold only the blocks that changed since the
keyframe before them (schema 5, ``codec.map_changes``).
"""
from __future__ import annotations

import array
import atexit
import datetime as _dt
import errno
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import sqlite_utils

from engine.outputs import StepRecord
from engine.run_info import RunInfo
from engine.state.timeline import StateTimeline
from recordings.file import codec
from recordings.errors import RecordingError
from recordings.file.recorded_ids import RecordedIds
from recordings.file.schema import migrate

BATCH_ITEMS = 256       # commit at the latest after this many queued items
MAX_QUEUE_ITEMS = 4096  # the engine waits when this many items are queued ...
MAX_QUEUE_BYTES = 16 << 20  # ... or when the queued items weigh this much (estimated, see _weight):
#   a step of 256 running requests holds ~50 kB of Python objects, so 4,096 of them queued behind a
#   writer that fell behind (a busy machine) held ~200 MB; 16 MiB queues ~300 such steps
ENTRY_BYTES = 100       # a queued step's estimated bytes per entry (batch entry, new token, event)
MIN_KEYFRAME_GAP = 32   # steps between two keyframes at least
KEYFRAME_COST_RATIO = 12  # a keyframe once the steps since the last one weigh this many of it ...
MAX_REPLAY_BYTES = 160_000  # ... or this many bytes if less (a seek replays at most about this;
#   schema 4's binary steps are ~2.5x smaller than the JSON ones this was 384 kB for, for the same
#   replay work: ~64 steps of 256 running requests)
PAGE_SIZE = 16384       # SQLite page of a new recording (bytes). SQLite's default 4,096 holds only
#   two ~1.5 kB steps rows of 256 running requests and wastes a quarter of the steps table; a bigger
#   page leaves at most one row's room unused in 16 kB (about 5%)
HASH_BASE_EVERY = 8     # every this many keyframes one holds the prefix hashes and the whole block
#   map, the others refer to it (hashes) and to the keyframe before them (block map)
MIN_MAP_CHANGE_BLOCKS = 1024   # a smaller pool's keyframes hold their whole block map (changes
#   would save less than their four arrays cost)
_LIVE_WRITERS: "weakref.WeakSet[RecordingWriter]" = weakref.WeakSet()


class RecordingWriter:
    """Write one run to the recording file ``path``.

    ``run_info`` (an :class:`engine.run_info.RunInfo`, or its JSON form: a dict read with
    ``RunInfo.from_json``) is stored as ``RunInfo.to_json()`` (values that JSON cannot hold are
    stored as their ``str``); its ``config`` must hold ``num_gpu_blocks`` (the resolved number), ``block_size`` and
    ``max_num_seqs``, from which the writer starts its own state timeline for keyframes (at most
    ``keyframe_interval`` steps apart). An existing non-empty ``path`` is refused unless
    ``overwrite`` (then it is replaced). At most ``max_queue_items`` items wait for the writer
    thread: beyond that ``write_*`` blocks (the engine waits; nothing is dropped).
    ``store_prompt_token_ids=False`` leaves ``requests.prompt_token_ids`` NULL (for synthetic
    prompts that the run's provenance can regenerate; say so in ``run_info``).

    Recordings hold production prompts: the file (and SQLite's ``-wal`` / ``-shm`` files, which
    take the main file's permissions) is created with ``file_mode`` (default ``0o600``, owner
    only; the process umask can only narrow it). ``store_text=False`` stores no text: no
    ``prompt_text``, no ``token_text_json``, no ``stop`` strings in ``sampling_json``; token ids
    and lengths only (``run_info.text_stored`` is then False). ``page_size``: SQLite's page, in
    bytes (default :data:`PAGE_SIZE`; a power of two from 512 to 65,536).

    ``write_*`` only enqueue; the writer thread converts and commits. If the writer thread fails,
    the next ``write_*``/``flush``/``close`` raises :class:`RecordingError` (the cause chained) and
    every later ``write_*``/``flush`` raises it again; rows committed before stay readable.
    Use as a context manager or call :meth:`close`. Raises :class:`RecordingError` if the file
    cannot be created, ``ValueError`` for bad arguments.
    """

    def __init__(self, path: str | os.PathLike, run_info: RunInfo | Mapping[str, Any],
                 keyframe_interval: int = 128, flush_interval_s: float = 0.2,
                 *, overwrite: bool = False, max_queue_items: int = MAX_QUEUE_ITEMS,
                 max_queue_bytes: int = MAX_QUEUE_BYTES,
                 store_prompt_token_ids: bool = True, file_mode: int = 0o600,
                 store_text: bool = True, page_size: int = PAGE_SIZE) -> None:
        if keyframe_interval < 1:
            raise ValueError(f"keyframe_interval must be >= 1, got {keyframe_interval}")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self.path = Path(path)
        if not isinstance(run_info, RunInfo):
            run_info = RunInfo.from_json(run_info, where=str(self.path))
        config = run_info.config
        missing = [k for k in ("num_gpu_blocks", "block_size", "max_num_seqs")
                   if not isinstance(config.get(k), int)]
        if missing:
            raise ValueError(f"run_info['config'] needs integer {', '.join(missing)}")
        if page_size not in {512 << i for i in range(8)}:
            raise ValueError(f"page_size must be a power of two from 512 to 65536 bytes, got {page_size}")
        self._page_size = page_size
        if not 0 <= file_mode <= 0o777:
            raise ValueError(f"file_mode must be permission bits 0o000..0o777, got {file_mode:#o}")
        self._prepare_path(overwrite)
        self._create_file(file_mode)
        self._run_info = run_info if store_text else run_info.replace(text_stored=False)
        self._store_text = store_text
        self._keyframe_interval = keyframe_interval
        self._flush_interval_s = flush_interval_s
        self._store_prompt = store_prompt_token_ids
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_queue_items))
        self._max_queue_bytes = max_queue_bytes
        self._queued_bytes = 0                  # estimated bytes of the queued items (_weight)
        self._room = threading.Condition()      # notified when the writer takes an item
        self._error: BaseException | None = None
        self._closed = False
        self._close_reported = False
        self._last_step = -1
        self._timeline = StateTimeline(config["num_gpu_blocks"], config["block_size"],
                                       config["max_num_seqs"], config.get("num_cpu_blocks", 0))
        self._seq: dict[str, int] = {}      # live request id -> arrival number
        self._num_prompt: dict[str, int] = {}  # live request id -> prompt length
        self._next_seq = 0
        self._recorded = RecordedIds(self.path, self._seq)   # for the engine's duplicate-id check
        self._last_keyframe = (-1, 0)        # (step, bytes)
        self._hash_base = -1                 # the step of the last keyframe that holds its hashes
        self._since_whole = 0                # keyframes since the last that holds its whole state
        self._cycle_bytes = 0                # the bytes of the keyframes since then, it included
        self._last_map: codec.BlockMap = (-1, np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._bytes_since_keyframe = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"RecordingWriter({self.path.name})")
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._closed = self._close_reported = True
            raise self._wrap("cannot create the recording") from self._error
        _LIVE_WRITERS.add(self)

    # --- caller side (engine thread): enqueue only --------------------------------------------
    def write_request(self, request_id: str, arrival_step: int, arrival_time: float,
                      prompt_token_ids: Sequence[int], prompt_text: str | None,
                      sampling: Mapping[str, Any]) -> None:
        """Record a request's arrival, before the step that first contains it.

        ``arrival_time`` is on the engine clock; ``sampling`` is a plain dict (e.g. the fields
        of ``SamplingParams``). Raises :class:`RecordingError` after a writer failure or close.
        """
        self._check()
        sampling = dict(sampling)
        if not self._store_text:
            prompt_text = None
            sampling.pop("stop", None)
        self._recorded.queued.add(request_id)
        # A copy the caller cannot change, 4 bytes per id while it waits in the queue (a tuple
        # of ints is ~36): a burst of arrivals with long prompts queues thousands of them.
        # Not stored: only the length is read (a prompt made on first use stays unmade).
        num_prompt = len(prompt_token_ids)
        ids = array.array("i", prompt_token_ids) if self._store_prompt else None
        self._put(("request", (request_id, arrival_step, arrival_time, ids, num_prompt, prompt_text,
                               sampling)), (0 if ids is None else 4 * num_prompt) + ENTRY_BYTES)

    def write_step(self, record: StepRecord) -> None:
        """Record one step (steps in increasing order). Blocks while the queue is full (the
        writer is behind). Raises :class:`RecordingError` after a writer failure or close."""
        self._check()
        self._put(("step", record), _weight(record))

    def recorded_ids(self, names: list[str]) -> set[str]:
        """The ``names`` this recording holds (committed or queued) as request ids or as a
        parallel-sampling prompt's id (``recordings.file.recorded_ids.RecordedIds.find``): how the
        engine checks new ids against finished ones without keeping them. Any thread; raises
        ``sqlite3.Error`` if the file cannot be read."""
        return self._recorded.find(names)

    def flush(self) -> None:
        """Block until everything queued so far is committed. Raises :class:`RecordingError`
        if the writer thread failed."""
        self._check()
        done = threading.Event()
        self._put(("flush", done))
        while not done.wait(0.05) and self._thread.is_alive():
            pass
        self._check()

    @property
    def failure(self) -> str | None:
        """What stopped the writer thread (None while it is healthy); rows committed before it
        stay readable."""
        self._notice_death()
        return None if self._error is None else str(self._wrap("recording writer failed"))

    @property
    def queue_depth(self) -> int:
        """Items waiting for the writer thread."""
        return self._queue.qsize()

    @property
    def queued_bytes(self) -> int:
        """Estimated bytes of the items waiting for the writer thread (at most ``max_queue_bytes``
        but for one item heavier than that alone)."""
        with self._room:
            return self._queued_bytes

    def close(self) -> None:
        """Commit everything queued, stop the writer thread and close the file. Idempotent.

        Raises :class:`RecordingError` (once) if the writer thread failed at any point.
        """
        if not self._closed:
            self._closed = True
            self._recorded.close()     # no reader of ours keeps the WAL from folding back
            if self._thread.is_alive():
                self._put(("stop", None))
            self._thread.join()
            _LIVE_WRITERS.discard(self)
        if self._error is not None and not self._close_reported:
            self._close_reported = True
            raise self._wrap("recording writer failed") from self._error

    @property
    def last_committed_step(self) -> int:
        """The last step whose rows are committed (-1 before the first)."""
        return self._last_step

    def __enter__(self) -> "RecordingWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def _put(self, item: tuple[str, Any], weight: int = 0) -> None:
        """Queue ``item`` (estimated ``weight`` bytes), waiting while the queue is full in items
        or in bytes (an item heavier than the whole budget waits for an empty queue); a writer
        thread that died (nothing takes items any more) is reported instead of waiting forever."""
        with self._room:
            while self._queued_bytes and self._queued_bytes + weight > self._max_queue_bytes:
                if not self._room.wait(0.5) and not self._thread.is_alive():
                    self._died()
            self._queued_bytes += weight
        while True:
            try:
                self._queue.put((*item, weight), timeout=0.5)
                return
            except queue.Full:
                if not self._thread.is_alive():
                    self._died()

    def _died(self) -> None:
        self._notice_death(closing=True)
        raise self._wrap("recording writer failed") from self._error

    def _notice_death(self, closing: bool = False) -> None:
        """Record a writer thread that ended without a stop (``closing``: even while closing)."""
        if self._error is None and not self._thread.is_alive() and (closing or not self._closed):
            self._error = RecordingError(f"{self.path}: the recording writer thread stopped")

    def _check(self) -> None:
        self._notice_death()
        if self._error is not None:
            raise self._wrap("recording writer failed") from self._error
        if self._closed:
            raise RecordingError(f"{self.path}: the recording writer is closed")

    def _wrap(self, what: str) -> RecordingError:
        if isinstance(self._error, RecordingError):
            return RecordingError(str(self._error))
        return RecordingError(f"{self.path}: {what}: {type(self._error).__name__}: {self._error}"
                              f"{out_of_space_hint(self._error)}")

    def _prepare_path(self, overwrite: bool) -> None:
        sidecars = [Path(f"{self.path}{suffix}") for suffix in ("-wal", "-shm", "-journal")]
        exists = (self.path.exists() and self.path.stat().st_size > 0) or sidecars[0].exists()
        if exists and not overwrite:
            raise RecordingError(f"{self.path}: file already exists (pass overwrite=True to "
                                 "replace it)")
        if overwrite:
            for p in [self.path, *sidecars]:
                p.unlink(missing_ok=True)

    def _create_file(self, mode: int) -> None:
        """Create the empty file with permission bits ``mode`` before SQLite opens it (SQLite
        gives its -wal and -shm files the same bits)."""
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))  # less the umask
        except FileExistsError:   # an empty file the caller made: keep it, with ``mode``
            os.chmod(self.path, mode)
        except OSError as exc:
            raise RecordingError(f"{self.path}: cannot create the recording: {exc}") from exc

    # --- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            db = self._open()
        except BaseException as exc:  # reported by __init__
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self._serve(db)
        except BaseException as exc:   # the thread dies (a bug, an interpreter shutting down)
            if self._error is None:
                self._error = exc
            db.close()                 # every step committed so far stays readable

    def _serve(self, db: sqlite_utils.Database) -> None:
        """Take items off the queue and commit them, until ``stop``."""
        pending: list[tuple[str, Any]] = []
        deadline = 0.0
        while True:
            timeout = max(0.0, deadline - time.monotonic()) if pending else None
            try:
                kind, payload, weight = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._commit(db, pending)
                continue
            if weight:
                with self._room:
                    self._queued_bytes -= weight
                    self._room.notify()
            if kind in ("request", "step"):
                if self._error is None:
                    if not pending:
                        deadline = time.monotonic() + self._flush_interval_s
                    pending.append((kind, payload))
                    if len(pending) >= BATCH_ITEMS:
                        self._commit(db, pending)
                continue
            self._commit(db, pending)
            if kind == "flush":
                payload.set()
            else:  # stop
                self._finish(db)
                return

    def _open(self) -> sqlite_utils.Database:
        db = sqlite_utils.Database(str(self.path), execute_plugins=False)
        try:
            db.execute(f"PRAGMA page_size = {self._page_size}")   # the file is new: before its first page
            db.enable_wal()
            db.execute("PRAGMA synchronous = NORMAL")
            migrate(db, self.path)
            info, config = self._run_info, self._run_info.config
            model = info.model_name if info.model is not None else config.get("model")
            with db.atomic():
                db["runs"].insert({
                    "run_id": 1, "model": _text(model),
                    "dtype": _text(info.dtype if info.dtype is not None else config.get("dtype")),
                    "device": _text(info.device if info.device is not None else config.get("device")),
                    "seed": info.seed if info.seed is not None else config.get("seed"),
                    "clock": _text(config.get("clock")),
                    "started_at": _text(info.started_at) or _now_iso(),
                    "keyframe_interval": self._keyframe_interval,
                    "run_info_json": codec.dumps(info.to_json()),
                })
                state = self._timeline.snapshot()
                blob, finished = codec.state_blob(state)
                db["keyframes"].insert({"step": -1, "state_npz": blob, "finished_json": finished})
                self._last_keyframe = (-1, len(blob))
                self._last_map = (-1, state.block_owner, state.block_pos)
        except BaseException:
            db.close()
            raise
        return db

    def _commit(self, db: sqlite_utils.Database, pending: list[tuple[str, Any]]) -> None:
        """Write ``pending`` in one transaction, then empty it. A failure is stored, not raised."""
        if not pending or self._error is not None:
            pending.clear()
            return
        try:
            rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
            outcomes: list[dict[str, Any]] = []
            last_step, request_ids = self._last_step, []
            for kind, payload in pending:
                if kind == "request":
                    rid = payload[0]
                    request_ids.append(rid)
                    self._seq[rid] = self._next_seq
                    self._num_prompt[rid] = payload[4]
                    rows["requests"].append(codec.request_row(self._next_seq, *payload))
                    self._next_seq += 1
                    continue
                self._add_step(payload, rows, outcomes)
                last_step = payload.step
            with db.atomic():
                for table, table_rows in rows.items():
                    db[table].insert_all(table_rows, batch_size=500)
                if outcomes:
                    db.conn.executemany(
                        "UPDATE requests SET status = :status, finish_reason = :finish_reason, "
                        "finish_step = :finish_step, num_output_tokens = :num_output_tokens, "
                        "ttft = :ttft, mean_itl = :mean_itl, num_preemptions = :num_preemptions, "
                        "error = :error WHERE request_id = :request_id", outcomes)
            self._last_step = last_step
            self._recorded.committed(request_ids)
        except BaseException as exc:
            self._error = exc
        finally:
            pending.clear()

    def _add_step(self, record: StepRecord, rows: dict[str, list[dict[str, Any]]],
                  outcomes: list[dict[str, Any]]) -> None:
        """Rows of one step (and its outcomes, and a keyframe when one is due)."""
        seq = self._seq
        rows_of_step = codec.step_rows(record, seq.__getitem__, self._num_prompt.__getitem__)
        if not self._store_text:
            for row in rows_of_step.get("steps", ()):
                row["token_text_json"] = None
        for table, table_rows in rows_of_step.items():
            rows[table].extend(table_rows)
        self._bytes_since_keyframe += _rows_bytes(rows_of_step)
        self._timeline.apply(record)
        for view in self._timeline.last_finished:
            outcomes.append(codec.outcome_row(view, record.step))
            seq.pop(view.request_id, None)
            self._num_prompt.pop(view.request_id, None)
        kf_step, kf_bytes = self._last_keyframe
        if keyframe_due(record.step - kf_step, self._bytes_since_keyframe, kf_bytes,
                        self._keyframe_interval):
            state = self._timeline.snapshot()
            whole = self._since_whole + 1 >= HASH_BASE_EVERY
            whole_map = whole or len(state.block_owner) < MIN_MAP_CHANGE_BLOCKS or \
                len(self._last_map[1]) != len(state.block_owner)
            hash_base = None if whole or not state.block_hash.any() else self._hash_base
            blob, finished = codec.state_blob(state, hash_base=hash_base,
                                              map_base=None if whole_map else self._last_map)
            self._since_whole = 0 if whole else self._since_whole + 1
            if hash_base is None:
                self._hash_base = record.step
            rows["keyframes"].append({"step": record.step, "state_npz": blob,
                                      "finished_json": finished})
            # what a keyframe costs: the mean of those since the last whole one (a seek loads one
            # whole and up to HASH_BASE_EVERY - 1 changes), not the last one's changes alone
            self._cycle_bytes = len(blob) + (0 if whole else self._cycle_bytes)
            self._last_keyframe = (record.step, self._cycle_bytes // (self._since_whole + 1))
            self._last_map = (record.step, state.block_owner, state.block_pos)
            self._bytes_since_keyframe = 0

    def _finish(self, db: sqlite_utils.Database) -> None:
        """Mark a clean close, fold the WAL back into the file and close it."""
        try:
            if self._error is None:
                with db.atomic():
                    db.execute("UPDATE runs SET closed_at = ? WHERE run_id = 1", [_now_iso()])
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                try:  # a single self-contained file when no reader holds it open
                    db.disable_wal()
                except Exception:
                    pass
        except BaseException as exc:
            self._error = exc
        finally:
            db.close()


def keyframe_due(gap: int, bytes_since: int, keyframe_bytes: int, interval: int) -> bool:
    """Whether to store a keyframe after a step ``gap`` steps past the last keyframe
    (``keyframe_bytes``: what a keyframe costs, the writer's mean since the last whole one), the steps since then weighing ``bytes_since`` (about what they add
    to the file): at ``interval`` steps (the run's ``keyframe_interval``) always; from
    ``MIN_KEYFRAME_GAP`` steps once ``bytes_since`` reaches ``KEYFRAME_COST_RATIO`` keyframes or
    ``MAX_REPLAY_BYTES``, whichever is less. Keyframes so stay at most about
    1 / (``KEYFRAME_COST_RATIO`` + 1) of a file's bytes, and a seek replays at most about
    ``MAX_REPLAY_BYTES`` of steps (or ``interval`` steps)."""
    if gap >= interval:
        return True
    return gap >= MIN_KEYFRAME_GAP and bytes_since >= min(KEYFRAME_COST_RATIO * keyframe_bytes,
                                                          MAX_REPLAY_BYTES)


def out_of_space_hint(error: BaseException | None) -> str:
    """`` (the disk is full, or the file reached a size limit)`` when ``error`` is how SQLite or
    the OS says a write found no room: ``OSError`` ENOSPC / EFBIG / EDQUOT, SQLite's
    ``SQLITE_FULL`` ("database or disk is full") or ``SQLITE_IOERR`` ("disk I/O error", what a
    write past ``ulimit -f`` gives); else ``""``."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return " (the disk is full, or the file reached a size limit)"
    if isinstance(error, sqlite3.Error) and any(
            text in str(error) for text in ("database or disk is full", "disk I/O error")):
        return " (the disk is full, or the file reached a size limit)"
    return ""


def _rows_bytes(rows: Mapping[str, list[dict[str, Any]]]) -> int:
    """About how many bytes ``rows`` (one step's rows of every table) add to the file: the
    length of each text or blob value, 8 per other value, 16 per row (SQLite's record and page
    overhead, roughly)."""
    return sum(16 + sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row.values())
               for table_rows in rows.values() for row in table_rows)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


@atexit.register
def _close_live_writers() -> None:
    """Commit what open writers still hold when the interpreter exits normally."""
    for writer in list(_LIVE_WRITERS):
        try:
            writer.close()
        except RecordingError:
            pass


def _weight(record: StepRecord) -> int:
    """A queued step's estimated bytes: :data:`ENTRY_BYTES` for each of its batch entries, new
    tokens, arrivals, events, block events and transitions (their tuples and small ints)."""
    return ENTRY_BYTES * (1 + len(record.scheduled) + len(record.new_tokens) + len(record.arrivals)
                          + len(record.events) + len(record.block_events) + len(record.transitions))
