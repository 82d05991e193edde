"""The global invariants of the scheduler cases (``../shared/cases/README.md``) checked on states.

What one :class:`engine.state.state.EngineState` and its step's :class:`engine.outputs.StepRecord` can
show, checked step after step by :class:`StateChecker`, which the tests run on the live engine's
states and :func:`check_recording` on the states replayed from a recording's rows:

- G1 block conservation: blocks held by live requests + free blocks (cached-evictable included)
  == ``num_gpu_blocks``; only live requests hold blocks; each request's block table has exactly
  its block count, at positions 0..n-1; no more cached-free blocks than free ones; and, from the
  step's block events in order, an allocation takes only blocks nobody holds and a free releases
  only blocks its request holds; blocks taken out of use (live knob) are free and counted apart;
  on the CPU swap pool, exactly the swapped-out requests hold blocks (but a group's sequence
  whose KV is all in the prompt blocks its group's head copied).
- G2 (what a state shows of it): no block twice in one table; a block held by two requests is a
  prefix-cached block (it has a hash) with an owner, or a prompt block the sequences of one
  parallel-sampling group share (ids ``<id>#k``, ``engine.sequence_group``); without prefix
  caching nothing else is shared or cached.
- G3 queue exclusivity: every live request is in exactly one queue (waiting, running, paused,
  swapped), the
  queue sizes are the step's counts, a request leaves the live set only by finishing, and a
  finished request never comes back.
- G4 limits, from the run's config and the live knob changes recorded since: running <= ``max_num_seqs`` in distinct slots below it,
  scheduled requests <= ``max_num_seqs`` and scheduled tokens <= ``max_num_batched_tokens``.
- G6 drain (:meth:`StateChecker.check_drained`, on the last state of a run whose requests all
  finished): nothing live, every block free.

Each violation is a :class:`Problem` naming the step and the invariant; the checker never raises
on a bad state. ``record`` problems are states that cannot be checked further (a state and record
of different steps, live requests out of arrival order, a record the state cannot replay).
The checks are numpy over the block arrays (O(blocks + live requests) per step, no Python loop
per block), so a recording of thousands of steps checks in seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

import numpy as np

from engine.outputs import StepRecord
from engine.sequence_group import parent_id_of
from engine.state.state import NUM_RECENTLY_FINISHED, RESERVED, STATUS_CODE, STATUS_CODES, EngineState
from engine.vocab import EventKind, BlockEventKind

MAX_NAMED = 5          # ids named in one problem's message before "and N more"
CHUNK_STEPS = 512      # steps read from a recording per query
# Request events that end a request (schema-1 records carry these, not transitions)
FINISH_EVENT_KINDS = (EventKind.FINISHED, EventKind.ABORTED, EventKind.FAILED, EventKind.REJECTED)
_LIVE_CODES = tuple(STATUS_CODE[s] for s in STATUS_CODES if not s.is_finished)
_POOL_KINDS = (BlockEventKind.RESERVED, BlockEventKind.UNRESERVED)        # the usable pool resized (no request)


@dataclass(frozen=True)
class Problem:
    """One invariant violated at one step: ``invariant`` is ``G1``..``G6`` or ``record``."""

    step: int
    invariant: str
    message: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.invariant}: {self.message}"


def name_list(items) -> str:
    items = list(items)
    shown = ", ".join(str(x) for x in items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


class StateChecker:
    """Checks the states of one run in step order.

    ``config`` is the run's config as a dict (``EngineConfig.to_dict()`` or a recording's
    ``run_info().config``) with ``num_gpu_blocks`` resolved; it needs ``num_gpu_blocks``,
    ``max_num_seqs`` and ``max_num_batched_tokens`` (``KeyError`` otherwise) and reads
    ``enable_prefix_caching`` (default False). The checker remembers which requests finished and
    which were live (O(requests of the run) ids), so feed it every step, in order, from the first.
    """

    def __init__(self, config: Mapping) -> None:
        self.num_gpu_blocks = int(config["num_gpu_blocks"])
        self.max_num_seqs = int(config["max_num_seqs"])
        self.max_num_batched_tokens = int(config["max_num_batched_tokens"])
        self.enable_prefix_caching = bool(config.get("enable_prefix_caching", False))
        self._finished: set[str] = set()
        self._live: set[str] = set()
        self._holders: dict[int, list[str]] = {}     # block -> requests holding it, per the block events

    def check_step(self, st: EngineState, rec: StepRecord) -> list[Problem]:
        """Problems of G1, G2, G3 and G4 in ``st``, the state after ``rec``'s step ([] if none)."""
        out: list[Problem] = []

        def bad(invariant: str, message: str) -> None:
            out.append(Problem(rec.step, invariant, message))

        total = self.num_gpu_blocks
        if st.step != rec.step:
            bad("record", f"the state is at step {st.step}, its record at step {rec.step}")
            return out
        if st.num_total_blocks != total or rec.num_total_blocks != total:
            bad("G1", f"the state has {st.num_total_blocks} blocks and the record {rec.num_total_blocks}, "
                      f"the run's config {total}")
            return out
        seq = st.columns["seq"]
        if np.any(np.diff(seq) <= 0) or (len(seq) and seq[-1] >= st.next_seq):
            bad("record", "live requests are not in arrival order")
            return out
        for name, value in rec.knobs:          # live knobs hold from this step on
            if name in ("max_num_seqs", "max_num_batched_tokens"):
                setattr(self, name, int(value))
        self._check_block_events(rec, bad)
        self._check_blocks(st, rec, bad)
        self._check_cpu_pool(st, bad)
        self._check_queues(st, rec, bad)
        self._check_limits(st, rec, bad)
        return out

    def check_drained(self, st: EngineState, rec: StepRecord) -> list[Problem]:
        """G6 on a run's last state, once every request finished: nothing live, every block free."""
        out = []
        if len(st):
            out.append(Problem(rec.step, "G6", f"unfinished requests at the end: {name_list(st.request_ids)}"))
        if np.count_nonzero(st.cpu_owner >= 0):
            out.append(Problem(rec.step, "G6", f"{np.count_nonzero(st.cpu_owner >= 0)} CPU swap blocks "
                                               "still held at the end"))
        reserved = int(np.count_nonzero(st.block_owner == RESERVED))
        if st.num_used_blocks or rec.num_free_blocks + reserved != rec.num_total_blocks:
            out.append(Problem(rec.step, "G6", f"{st.num_used_blocks} blocks still held, "
                                               f"{rec.num_free_blocks} of {rec.num_total_blocks} free at the end"))
        return out

    # --- G1 / G2: the block events of the step, in order --------------------------------------------
    def _check_block_events(self, rec: StepRecord, bad) -> None:
        """An allocation takes only blocks nobody holds; a free releases only blocks its request
        holds (prefix-cache hits and parallel-sampling forks add holders; cached / evicted tags
        change none)."""
        holders = self._holders
        for ev in rec.block_events:
            rid = ev.request_id
            if ev.kind in _POOL_KINDS:
                held = [b for b in ev.block_ids if holders.get(b)]
                if held:
                    bad("G1", f"blocks taken out of use while held: {name_list(held)}")
                continue
            if ev.kind == BlockEventKind.ALLOCATED:
                taken = [f"block {b} to {rid} while {name_list(holders[b])} holds it" for b in ev.block_ids
                         if holders.get(b)]
                if taken:
                    bad("G1", f"allocated {name_list(taken)}")
            if ev.kind in (BlockEventKind.ALLOCATED, BlockEventKind.HIT, BlockEventKind.FORKED):
                for b in ev.block_ids:
                    holders.setdefault(b, []).append(rid)
            elif ev.kind == BlockEventKind.FREED:
                strays = [b for b in ev.block_ids if rid not in holders.get(b, ())]
                if strays:
                    bad("G1", f"{rid} freed blocks it does not hold: {name_list(strays)}")
                for b in ev.block_ids:
                    if rid in holders.get(b, ()):
                        holders[b].remove(rid)
                        if not holders[b]:
                            del holders[b]

    # --- G1 / G2: the block map -----------------------------------------------------------------
    def _check_blocks(self, st: EngineState, rec: StepRecord, bad) -> None:
        total, ids = self.num_gpu_blocks, st.request_ids
        seq = st.columns["seq"]
        owner, sh_seq, sh_block = st.block_owner, st.shared_seq, st.shared_block
        held = np.flatnonzero(owner >= 0)
        rows, ok = _rows_of(seq, owner[held])
        if not ok.all():
            bad("G1", f"blocks {name_list(held[~ok].tolist())} are held by requests that are not live")
        in_range = (sh_block >= 0) & (sh_block < total)
        if not in_range.all():
            bad("G1", f"shared holdings name blocks {name_list(sh_block[~in_range].tolist())} outside "
                      f"0..{total - 1}")
        sh_seq, sh_block = sh_seq[in_range], sh_block[in_range]
        sh_rows, sh_ok = _rows_of(seq, sh_seq)
        if not sh_ok.all():
            bad("G1", f"blocks {name_list(sh_block[~sh_ok].tolist())} are shared with requests that are not live")
        hashed = 0
        if len(sh_block):
            orphan = sh_block[owner[sh_block] < 0]
            if len(orphan):
                bad("G2", f"blocks {name_list(orphan.tolist())} are shared but have no owner")
            unhashed = st.block_hash[sh_block] == 0
            strays = [b for b in sh_block[unhashed].tolist() if not _group_shared(st, b)]
            if strays:
                bad("G2", f"blocks {name_list(strays)} are shared but cache no prefix nor a group's prompt")
            hashed = int(np.count_nonzero(~unhashed))
        cached_free = int(np.count_nonzero(st.cached_free_mask()))
        if not self.enable_prefix_caching and (hashed or cached_free):
            bad("G2", f"{len(sh_block)} shared holdings and {cached_free} cached-free blocks without "
                      "prefix caching")
        # Every (request row, block) holding, owned or shared.
        rows = np.concatenate([rows[ok], sh_rows[sh_ok]])
        blocks = np.concatenate([held[ok], sh_block[sh_ok]])
        counts = np.bincount(rows, minlength=len(ids)) if len(ids) else np.zeros(0, np.int64)
        wrong = np.flatnonzero(counts != st.columns["num_blocks"])
        if len(wrong):
            bad("G1", "block tables differ from the block counts: " + name_list(
                f"{ids[r]} holds {counts[r]}, counts {st.columns['num_blocks'][r]}" for r in wrong.tolist()))
        # Each table's positions are exactly 0..n-1: every holding lands in its own cell of the
        # tables laid end to end (O(holdings), no sort); a block named twice repeats a position.
        pos = st.block_pos[blocks]
        inside = (pos >= 0) & (pos < counts[rows])
        cell = (np.cumsum(counts) - counts)[rows] + pos
        if not inside.all() or np.any(np.bincount(cell[inside], minlength=len(rows)) != 1):
            self._explain_tables(ids, rows, blocks, pos, bad)
        used, reserved = len(held), int(np.count_nonzero(owner == RESERVED))
        if used + rec.num_free_blocks + reserved != total:
            bad("G1", f"{used} blocks held + {rec.num_free_blocks} free + {reserved} out of use "
                      f"!= {total} blocks")
        if cached_free > rec.num_free_blocks:
            bad("G1", f"{cached_free} cached-free blocks but only {rec.num_free_blocks} free ones")

    @staticmethod
    def _explain_tables(ids, rows, blocks, pos, bad) -> None:
        """Name the requests whose block tables name a block twice (G2) or have gaps or repeated
        positions (G1): the slow path, run only when the fast check failed."""
        order = np.lexsort((blocks, pos, rows))
        r, b, p = rows[order], blocks[order], pos[order]
        twice = np.unique(r[1:][(r[1:] == r[:-1]) & (b[1:] == b[:-1])])
        if len(twice):
            bad("G2", f"block tables name a block twice: {name_list(ids[i] for i in twice.tolist())}")
        expected = np.arange(len(r)) - np.searchsorted(r, r)
        gaps = np.setdiff1d(np.unique(r[p != expected]), twice)
        if len(gaps):
            bad("G1", f"block tables with gaps or repeated positions: {name_list(ids[i] for i in gaps.tolist())}")

    # --- G1 on the CPU swap pool ---------------------------------------------------------------
    def _check_cpu_pool(self, st: EngineState, bad) -> None:
        """Exactly the swapped-out requests hold CPU swap blocks."""
        seq = st.columns["seq"]
        holders = set(st.cpu_owner[st.cpu_owner >= 0].tolist())
        swapped = set(seq[st.queue_rows("swapped")].tolist())
        ids = dict(zip(seq.tolist(), st.request_ids))
        swapped -= {q for q in swapped - holders if parent_id_of(ids[q]) != ids[q]}
        if holders - swapped or swapped - holders:
            bad("G1", f"CPU swap blocks held by {name_list(sorted(holders - swapped))} (not swapped out); "
                      f"swapped out without CPU blocks: {name_list(sorted(swapped - holders))}")

    # --- G3: queues -----------------------------------------------------------------------------
    def _check_queues(self, st: EngineState, rec: StepRecord, bad) -> None:
        ids = st.request_ids
        live = set(ids)
        if len(live) != len(ids):
            bad("G3", "a live request is in the state twice")
        status = st.columns["status"]
        outside = np.flatnonzero(~np.isin(status, _LIVE_CODES))
        if len(outside):
            bad("G3", "live requests in no queue: " + name_list(
                f"{ids[i]} ({_status_name(int(status[i]))})" for i in outside.tolist()))
        counts = (len(st.queue_rows("waiting")), len(st.queue_rows("running")), len(st.queue_rows("paused")))
        if counts != (rec.num_waiting, rec.num_running, rec.num_paused):
            bad("G3", f"waiting/running/paused {counts[0]}/{counts[1]}/{counts[2]} in the state, "
                      f"{rec.num_waiting}/{rec.num_running}/{rec.num_paused} in the step's counts")
        self._finished.update(t.request_id for t in rec.transitions if t.status.startswith("FINISHED"))
        self._finished.update(ev.request_id for ev in rec.events if ev.kind in FINISH_EVENT_KINDS)
        recent = st.recently_finished
        if len(recent) > NUM_RECENTLY_FINISHED:
            bad("record", f"{len(recent)} recently finished requests kept, at most {NUM_RECENTLY_FINISHED}")
        odd = [v.request_id for v in recent if not v.is_finished or v.slot is not None]
        if odd:
            bad("G3", f"finished requests still with a slot or unfinished status: {name_list(odd)}")
        unknown = {v.request_id for v in recent} - self._finished
        if unknown:
            bad("G3", f"finished without a finishing transition or event: {name_list(sorted(unknown))}")
        back = self._finished & live
        if back:
            bad("G3", f"finished requests are live again: {name_list(sorted(back))}")
        gone = self._live - live - self._finished
        if gone:
            bad("G3", f"left the live requests without finishing: {name_list(sorted(gone))}")
        self._live = live

    # --- G4: limits -----------------------------------------------------------------------------
    def _check_limits(self, st: EngineState, rec: StepRecord, bad) -> None:
        cap = self.max_num_seqs
        slots = st.columns["slot"][st.queue_rows("running")]
        if len(slots) > cap:
            bad("G4", f"{len(slots)} running > max_num_seqs {cap}")
        if len(np.unique(slots)) != len(slots) or np.any((slots < 0) | (slots >= cap)):
            bad("G4", f"running requests' slots are not distinct slots in 0..{cap - 1}: "
                      f"{name_list(sorted(slots.tolist()))}")
        if len(rec.scheduled) > cap:
            bad("G4", f"{len(rec.scheduled)} requests scheduled > max_num_seqs {cap}")
        if rec.total_num_scheduled_tokens > self.max_num_batched_tokens:
            bad("G4", f"{rec.total_num_scheduled_tokens} tokens scheduled > max_num_batched_tokens "
                      f"{self.max_num_batched_tokens}")


def _group_shared(st: EngineState, block: int) -> bool:
    """True when every holder of ``block`` is a sequence of one parallel-sampling group."""
    seq, owner = st.columns["seq"], int(st.block_owner[block])
    holders = [owner, *st.shared_seq[st.shared_block == block].tolist()]
    rows, ok = _rows_of(seq, np.asarray(holders, np.int64))
    ids = [st.request_ids[r] for r in rows[ok].tolist()]
    parents = {parent_id_of(rid) for rid in ids}
    return bool(ok.all()) and len(parents) == 1 and all(rid != parent_id_of(rid) for rid in ids)


def _rows_of(seq: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the arrival numbers ``wanted`` in the sorted ``seq`` column, and which were found."""
    if not len(seq):
        return np.zeros(len(wanted), np.int64), np.zeros(len(wanted), bool)
    rows = np.minimum(np.searchsorted(seq, wanted), len(seq) - 1)
    return rows, seq[rows] == wanted


def _status_name(code: int) -> str:
    return STATUS_CODES[code] if 0 <= code < len(STATUS_CODES) else f"status code {code}"


# --- recordings ---------------------------------------------------------------------------------
def check_recording(reader, *, max_problems: int = 100,
                    on_step: Callable[[int], None] | None = None, fast: bool | None = None) -> list[Problem]:
    """Replay every step of the recording open in ``reader`` (a ``recordings.file.reader.Reader``) and check
    G1-G4 on each state and G6 on the last one if every recorded request finished.

    The states are rebuilt from the steps' rows (the deltas) from the first keyframe on, as a
    replay does, with the limits of the run's stored config. Stops after ``max_problems``
    problems (the last one then says so). A record the state cannot take (it names a request
    that is not live, an unknown block) ends the check with a ``record`` problem at its step.
    ``on_step(step)`` (a progress bar, say) is called after each step is checked, once per step.
    A schema-4 file is checked on the fast path of ``recordings.check.stream_check`` (every
    invariant on every step, incrementally), which hands the steps from its last checkpoint
    before the first step it cannot call clean to the reference path below (``StateTimeline``
    replay + :class:`StateChecker` on every state): the problems are the reference's either way.
    ``fast=False`` runs the reference path alone; ``fast=None`` (default) the fast path when SQLite's
    ``quick_check`` finds the file's pages intact (a damaged page read by one path and not the
    other would make them differ), ``fast=True`` without asking (the caller checked the file).
    Raises :class:`recordings.errors.RecordingError` if the file cannot be read.
    """
    config = reader.run_info().config
    missing = [k for k in ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens") if config.get(k) is None]
    if missing:
        return [Problem(-1, "record", f"the run's config lacks {', '.join(missing)}: nothing to check against")]
    seen = [-1]

    def once(step: int) -> None:          # a re-check from a checkpoint reports no step twice
        if step > seen[0]:
            seen[0] = step
            on_step(step)
    progress = None if on_step is None else once
    if fast is None:
        fast = _intact(reader)
    if not fast or getattr(reader, "_version", 0) < 4 or type(reader).records is not _reader_type().records:
        return check_states(reader, StateChecker(config), replayed_states(reader), max_problems, progress)
    from recordings.check import stream_check

    step, snap, clean = stream_check.replay_fast(reader, config, progress)
    if snap is None:
        return check_states(reader, StateChecker(config), replayed_states(reader), max_problems, progress)
    layout = (int(config["num_gpu_blocks"]), reader.state_at(-1).block_size, snap["knobs"][0])
    state = stream_check.engine_state(snap, step, layout, lambda seqs: _ids_of(reader, seqs))
    if clean:
        if all_finished(reader):
            return StateChecker(config).check_drained(state, reader.records(step, step + 1)[0])
        return []
    checker = seeded_checker(reader, config, state, snap["knobs"], snap["extra_by_block"])
    return check_states(reader, checker, replayed_states(reader, state), max_problems, progress)


def _intact(reader) -> bool:
    """Whether SQLite's ``quick_check`` finds every page of the file sound."""
    from recordings.errors import RecordingError
    try:
        return reader.execute("PRAGMA quick_check(1)") == [("ok",)]
    except RecordingError:
        return False


def _reader_type():
    from recordings.file.reader import Reader
    return Reader


def check_states(reader, checker: StateChecker, states, max_problems: int,
                 on_step: Callable[[int], None] | None, *, drained_at: int | None = None) -> list[Problem]:
    """Check each (state, record) of ``states`` with ``checker``: the first ``Problem`` the replay
    yields ends it; after ``max_problems`` problems the last one says it stopped (a ``record``
    problem "stopped after N problems"). G6 (drained) on the last state when every request
    finished and, if ``drained_at`` is given, the last state is that step."""
    problems: list[Problem] = []
    last: tuple[EngineState, StepRecord] | None = None
    for item in states:
        if isinstance(item, Problem):
            problems.append(item)
            return problems
        last = item
        problems += checker.check_step(*item)
        if on_step is not None:
            on_step(item[1].step)
        if len(problems) >= max_problems:
            problems = problems[:max_problems]
            problems.append(Problem(item[1].step, "record", stopped_after(max_problems)))
            return problems
    if (last is not None and (drained_at is None or last[1].step == drained_at)
            and all_finished(reader)):
        problems += checker.check_drained(*last)
    return problems


def stopped_after(max_problems: int) -> str:
    """The detail of the problem that ends a check cut short at ``max_problems``."""
    return f"stopped after {max_problems} problems"


def _ids_of(reader, seqs: np.ndarray) -> list[str]:
    """The request ids of the arrival numbers ``seqs``. Raises ``KeyError`` for a missing one."""
    if not len(seqs):
        return []
    names = dict(reader.execute("SELECT seq, request_id FROM requests WHERE seq BETWEEN ? AND ?",
                                (int(seqs.min()), int(seqs.max()))))
    return [names[s] for s in seqs.tolist()]


def seeded_checker(reader, config, state: EngineState, knobs: tuple[int, int] | None = None,
                   extra_by_block: dict[int, list[int]] | None = None) -> StateChecker:
    """A :class:`StateChecker` as it is after checking the steps up to ``state.step`` of a clean
    run whose state then is ``state`` (a state of the recording open in ``reader``): the requests
    finished so far (from the file's transitions and events), the live ones, every block's holders
    (owner first, then the further holders: in the order they came when ``extra_by_block`` gives
    it, else by arrival) and the live knobs (``knobs``: (max_num_seqs, max_num_batched_tokens), else
    the config's changed by the knob changes recorded up to then)."""
    step = state.step
    checker = StateChecker(config)
    if knobs is None:
        for (text,) in reader.execute("SELECT knobs_json FROM steps WHERE step <= ? AND knobs_json IS NOT NULL "
                                      "ORDER BY step", (step,)):
            for name, value in codec_knobs(text):
                if name in ("max_num_seqs", "max_num_batched_tokens"):
                    setattr(checker, name, int(value))
    else:
        checker.max_num_seqs, checker.max_num_batched_tokens = knobs
    kinds = ", ".join(f"'{k}'" for k in FINISH_EVENT_KINDS)
    checker._finished = {rid for (rid,) in reader.execute(
        "SELECT request_id FROM requests WHERE seq IN (SELECT seq FROM transitions WHERE step <= ? AND "
        f"substr(status, 1, 8) = 'FINISHED' UNION SELECT seq FROM events WHERE step <= ? AND kind IN ({kinds}))",
        (step, step))}
    checker._live = set(state.request_ids)
    ids = dict(zip(state.columns["seq"].tolist(), state.request_ids))
    if extra_by_block is None:
        extra_by_block = {}
        for q, b in zip(state.shared_seq.tolist(), state.shared_block.tolist()):
            extra_by_block.setdefault(b, []).append(q)
    owner = state.block_owner
    checker._holders = {b: [ids[s]] + [ids[x] for x in extra_by_block.get(b, ())]
                        for b, s in zip(np.flatnonzero(owner >= 0).tolist(), owner[owner >= 0].tolist())}
    return checker


def codec_knobs(text: str | None):
    """A step's knob changes from its ``knobs_json``."""
    from recordings.file.codec import knobs_from_json
    return knobs_from_json(text)


def replayed_states(reader, start: EngineState | None = None,
                    stop: int | None = None) -> Iterator[tuple[EngineState, StepRecord] | Problem]:
    """(state after step k, record of step k) for every step in order, or a final ``Problem``
    where the records cannot be replayed; from ``start`` (a state of a step of this file) when
    given, else from the first keyframe; up to the step before ``stop`` when given."""
    from engine.state.timeline import StateTimeline
    from recordings.errors import RecordingError
    from recordings.file.v1_reader import V1Reader

    latest = reader.latest_step() if stop is None else min(reader.latest_step(), stop - 1)
    if isinstance(reader, V1Reader):        # v1 stored states, not replayable deltas
        for k in range(latest + 1):
            yield reader.state_at(k), reader.records(k, k + 1)[0]
        return
    timeline = StateTimeline.from_state(reader.state_at(-1) if start is None else start)
    for lo in range(timeline.step + 1, latest + 1, CHUNK_STEPS):
        try:
            records = reader.records(lo, min(lo + CHUNK_STEPS, latest + 1))
        except RecordingError:           # find the step whose rows do not decode
            records = []
            for k in range(lo, min(lo + CHUNK_STEPS, latest + 1)):
                try:
                    records += reader.records(k, k + 1)
                except RecordingError as e:
                    records.append(Problem(k, "record", f"the step's rows do not decode: {e}"))
                    break
        for rec in records:
            if isinstance(rec, Problem):
                yield rec
                return
            if rec.step != timeline.step + 1:
                yield Problem(rec.step, "record", f"step {timeline.step + 1} is missing")
                return
            try:
                timeline.apply(rec)
                state = timeline.snapshot()
            except (KeyError, ValueError, IndexError, TypeError, AttributeError, OverflowError,
                    RecursionError) as e:                                          # a damaged row
                yield Problem(rec.step, "record", f"the step cannot be replayed: {type(e).__name__}: {e}")
                return
            yield state, rec


def all_finished(reader) -> bool:
    """Whether the recording holds requests and every one of them finished (then G6 applies)."""
    (num, unfinished), = reader.execute(
        "SELECT count(*), coalesce(sum(coalesce(status, '') NOT LIKE 'FINISHED%'), 0) FROM requests")
    return num > 0 and unfinished == 0
