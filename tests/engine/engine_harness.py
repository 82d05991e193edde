"""Drive an ``LLMEngine`` through a workload step by step and check the global invariants of
``../shared/cases/README.md`` (G1-G6) after every step; compare outputs with a reference (G7).

A workload is a list of :class:`Arrival` (added just before step ``arrive_step`` is scheduled, in
list order, as the cases README defines) and :class:`Action` (abort / pause / resume applied just
before step ``step``). Paused requests are held by the user: G5 (liveness) is required of waiting
and running requests only.

The engine holds live requests only: a finished request leaves ``engine.requests`` and is handed
once to ``engine.on_finished``, where the harness collects it (``RunResult.requests`` holds every
request of the run, in arrival order). After every step the harness also rebuilds the state from
the step records alone (a :class:`StateTimeline` fed only the records, as a replay does) and the
block tables from the records' block events, and checks both against the engine's truth.

With ``record_to`` a run is also recorded (``recordings.RecordingWriter``); then
:func:`assert_recording_matches` reads the file back and checks that it replays the live run step
by step and that the state-level invariants hold again on the states read from it.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.preemption import FOR_PRIORITY, preemption_info
from engine.outputs import (BLOCKS_ALLOCATED, BLOCKS_CACHED, BLOCKS_EVICTED, BLOCKS_FREED,
                            BLOCKS_HIT, BLOCKS_SWAPPED_IN, BLOCKS_SWAPPED_OUT,
                            NOT_ADMITTED_SWAPPED_FIRST, NOT_ADMITTED_BEHIND, NOT_ADMITTED_LOWER_PRIORITY,
                            NOT_ADMITTED_STATIC_BATCH,
                            NOT_ADMITTED_NO_FREE_BLOCKS, NOT_ADMITTED_SEQ_CAP,
                            NOT_ADMITTED_TOKEN_BUDGET, NewToken, StepRecord)
from engine.request import Request, RequestStatus, SamplingParams
from engine.state import EngineState
from engine.timeline import StateTimeline
from recordings.checks import StateChecker, check_recording
from fake_runner import FakeRunner, hash_next_token

ACTIONS = ("abort", "pause", "resume")
FINISH_EVENTS = ("finished", "aborted", "failed", "rejected")
WALL_TIME_FIELDS = ("start_ns", "end_ns", "schedule_ns", "forward_ns", "update_ns", "recorder_wait_ns")


@dataclass(frozen=True)
class Arrival:
    request_id: str
    arrive_step: int
    prompt: tuple[int, ...]
    params: SamplingParams


@dataclass(frozen=True)
class Action:
    step: int
    kind: str            # one of ACTIONS
    request_id: str


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def is_impossible(config: EngineConfig, num_blocks: int, prompt_len: int, max_tokens: int) -> bool:
    """The documented admission rule, restated independently of the scheduler's code."""
    return (prompt_len == 0 or max_tokens < 1 or prompt_len + max_tokens > config.max_model_len
            or blocks_for(prompt_len + max_tokens, config.block_size) > num_blocks)


def without_wall_times(rec: StepRecord) -> StepRecord:
    """``rec`` with its wall-clock ``*_ns`` fields zeroed (what two identical runs must share)."""
    return dataclasses.replace(rec, **{k: 0 for k in WALL_TIME_FIELDS})


@dataclass
class RunResult:
    engine: LLMEngine
    runner: object
    records: list[StepRecord]
    action_results: list[tuple[Action, bool]]
    streamed: dict[str, list[NewToken]]
    rejected: set[str]
    states: list[EngineState] = field(default_factory=list)   # live state after each step
    recording: Path | None = None                             # the file, if recorded
    all_requests: dict[str, Request] = field(default_factory=dict)

    @property
    def requests(self) -> dict[str, Request]:
        """Every request of the run (live ones and those handed to ``on_finished``), arrival order."""
        return self.all_requests

    def outputs(self) -> dict[str, list[int]]:
        return {rid: list(r.output_token_ids) for rid, r in self.requests.items()}

    def scheduled_steps(self, request_id: str) -> list[int]:
        return [r.step for r in self.records if any(s.request_id == request_id for s in r.scheduled)]

    def finish_step(self, request_id: str) -> int | None:
        for r in self.records:
            if any(e.request_id == request_id and e.kind in FINISH_EVENTS for e in r.events):
                return r.step
        return None

    def token_steps(self, request_id: str) -> list[int]:
        return [r.step for r in self.records for t in r.new_tokens if t.request_id == request_id]

    @property
    def num_preemptions(self) -> int:
        return sum(r.num_preemptions for r in self.records)


def assert_no_problems(problems) -> None:
    """Fail with one line per invariant violated (``recordings.checks.Problem``)."""
    assert not problems, "\n".join(map(str, problems))


def view_values(v) -> tuple:
    """What a state shows of a request, to compare with the engine's :class:`Request`."""
    return (v.status, v.num_prompt_tokens, v.num_output_tokens, v.num_computed_tokens, v.slot,
            v.num_preemptions, v.max_tokens)


def request_values(r: Request) -> tuple:
    return (r.status.value, r.num_prompt_tokens, r.num_output_tokens, r.num_computed_tokens, r.slot,
            r.num_preemptions, r.sampling_params.max_tokens)


def assert_state_matches_scheduler(engine: LLMEngine, st: EngineState) -> None:
    """The published state (also between steps, with pending user actions) shows exactly the
    scheduler's live requests, in arrival order, with their values and block tables."""
    s = engine.scheduler
    assert set(st.request_ids) == set(s.requests), (st.request_ids, list(s.requests))
    for rid, req in s.requests.items():
        v = st.view(rid)
        assert view_values(v) == request_values(req), f"stale view of {rid}: {v} vs {req.status}"
        assert v.arrival_time == req.arrival_time and v.arrival_step == req.arrival_step, rid
        assert st.block_ids(rid) == tuple(s.kv.block_ids(rid)), f"stale block table of {rid}"
    assert st.num_used_blocks == s.kv.num_blocks - s.kv.num_free_blocks


class InvariantChecker:
    """Checks G1-G6 around every step of one engine (raises ``AssertionError``), collects the
    requests the engine hands to ``on_finished`` and replays the step records."""

    def __init__(self, engine: LLMEngine, runner) -> None:
        self.e = engine
        self.runner = runner
        self.c = engine.config
        self.finished: dict[str, RequestStatus] = {}
        self.rejected: set[str] = set()
        self.streamed: dict[str, list[NewToken]] = defaultdict(list)
        self.idle_steps = 0
        self.pre: dict = {}
        self.states: list[EngineState] = []
        self.last_rec: StepRecord | None = None
        self.state_checker = StateChecker(engine.config.to_dict() | {"num_gpu_blocks": engine.num_gpu_blocks})
        self.order: list[str] = []                       # every request id, arrival order
        self.objs: dict[str, Request] = {}               # every Request seen (live or finished)
        self.delivered: dict[str, Request] = {}          # handed to on_finished, in that order
        self.delivered_now: list[str] = []
        self.tables: dict[str, list[int]] = {}           # block tables rebuilt from block events
        self.cpu_tables: dict[str, list[int]] = {}       # CPU swap tables rebuilt from block events
        self.tags: dict[int, tuple[int, int]] = {}       # block -> (prefix hash, step it was cached)
        c = engine.config
        self.replay = StateTimeline(engine.num_gpu_blocks, c.block_size, c.max_num_seqs, c.num_cpu_blocks)
        assert engine.timeline.snapshot() == self.replay.snapshot()
        assert engine.on_finished is None
        engine.on_finished = self.on_finished

    def all_requests(self) -> dict[str, Request]:
        return {rid: self.objs[rid] for rid in self.order if rid in self.objs}

    def on_finished(self, req: Request) -> None:
        rid = req.request_id
        assert req.is_finished, (rid, req.status)
        assert rid not in self.delivered, f"{rid} handed to on_finished twice"
        assert rid not in self.e.requests and rid not in self.e.scheduler.requests, f"finished {rid} still live"
        assert self.objs.setdefault(rid, req) is req, f"{rid}: another Request object"
        self.delivered[rid] = req
        self.delivered_now.append(rid)

    # --- around admissions and user actions -------------------------------------------------
    def after_add(self, a: Arrival) -> None:
        rid = a.request_id
        self.order.append(rid)
        req = self.e.requests.get(rid)
        st = self.e.state()
        v = st.view(rid)
        if req is None:
            assert is_impossible(self.c, self.e.num_gpu_blocks, len(a.prompt), a.params.max_tokens), rid
            # G5: a request that can never run is failed at once with an error, not left waiting.
            assert v.status == RequestStatus.FINISHED_ERROR.value and v.error, (rid, v)
            assert not self.e.scheduler.kv.block_ids(rid) and st.block_ids(rid) == ()
            self.rejected.add(rid)
            self.finished[rid] = RequestStatus.FINISHED_ERROR
        else:
            assert not is_impossible(self.c, self.e.num_gpu_blocks, req.num_prompt_tokens,
                                     req.sampling_params.max_tokens), rid
            assert req.status is RequestStatus.WAITING and v.status == "WAITING", (rid, req.status, req.error)
            self.objs[rid] = req
        assert_state_matches_scheduler(self.e, st)

    def after_action(self, act: "Action", ok: bool) -> None:
        if act.kind == "abort" and ok:
            self.finished[act.request_id] = RequestStatus.FINISHED_ABORTED
            assert act.request_id not in self.e.requests
            v = self.e.state().view(act.request_id)
            assert v.status == RequestStatus.FINISHED_ABORTED.value and v.slot is None
            assert self.e.state().block_ids(act.request_id) == ()
        assert_state_matches_scheduler(self.e, self.e.state())

    # --- around a step ----------------------------------------------------------------------
    def before_step(self) -> None:
        s = self.e.scheduler
        kv = s.kv
        self.pre = dict(
            running=[r.request_id for r in s.running],
            waiting=[r.request_id for r in s.waiting],
            paused=[r.request_id for r in s.paused],
            swapped=[r.request_id for r in s.swapped],
            blocks={r.request_id: list(kv.block_ids(r.request_id)) for r in s.live_requests()},
            free=kv.num_free_blocks,
            num_tokens={r.request_id: r.num_tokens for r in s.live_requests()},
            is_prefill={r.request_id: r.is_prefill for r in s.live_requests()},
            num_computed={r.request_id: r.num_computed_tokens for r in s.live_requests()},
            num_output={r.request_id: r.num_output_tokens for r in s.live_requests()},
            num_pending_block_events=len(kv.events),
        )
        self.delivered_now = []

    def _replay_block_events(self, rec: StepRecord):
        """Apply the record's block events to the tables (and cache tags) rebuilt so far, checking
        each against what came before. Returns the blocks each request got by the step itself
        (allocated or shared by a hit; not changes made between steps), the blocks shared by
        hits, and the number of distinct blocks held when the scheduler decided (before the
        update's events: cached tags and frees of requests finishing in the step)."""
        step_alloc: dict[str, list[int]] = defaultdict(list)
        step_hit: dict[str, list[int]] = defaultdict(list)
        finishing = {ev.request_id for ev in rec.events if ev.kind in FINISH_EVENTS}
        held_at_decision = None
        for i, ev in enumerate(rec.block_events):
            assert ev.block_ids, ev
            in_step = i >= self.pre["num_pending_block_events"]
            held = {b for t in self.tables.values() for b in t}
            if held_at_decision is None and in_step and (
                    ev.kind == BLOCKS_CACHED or (ev.kind == BLOCKS_FREED and ev.request_id in finishing)):
                held_at_decision = len(held)
            if ev.kind == BLOCKS_ALLOCATED:
                assert not set(ev.block_ids) & held, ("allocated a held block", ev)
                assert not any(self.tags.get(b) for b in ev.block_ids), ("allocated a cached block unevicted", ev)
                self.tables.setdefault(ev.request_id, []).extend(ev.block_ids)
                if in_step:
                    step_alloc[ev.request_id].extend(ev.block_ids)
            elif ev.kind == BLOCKS_HIT:
                assert self.c.enable_prefix_caching and in_step, ev
                assert not self.tables.get(ev.request_id), ("a hit into a table that holds blocks", ev)
                for b in ev.block_ids:
                    tag, step = self.tags.get(b, (0, None))
                    # a hit only on blocks whose KV a completed (earlier) step wrote
                    assert tag and step < rec.step, ("hit on a block not cached in an earlier step", ev)
                self.tables[ev.request_id] = list(ev.block_ids)
                step_alloc[ev.request_id].extend(ev.block_ids)
                step_hit[ev.request_id].extend(ev.block_ids)
            elif ev.kind == BLOCKS_CACHED:
                assert self.c.enable_prefix_caching and len(ev.block_hashes) == len(ev.block_ids), ev
                table = self.tables.get(ev.request_id, [])
                for b, h in zip(ev.block_ids, ev.block_hashes):
                    assert b in table and not self.tags.get(b) and h, ("cached a block not held or tagged", ev)
                    self.tags[b] = (h, rec.step)
                tagged = [h for h, _ in self.tags.values()]
                assert len(tagged) == len(set(tagged)), "two blocks cache one hash"
            elif ev.kind == BLOCKS_EVICTED:
                for b in ev.block_ids:
                    assert b not in held and self.tags.pop(b, None), ("evicted a held or untagged block", ev)
            elif ev.kind == BLOCKS_SWAPPED_OUT:          # right after the GPU table's free event
                assert self.c.preemption_mode == "swap" and in_step, ev
                assert ev.request_id not in self.tables and ev.request_id not in self.cpu_tables, ev
                assert not set(ev.block_ids) & {b for t in self.cpu_tables.values() for b in t}, (
                    "swapped out into a CPU block that is held", ev)
                assert len(ev.block_ids) == blocks_for(self.pre["num_computed"][ev.request_id],
                                                       self.c.block_size), (
                    "a swap-out copies the blocks of the request's computed KV", ev)
                self.cpu_tables[ev.request_id] = list(ev.block_ids)
            elif ev.kind == BLOCKS_SWAPPED_IN:
                assert list(ev.block_ids) == self.cpu_tables.pop(ev.request_id, None), (
                    "a swap-in names other CPU blocks than the request's", ev)
            else:
                assert ev.kind == BLOCKS_FREED, ev
                assert list(ev.block_ids) == self.tables.pop(ev.request_id, None), (
                    "a free event names other blocks than the whole table", ev)
        if held_at_decision is None:
            held_at_decision = len({b for t in self.tables.values() for b in t})
        owners = [b for t in self.tables.values() for b in t]
        if not self.c.enable_prefix_caching:
            assert len(owners) == len(set(owners)), "block events hand one block to two requests"
        for b in set(owners):
            if owners.count(b) > 1:
                assert self.tags.get(b), f"block {b} is shared but caches no prefix"
        return step_alloc, step_hit, held_at_decision

    def after_step(self, rec: StepRecord) -> None:
        e, c, s, pre = self.e, self.c, self.e.scheduler, self.pre
        kv = s.kv
        bs = c.block_size
        sched_ids = [x.request_id for x in rec.scheduled]

        # G1 / G2 / G3 / G4 (slots) as the scheduler states them ...
        s.check_invariants()
        if isinstance(self.runner, FakeRunner):
            # Each hash -> block entry names a block whose tokens -- in the fake runner's paged
            # cache, the truth -- hash to it: a stale entry would name other content.
            kv.check_invariants(lambda b: self.runner.cache[b])
        e.check_state()
        # ... and again from what the UI and the recording see (EngineState, StepRecord).
        st = e.state()
        assert_no_problems(self.state_checker.check_step(st, rec))
        assert_state_matches_scheduler(e, st)
        self.states.append(st)
        self.last_rec = rec
        # Round trip: the state rebuilt from the step records alone is the live state.
        self.replay.apply(rec)
        assert self.replay.snapshot() == st, f"state replayed from the records differs at step {rec.step}"

        # Finished requests left the engine and were handed over once, each with its final view.
        finished_ids = [ev.request_id for ev in rec.events if ev.kind in FINISH_EVENTS]
        assert len(set(finished_ids)) == len(finished_ids)
        assert sorted(self.delivered_now) == sorted(finished_ids), (self.delivered_now, finished_ids)
        assert rec.num_finished == s.num_finished == len(self.delivered)
        for rid in finished_ids:
            req = self.delivered[rid]
            assert rid not in e.requests and rid not in st.request_ids and req.slot is None
            v = st.view(rid)
            assert view_values(v) == request_values(req) and v.error == req.error, (rid, v, req)
            assert v.finish_reason == req.finish_reason.value and req.finished_time is not None
            assert req.num_output_tokens <= req.sampling_params.max_tokens
            if req.status is RequestStatus.FINISHED_LENGTH:
                assert req.num_output_tokens == req.sampling_params.max_tokens
        for rid, req in e.requests.items():
            assert not req.is_finished and self.objs[rid] is req
            # Each live request holds exactly the blocks its computed KV needs (no leak, no lack).
            held = (kv.block_ids(rid) if req.status is not RequestStatus.SWAPPED
                    else e.scheduler.swap.tables[rid])
            assert len(held) == blocks_for(req.num_computed_tokens, bs), (rid, req.num_computed_tokens, held)
            assert req.num_output_tokens < req.sampling_params.max_tokens

        # G3: a finished request never comes back, and is never scheduled again.
        for rid, status in self.finished.items():
            assert rid not in e.requests and rid not in st.request_ids, f"G3: finished {rid} is live again"
            if rid in self.delivered:
                assert self.delivered[rid].status is status, f"G3: finished {rid} changed status"
            assert rid not in sched_ids, f"G3: finished {rid} scheduled"
        for rid, req in self.delivered.items():
            self.finished.setdefault(rid, req.status)
            assert req.status is self.finished[rid]

        # G4: limits.
        assert rec.num_running <= c.max_num_seqs, "G4: running > max_num_seqs"
        assert len(rec.scheduled) <= c.max_num_seqs, "G4: scheduled > max_num_seqs"
        assert rec.num_scheduled_tokens <= c.max_num_batched_tokens, "G4: token budget exceeded"
        assert len(set(sched_ids)) == len(sched_ids)
        slots = [x.slot for x in rec.scheduled]
        assert len(set(slots)) == len(slots) and all(0 <= x < c.max_num_seqs for x in slots), slots

        # Block events rebuild the block tables exactly; during the step a table only grows at
        # its end, by the blocks the step's scheduled chunk needs.
        step_alloc, step_hit, held_at_decision = self._replay_block_events(rec)
        assert self.tables == {rid: t for rid, t in kv.block_tables.items() if t}, "block events vs tables"
        # (a request preempted for priority may have been given this step's blocks first)
        assert set(step_alloc) <= set(sched_ids) | set(rec.preempted_ids), (
            "blocks allocated to an unscheduled request", step_alloc)
        for x in rec.scheduled:
            assert x.num_tokens >= 1
            if x.num_computed_tokens == pre["num_computed"][x.request_id]:
                assert x.is_prefill == pre["is_prefill"][x.request_id], ("is_prefill", x)
            else:   # admitted after a prefix-cache hit: a decode if only the last token is left
                assert c.enable_prefix_caching and x.num_computed_tokens % bs == 0, x
                assert pre["num_computed"][x.request_id] == 0 and x.request_id in step_hit, x
                assert x.num_computed_tokens == len(step_hit[x.request_id]) * bs, (x, step_hit)
                assert x.num_computed_tokens <= pre["num_tokens"][x.request_id] - 1, ("full hit computes nothing", x)
                last_only = pre["num_output"][x.request_id] and x.num_computed_tokens == pre["num_tokens"][x.request_id] - 1
                assert x.is_prefill == (not last_only), ("is_prefill", x)
            if not c.enable_chunked_prefill:
                # the whole prompt (after its prefix-cache hit, if any) in one step
                assert x.num_tokens == 1 or (
                    x.num_computed_tokens == len(step_hit.get(x.request_id, ())) * bs
                    and x.num_computed_tokens + x.num_tokens == pre["num_tokens"][x.request_id]), (
                    "prefill split without chunked prefill", x)
            elif c.long_prefill_token_threshold and x.num_tokens > 1:
                assert x.num_tokens <= c.long_prefill_token_threshold, ("long prefill cap", x)
            table = pre["blocks"].get(x.request_id, []) + step_alloc.get(x.request_id, [])
            assert len(table) == blocks_for(x.num_computed_tokens + x.num_tokens, bs), (x, table)
            if x.request_id in e.requests:
                assert kv.block_ids(x.request_id) == table, (x, table)
            else:      # finished in the step: its free event named exactly this table
                assert any(ev.kind == BLOCKS_FREED and ev.request_id == x.request_id
                           and list(ev.block_ids) == table for ev in rec.block_events), x

        # Preemption: only requests running (or parked with KV) at the start of the step, once each;
        # nothing is admitted in a step that preempted; each preemption frees what it held.
        pre_ids = set(pre["running"]) | set(pre["paused"])
        assert len(set(rec.preempted_ids)) == len(rec.preempted_ids), rec.preempted_ids
        assert sorted(rec.preempted_ids) == sorted(ev.request_id for ev in rec.events if ev.kind == "preempted")
        swapped_out = {ev.request_id for ev in rec.block_events if ev.kind == BLOCKS_SWAPPED_OUT}
        for rid in rec.preempted_ids:
            assert rid in pre_ids, f"preempted {rid} was not running at the start of step {rec.step}"
            assert pre["blocks"][rid], f"preempted {rid} held no KV"
            assert rid not in sched_ids
            assert not kv.block_ids(rid)
            info = preemption_info(next(ev.detail for ev in rec.events
                                        if ev.kind == "preempted" and ev.request_id == rid))
            if rid in swapped_out:      # swap keeps the progress; recompute starts over
                assert info.mode == "swap" and e.requests[rid].status is RequestStatus.SWAPPED
                assert e.requests[rid].num_computed_tokens == pre["num_computed"][rid] == info.num_tokens
            else:
                assert e.requests[rid].num_computed_tokens == 0
                assert info.mode == ("recompute_fallback" if c.preemption_mode == "swap"
                                     and rid in pre["running"] and info.num_tokens else "recompute"), info
                if info.mode == "recompute_fallback":   # only when the CPU pool had no room
                    assert s.swap.pool.num_free_blocks < blocks_for(info.num_tokens, bs) + sum(
                        len(t) for r, t in self.cpu_tables.items() if r in swapped_out), info
        # Swap-ins: the oldest swapped-out requests, in order, before any admission.
        swapped_in = [rid for rid in sched_ids if rid in pre["swapped"]]
        assert swapped_in == pre["swapped"][:len(swapped_in)], ("swap-in out of FIFO order", swapped_in)
        if swapped_in:
            assert not rec.preempted_ids, "swapped in during a step that preempted"
        admitted = [rid for rid in sched_ids if rid not in pre["running"] and rid not in pre["swapped"]]
        assert admitted == pre["waiting"][:len(admitted)], ("FCFS admission order", admitted, pre["waiting"])
        reasons = {preemption_info(ev.detail).reason for ev in rec.events if ev.kind == "preempted"}
        if reasons - {FOR_PRIORITY}:
            assert not admitted, "admitted a request in a step that preempted one for memory"
        # swapped-out requests first: no admission in a step that began with some or swapped
        # one out for memory (a priority preemption swaps out to admit)
        swapped_first = bool(pre["swapped"]) or any(
            reason != FOR_PRIORITY for rid in swapped_out
            for reason in [preemption_info(next(ev.detail for ev in rec.events if ev.kind == "preempted"
                                                and ev.request_id == rid)).reason])
        if swapped_first:
            assert not admitted, "admitted a request in a step that began with swapped-out ones"
        if FOR_PRIORITY in reasons:       # made room for the first waiting request, which started
            assert c.policy == "priority" and admitted, ("priority preemption admitted nobody", rec)

        # Exact block accounting over the step (G1 per step): what was allocated, what preemption
        # released (exactly the victims' tables) and what finishing requests released.
        finished_now = [rid for rid in pre["blocks"] if rid in finished_ids]
        freed = sum(len(pre["blocks"][rid]) + len(step_alloc.get(rid, [])) for rid in rec.preempted_ids)
        freed += sum(len(pre["blocks"][rid]) + len(step_alloc.get(rid, [])) for rid in finished_now)
        allocated = sum(len(b) for b in step_alloc.values())
        distinct_held = len({b for t in self.tables.values() for b in t})
        assert kv.num_free_blocks == e.num_gpu_blocks - distinct_held == rec.num_free_blocks, (
            "G1: blocks appeared or vanished")
        if not c.enable_prefix_caching:     # no sharing: exact per-step accounting
            assert kv.num_free_blocks == pre["free"] - allocated + freed, "G1: blocks appeared or vanished"

        # Why waiting requests were not admitted: the first one is listed with a true reason,
        # everyone behind it is implicitly behind an older request.
        waiting_now = [r.request_id for r in s.waiting]
        prio = {rid: r.priority for rid, r in e.requests.items()}.get
        if swapped_first:
            assert rec.waiting_reason == NOT_ADMITTED_SWAPPED_FIRST
            assert rec.not_admitted == tuple((r, NOT_ADMITTED_SWAPPED_FIRST) for r in waiting_now[:1])
            assert all(rec.not_admitted_reason(r) == NOT_ADMITTED_SWAPPED_FIRST for r in waiting_now)
        elif c.policy == "static":
            # The blocked head and the batch's other waiting members are listed; everyone else
            # waits for the static batch to finish.
            listed = dict(rec.not_admitted)
            for rid in waiting_now:
                if rid in listed and listed[rid] != NOT_ADMITTED_STATIC_BATCH:
                    assert rid in s.static_batch, (rid, "listed but not a member of the batch")
                elif rid not in listed:
                    assert rec.not_admitted_reason(rid) == NOT_ADMITTED_STATIC_BATCH, rid
            assert len(s.static_batch) <= c.max_num_seqs
            assert all(rid in s.static_batch or rid not in e.requests for rid in admitted), (
                "static admitted a request outside its batch")
        else:
            assert [rid for rid, _ in rec.not_admitted] == waiting_now[:1], (rec.not_admitted, waiting_now)
            for rid in waiting_now[1:]:
                lower = c.policy == "priority" and prio(rid) > prio(waiting_now[0])
                assert rec.not_admitted_reason(rid, prio) == (
                    NOT_ADMITTED_LOWER_PRIORITY if lower else NOT_ADMITTED_BEHIND), rid
        if rec.not_admitted and rec.not_admitted[0][1] not in (
                NOT_ADMITTED_STATIC_BATCH, NOT_ADMITTED_BEHIND, NOT_ADMITTED_SWAPPED_FIRST):
            head, reason = rec.not_admitted[0]
            assert rec.not_admitted_reason(head) == reason
            running_at_decision = (len([r for r in pre["running"] if r not in rec.preempted_ids])
                                   + len(admitted))
            left = c.max_num_batched_tokens - rec.num_scheduled_tokens
            free_at_decision = e.num_gpu_blocks - held_at_decision
            if reason == NOT_ADMITTED_SEQ_CAP:
                assert running_at_decision == c.max_num_seqs
            elif reason == NOT_ADMITTED_TOKEN_BUDGET:
                assert left == 0 or (not c.enable_chunked_prefill and left < e.requests[head].num_tokens)
            elif reason == NOT_ADMITTED_NO_FREE_BLOCKS:
                # (with prefix caching it may have needed fewer: at most all its blocks)
                assert rec.preempted_ids or blocks_for(e.requests[head].num_tokens, bs) > free_at_decision
            elif reason == NOT_ADMITTED_LOWER_PRIORITY:      # displaced in this very step
                assert c.policy == "priority" and head in rec.preempted_ids
            else:
                raise AssertionError(f"unknown or misplaced reason {reason!r}")

        # G5 liveness: with waiting or running work, something computes or changes state at
        # least once every 2 steps; nobody waits who can never run.
        progress = rec.num_scheduled_tokens > 0 or any(ev.kind != "arrived" for ev in rec.events)
        if pre["running"] or pre["waiting"]:
            self.idle_steps = 0 if progress else self.idle_steps + 1
            assert self.idle_steps < 2, f"G5: no progress for {self.idle_steps} steps at step {rec.step}"
        for r in s.waiting:
            assert not is_impossible(c, e.num_gpu_blocks, r.num_prompt_tokens, r.sampling_params.max_tokens)

        # Streamed tokens: one per request per step, indexed in order.
        got = [t.request_id for t in rec.new_tokens]
        assert len(set(got)) == len(got)
        for t in rec.new_tokens:
            assert t.index == len(self.streamed[t.request_id]), t
            self.streamed[t.request_id].append(t)
        # A failed forward pass fails exactly the step's requests, with its error; nothing else fails.
        failed = {ev.request_id for ev in rec.events if ev.kind == "failed"}
        if rec.error:
            assert failed == set(sched_ids) and not rec.new_tokens, (rec.error, failed, sched_ids)
            assert all(self.delivered[rid].error == rec.error for rid in failed)
        else:
            assert not failed, failed

    def at_end(self) -> None:
        """G6 drain and the bookkeeping that must balance once every request finished."""
        e = self.e
        kv = e.scheduler.kv
        assert not e.requests, f"never finished: {list(e.requests)}"
        assert set(self.delivered) == set(self.order) == set(self.objs), "a request was never handed over"
        for rid, req in self.delivered.items():
            assert [t.token_id for t in self.streamed[rid]] == req.output_token_ids, f"{rid}: streamed tokens"
        assert kv.num_free_blocks == kv.num_blocks, "G6: blocks still held after every request finished"
        swap = e.scheduler.swap
        if swap is not None:
            assert swap.pool.num_free_blocks == swap.pool.num_blocks and not swap.tables and not self.cpu_tables, (
                "G6: CPU swap blocks still held after every request finished")
        if self.states:
            assert_no_problems(self.state_checker.check_drained(self.states[-1], self.last_rec))
        assert not kv.block_tables and not self.tables, kv.block_tables
        kv.check_invariants()
        assert not e.scheduler.has_unfinished and e.timeline.num_live == 0
        if isinstance(self.runner, FakeRunner):
            assert not self.runner.violations, self.runner.violations
            released = self.runner.released
            assert len(set(released)) == len(released), "a request was released twice"
            assert set(released) == set(self.order) - self.rejected


def run_workload(config: EngineConfig, arrivals: Sequence[Arrival], actions: Sequence[Action] = (), *,
                 runner=None, tokenizer=None, eos_token_id: int | None = None,
                 next_token_fn=hash_next_token, max_steps: int = 5000,
                 resume_paused_at_end: bool = True, record_to: str | Path | None = None,
                 keyframe_interval: int = 16) -> RunResult:
    """Run ``arrivals`` and ``actions`` to completion with invariant checks after every step.

    ``config.num_gpu_blocks`` sizes the cache. ``runner`` defaults to a :class:`FakeRunner`.
    Once no arrival or action is left, paused requests are resumed (if ``resume_paused_at_end``)
    so the run drains. Raises ``AssertionError`` if it has not drained after ``max_steps`` (G5).
    ``record_to``: also record the run to this (new) file, closed before returning.
    """
    num_blocks = config.num_gpu_blocks
    assert num_blocks is not None
    if runner is None:
        runner = FakeRunner(num_blocks, config.block_size, next_token_fn,
                            num_cpu_blocks=config.num_cpu_blocks)
    writer = None
    if record_to is not None:
        from recordings import RecordingWriter

        writer = RecordingWriter(record_to, {"config": config.to_dict(), "model": "fake"},
                                 keyframe_interval=keyframe_interval)
    try:
        engine = LLMEngine(config, runner, num_blocks, tokenizer=tokenizer, eos_token_id=eos_token_id,
                           recorder=writer)
        result = _drive(engine, runner, arrivals, actions, max_steps, resume_paused_at_end)
    finally:
        if writer is not None:
            writer.close()
    result.recording = None if record_to is None else Path(record_to)
    return result


def _drive(engine: LLMEngine, runner, arrivals: Sequence[Arrival], actions: Sequence[Action],
           max_steps: int, resume_paused_at_end: bool) -> RunResult:
    checker = InvariantChecker(engine, runner)
    by_step: dict[int, list] = defaultdict(list)
    for a in arrivals:
        by_step[a.arrive_step].append(a)
    for act in actions:
        by_step[act.step].append(act)
    last = max(by_step, default=-1)
    records: list[StepRecord] = []
    results: list[tuple[Action, bool]] = []
    step = 0
    while True:
        for item in by_step.get(step, []):
            if isinstance(item, Arrival):
                engine.add_request(list(item.prompt), item.params, request_id=item.request_id)
                checker.after_add(item)
            else:
                fn = {"abort": engine.abort_request, "pause": engine.pause_request,
                      "resume": engine.resume_request}[item.kind]
                results.append((item, fn(item.request_id)))
                checker.after_action(item, results[-1][1])
        if step > last:
            s = engine.scheduler
            if s.paused and not s.running and not s.waiting and resume_paused_at_end:
                for r in list(s.paused):
                    assert engine.resume_request(r.request_id)
            if not engine.has_unfinished or (s.paused and not s.running and not s.waiting):
                break
        assert step < max_steps, f"G5: not drained after {max_steps} steps"
        checker.before_step()
        rec = engine.step()
        assert rec.step == step
        checker.after_step(rec)
        records.append(rec)
        step += 1
    if not engine.scheduler.paused:
        checker.at_end()
    return RunResult(engine, runner, records, results, dict(checker.streamed), checker.rejected,
                     checker.states, all_requests=checker.all_requests())


def assert_recording_matches(result: RunResult) -> None:
    """The README's "again from the recording": open ``result.recording`` and check that every
    step's state and record read back equal the live ones, then re-check G1, G3, G4 (and G6 if the
    run drained) on the states read from the file, with the config stored in the file."""
    from recordings import Reader

    assert result.recording is not None, "run_workload(..., record_to=path) first"
    n = len(result.records)
    with Reader(result.recording) as reader:
        assert reader.is_complete() and reader.latest_step() == n - 1
        config = reader.run_info()["config"]
        assert config == result.engine.config.to_dict()
        records = reader.records(0, n)
        assert records == result.records, "recorded steps differ from the live StepRecords"
        states = [reader.state_at(k) for k in range(n)]
        announced = reader.request_ids()
    assert len(states) == len(result.states) == n
    for k, (got, live) in enumerate(zip(states, result.states)):
        assert got == live, f"state read back at step {k} differs from the live state"
    checker = StateChecker(config | {"num_gpu_blocks": result.engine.num_gpu_blocks})
    for st, rec in zip(states, records):
        assert_no_problems(checker.check_step(st, rec))
    assert announced == list(result.requests)                    # arrival order
    if n:
        assert list(states[-1].request_ids) == list(result.engine.requests)
        if not result.engine.scheduler.paused:
            assert_no_problems(checker.check_drained(states[-1], records[-1]))
    with Reader(result.recording) as reader:         # the same checks as `batchscope check`
        assert_no_problems(check_recording(reader))


def reference_outputs(config: EngineConfig, arrivals: Sequence[Arrival], **kw) -> dict[str, list[int]]:
    """The cases README's reference run: the same workload with 10x the KV blocks, no actions,
    no prefix cache."""
    ref = run_workload(config.replace(num_gpu_blocks=10 * config.num_gpu_blocks,
                                      enable_prefix_caching=False), arrivals, **kw)
    return ref.outputs()


def assert_outputs_match(result: RunResult, reference: dict[str, list[int]]) -> None:
    """G7: every request that finished by length (or stop) has exactly the reference tokens; an
    aborted or failed request has a prefix of them."""
    assert result.requests, "no request in the run"
    for rid, req in result.requests.items():
        if rid in result.rejected:
            continue
        ref = reference[rid]
        if req.status in (RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_STOPPED):
            assert req.output_token_ids == ref[:len(req.output_token_ids)], f"G7: {rid} differs from reference"
            if req.status is RequestStatus.FINISHED_LENGTH:
                assert req.output_token_ids == ref, f"G7: {rid} differs from reference"
        else:
            assert req.output_token_ids == ref[:req.num_output_tokens], f"G7: {rid} is not a prefix of reference"


def distinct_prompt(index: int, length: int, vocab: int = 1000) -> tuple[int, ...]:
    """A prompt of ``length`` ids that differs from every other index's prompt from its first token."""
    return tuple((index * 131 + 17 * j + j * j) % vocab for j in range(length)) if length else ()


def replay_states(result: RunResult) -> list[EngineState]:
    """The state after each step, rebuilt from the step records alone (as a replay does): a
    :class:`StateTimeline` started empty, fed one record at a time. The last one equals the live
    engine's state."""
    e = result.engine
    tl = StateTimeline(e.num_gpu_blocks, e.config.block_size, e.config.max_num_seqs,
                       e.config.num_cpu_blocks)
    out = []
    for rec in result.records:
        tl.apply(rec)
        out.append(tl.snapshot())
    if out:
        assert out[-1] == e.state()
    return out
