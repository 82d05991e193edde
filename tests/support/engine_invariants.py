"""The global invariants of ``../shared/cases/README.md`` (G1-G6), checked around every step of an
engine that :mod:`tests.support.engine_driver` drives, and again on a recording of the run.

:class:`InvariantChecker` sees the engine before and after each step, each admission and each user
action, and the requests the engine hands to ``on_finished``; it also rebuilds the state from the
step records alone (a :class:`StateTimeline` fed only the records, as a replay does) and the block
tables from the records' block events, and checks both against the engine's truth. Paused requests
are held by the user: G5 (liveness) is required of waiting and running requests only.

:func:`assert_recording_matches` reads a recorded run back and checks that it replays the live run
step by step and that the state-level invariants hold again on the states read from it.
"""
from __future__ import annotations

from collections import defaultdict

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.sched.admission import rejection_info
from engine.sched.preemption import preemption_info
from engine.outputs import NewToken, StepRecord
from engine.request import Request
from engine.vocab import AdmissionRejection, EventKind, RequestStatus
from engine.sequence_group import parent_id_of, sequence_ids
from engine.state.state import EngineState
from engine.state.timeline import StateTimeline
from recordings.check.invariants import StateChecker
from recordings.check.file_check import check_file
from tests.support.fake_runner import FakeRunner
from tests.support.runner_state import assert_runner_matches_scheduler
from engine.vocab import BlockEventKind, NotAdmittedReason, PreemptionReason

FINISH_EVENTS = ("finished", "aborted", "failed", "rejected")


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def is_impossible(config: EngineConfig, num_blocks: int, prompt_len: int, max_tokens: int,
                  n: int = 1) -> bool:
    """The documented admission rule, restated independently of the scheduler's code; ``n`` > 1
    adds the parallel-sampling rules of ``engine.sched.groups`` (a slot per sequence, the
    prompt prefilled in one step, the group's KV with the prompt's full blocks shared)."""
    each = blocks_for(prompt_len + max_tokens, config.block_size)
    thr = config.long_prefill_token_threshold if config.enable_chunked_prefill else 0
    return (prompt_len == 0 or max_tokens < 1 or prompt_len + max_tokens > config.max_model_len
            or each > num_blocks
            or n > 1 and (n > config.max_num_seqs or prompt_len > config.max_num_batched_tokens
                          or bool(thr) and prompt_len > thr
                          or each + (n - 1) * (each - prompt_len // config.block_size) > num_blocks))


def same_group(request_ids) -> bool:
    """True when the ids are sequences of one parallel-sampling prompt (``<id>#k``)."""
    parents = {parent_id_of(rid) for rid in request_ids}
    return len(parents) == 1 and all(rid != parent_id_of(rid) for rid in request_ids)



def assert_no_problems(problems) -> None:
    """Fail with one line per invariant violated (``recordings.check.invariants.Problem``)."""
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
        self.between: dict[str, set[str]] = defaultdict(set)   # event kind -> ids, from knob changes
        self.finished: dict[str, RequestStatus] = {}
        self.rejected: set[str] = set()
        self.streamed: dict[str, list[NewToken]] = defaultdict(list)
        self.idle_steps = 0
        self.pre: dict = {}
        self.states: list[EngineState] = []
        self.last_rec: StepRecord | None = None
        self.state_checker = StateChecker(engine.config.to_dict() | {"num_gpu_blocks": engine.num_gpu_blocks})
        self.order: list[str] = []                       # every request id, arrival order
        self.admitted: set[str] = set()                  # ids scheduled at least once
        self.members: dict[str, list[str]] = {}          # arrival id -> its request ids (n > 1)
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

    @property
    def c(self) -> EngineConfig:
        """The engine's config now (live knob changes included)."""
        return self.e.config

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
    def after_add(self, a) -> None:
        """After arrival ``a`` (an ``engine_driver.Arrival``) was added (each of its sequences,
        with ``n`` > 1)."""
        self.members[a.request_id] = sequence_ids(a.request_id, a.params.n)
        for rid in self.members[a.request_id]:
            self._after_add(rid, a)

    def _after_add(self, rid: str, a) -> None:
        self.order.append(rid)
        req = self.e.requests.get(rid)
        st = self.e.state()
        v = st.view(rid)
        if req is None and not is_impossible(self.c, self.e.num_gpu_blocks, len(a.prompt),
                                             a.params.max_tokens, a.params.n):
            # only SLO admission turns a servable request away at arrival, with its prediction
            events = [ev for ev in self.e.scheduler.events if ev.request_id == rid]
            assert self.c.admission == "slo" and [ev.kind for ev in events][-2:] == [EventKind.ADMISSION_REJECTED, EventKind.REJECTED], (
                rid, v)
            info = rejection_info(events[-2].detail)
            assert info.reason == AdmissionRejection.SLO_TTFT and info.value > info.limit == self.c.slo_ttft_ms / 1e3, info
            assert v.status == RequestStatus.FINISHED_ERROR.value and "predicted TTFT" in v.error, v
            self.rejected.add(rid)
            self.finished[rid] = RequestStatus.FINISHED_ERROR
        elif req is None:
            # G5: a request that can never run is failed at once with an error, not left waiting.
            assert v.status == RequestStatus.FINISHED_ERROR.value and v.error, (rid, v)
            assert not self.e.scheduler.kv.block_ids(rid) and st.block_ids(rid) == ()
            self.rejected.add(rid)
            self.finished[rid] = RequestStatus.FINISHED_ERROR
        else:
            assert not is_impossible(self.c, self.e.num_gpu_blocks, req.num_prompt_tokens,
                                     req.sampling_params.max_tokens, a.params.n), rid
            assert req.status is RequestStatus.WAITING and v.status == "WAITING", (rid, req.status, req.error)
            self.objs[rid] = req
        assert_state_matches_scheduler(self.e, st)

    def after_action(self, act, ok: bool) -> None:
        """After user action ``act`` (an ``engine_driver.Action``), which the engine took if ``ok``."""
        if act.kind == "max_num_seqs":      # preemptions (slots cut) and failures (a group that no
            for ev in self.e.scheduler.events:        # longer fits), recorded with the next step
                if ev.kind in ("preempted", "failed"):
                    self.between[ev.kind].add(ev.request_id)
        if act.kind == "abort" and ok:          # (a group's id aborts its live sequences)
            for rid in self.members.get(act.request_id, [act.request_id]):
                if rid in self.finished:
                    continue
                self.finished[rid] = RequestStatus.FINISHED_ABORTED
                assert rid not in self.e.requests
                v = self.e.state().view(rid)
                assert v.status == RequestStatus.FINISHED_ABORTED.value and v.slot is None
                assert self.e.state().block_ids(rid) == ()
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
            static_batch=set(s.static_batch),
            done=set(self.delivered) | set(self.finished),
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
                    ev.kind == BlockEventKind.CACHED or (ev.kind == BlockEventKind.FREED and ev.request_id in finishing)):
                held_at_decision = len(held)
            if ev.kind == BlockEventKind.ALLOCATED:
                assert not set(ev.block_ids) & held, ("allocated a held block", ev)
                assert not any(self.tags.get(b) for b in ev.block_ids), ("allocated a cached block unevicted", ev)
                self.tables.setdefault(ev.request_id, []).extend(ev.block_ids)
                if in_step:
                    step_alloc[ev.request_id].extend(ev.block_ids)
            elif ev.kind == BlockEventKind.HIT:
                assert self.c.enable_prefix_caching and in_step, ev
                assert not self.tables.get(ev.request_id), ("a hit into a table that holds blocks", ev)
                for b in ev.block_ids:
                    tag, step = self.tags.get(b, (0, None))
                    # a hit only on blocks whose KV a completed (earlier) step wrote
                    assert tag and step < rec.step, ("hit on a block not cached in an earlier step", ev)
                self.tables[ev.request_id] = list(ev.block_ids)
                step_alloc[ev.request_id].extend(ev.block_ids)
                step_hit[ev.request_id].extend(ev.block_ids)
            elif ev.kind == BlockEventKind.FORKED:    # a group's prompt blocks, held by another sequence
                assert in_step and not self.tables.get(ev.request_id), ("a fork into a table that holds blocks", ev)
                assert any(same_group([ev.request_id, rid]) and t[:len(ev.block_ids)] == list(ev.block_ids)
                           for rid, t in self.tables.items()), ("forked blocks no sibling holds", ev)
                self.tables[ev.request_id] = list(ev.block_ids)
                step_alloc[ev.request_id].extend(ev.block_ids)
            elif ev.kind == BlockEventKind.CACHED:
                assert self.c.enable_prefix_caching and len(ev.block_hashes) == len(ev.block_ids), ev
                table = self.tables.get(ev.request_id, [])
                for b, h in zip(ev.block_ids, ev.block_hashes):
                    assert b in table and not self.tags.get(b) and h, ("cached a block not held or tagged", ev)
                    self.tags[b] = (h, rec.step)
                tagged = [h for h, _ in self.tags.values()]
                assert len(tagged) == len(set(tagged)), "two blocks cache one hash"
            elif ev.kind == BlockEventKind.EVICTED:
                for b in ev.block_ids:
                    assert b not in held and self.tags.pop(b, None), ("evicted a held or untagged block", ev)
            elif ev.kind == BlockEventKind.SWAPPED_OUT:          # right after the GPU table's free event
                # (or a group's head leaving while swapped out handed its copies of the shared
                # prompt blocks to the next sequence: between steps, nothing copied)
                # (or a knob change preempted it between steps)
                handed = i and rec.block_events[i - 1].kind == BlockEventKind.SWAPPED_IN and not in_step
                knob_cut = not in_step and ev.request_id in self.between["preempted"]
                assert self.c.preemption_mode == "swap" and (in_step or handed or knob_cut), ev
                assert ev.request_id not in self.tables and ev.request_id not in self.cpu_tables, ev
                assert not set(ev.block_ids) & {b for t in self.cpu_tables.values() for b in t}, (
                    "swapped out into a CPU block that is held", ev)
                req = self.objs[ev.request_id]
                # (its group's head when it was swapped out: the first sequence not finished
                # before the step -- a knob change may have failed the whole group since)
                head = None if req.group is None else next(
                    (m for m in req.group.members if m.request_id not in self.pre["done"]), None)
                shared = 0 if handed or req.group is None or head is req else (
                    req.num_prompt_tokens // self.c.block_size)
                # (its progress when it was swapped out: before the step, for a hand-over or a
                # knob cut -- it may be swapped back in and computed further in the step)
                # (one that finished between steps too -- a knob change failed its group --
                # is not in ``pre``: its progress stayed what it was swapped out with)
                computed = (self.pre["num_computed"].get(req.request_id, req.num_computed_tokens)
                            if handed or knob_cut else req.num_computed_tokens)
                assert len(ev.block_ids) == blocks_for(computed, self.c.block_size) - shared, (
                    "a swap-out copies the blocks of the request's computed KV (but a group's shared ones)", ev)
                self.cpu_tables[ev.request_id] = list(ev.block_ids)
            elif ev.kind == BlockEventKind.SWAPPED_IN:
                assert list(ev.block_ids) == self.cpu_tables.pop(ev.request_id, None), (
                    "a swap-in names other CPU blocks than the request's", ev)
            else:
                assert ev.kind == BlockEventKind.FREED, ev
                assert list(ev.block_ids) == self.tables.pop(ev.request_id, None), (
                    "a free event names other blocks than the whole table", ev)
        if held_at_decision is None:
            held_at_decision = len({b for t in self.tables.values() for b in t})
        owners = [b for t in self.tables.values() for b in t]
        if not self.c.enable_prefix_caching:     # (but a group's prompt blocks, checked below)
            assert all(same_group([r for r, t in self.tables.items() if b in t])
                       for b in set(owners) if owners.count(b) > 1), "block events hand one block to two requests"
        for b in set(owners):
            if owners.count(b) > 1:
                assert self.tags.get(b) or same_group([r for r, t in self.tables.items() if b in t]), (
                    f"block {b} is shared but caches no prefix nor a group's prompt")
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
        if hasattr(self.runner, "input_batch"):
            # The runner's own state (kept from the scheduler's diffs) is the scheduler's truth.
            n = assert_runner_matches_scheduler(s, self.runner.input_batch)
            self.runner.num_state_checks = getattr(self.runner, "num_state_checks", 0) + n
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

        # Admission control: a request timed out only while waiting for its first admission,
        # past max_queue_time at the step's start; it never reached the runner.
        for ev in rec.events:
            if ev.kind == EventKind.ADMISSION_REJECTED and (info := rejection_info(ev.detail)).reason == AdmissionRejection.QUEUE_TIMEOUT:
                assert c.max_queue_time is not None and info.limit == c.max_queue_time, info
                waited = rec.clock - self.objs[ev.request_id].arrival_time
                assert waited > c.max_queue_time and abs(waited - info.value) < 1e-5, (waited, info)
                assert ev.request_id in pre["waiting"] and ev.request_id not in sched_ids, ev
                assert self.objs[ev.request_id].num_cached_tokens < 0, ("timed out after an admission", ev)
                self.rejected.add(ev.request_id)
        # (timed out before the step decided: not in the queue it served)
        pre["waiting"] = [rid for rid in pre["waiting"] if rid not in self.rejected]
        for ev in rec.events:                   # nobody first admitted later than max_queue_time
            if ev.kind == EventKind.SCHEDULED and ev.request_id not in self.admitted:
                self.admitted.add(ev.request_id)
                arrival = self.objs[ev.request_id].arrival_time
                assert c.max_queue_time is None or rec.clock - arrival <= c.max_queue_time, ev
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
            # Each live request holds exactly the blocks its computed KV needs (no leak, no lack;
            # a swapped-out sequence of a group but its head not the prompt blocks they share).
            held = (kv.block_ids(rid) if req.status is not RequestStatus.SWAPPED
                    else e.scheduler.swap.tables[rid])
            shared = (req.num_prompt_tokens // bs if req.status is RequestStatus.SWAPPED
                      and req.group is not None and req.group.head() is not req else 0)
            assert len(held) == blocks_for(req.num_computed_tokens, bs) - shared, (rid, req.num_computed_tokens, held)
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
        assert rec.total_num_scheduled_tokens <= c.max_num_batched_tokens, "G4: token budget exceeded"
        assert len(set(sched_ids)) == len(sched_ids)
        slots = [x.slot for x in rec.scheduled]
        assert len(set(slots)) == len(slots) and all(0 <= x < c.max_num_seqs for x in slots), slots

        # Block events rebuild the block tables exactly; during the step a table only grows at
        # its end, by the blocks the step's scheduled chunk needs.
        step_alloc, step_hit, held_at_decision = self._replay_block_events(rec)
        assert self.tables == {rid: t for rid, t in kv.block_tables.items() if t}, "block events vs tables"
        # (a request preempted for priority may have been given this step's blocks first; a
        # group's sequences forked onto its head's prompt get blocks without computing)
        forked = {ev.request_id for ev in rec.events if ev.kind == "forked"}
        assert set(step_alloc) <= set(sched_ids) | set(rec.preempted_ids) | forked, (
            "blocks allocated to an unscheduled request", step_alloc)
        for rid in forked:       # forked with the prompt computed by its head in this step
            head = next(ev.detail for ev in rec.events if ev.kind == "forked" and ev.request_id == rid)
            assert same_group([rid, head]) and head in sched_ids, (rid, head)
            if rid in e.requests:
                assert e.requests[rid].num_computed_tokens == e.requests[rid].num_prompt_tokens
        # ... in the batch only to sample its first token, after the requests that compute
        first = [x for x in rec.scheduled if x.num_tokens == 0]
        assert list(rec.scheduled[len(rec.scheduled) - len(first):]) == first, "forked entries last"
        for x in first:
            assert x.request_id in forked and not x.is_prefill and not pre["num_output"][x.request_id]
            assert x.num_computed_tokens == self.objs[x.request_id].num_prompt_tokens, x
        for x in rec.scheduled:
            if x.num_tokens == 0:
                continue                 # a forked sequence's first token (checked above)
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
                # the whole prompt (after its prefix-cache hit, if any) in one step; a group's
                # sequence forked onto its head's prompt computes the rest in one step
                req = self.objs[x.request_id]
                start = (len(step_hit.get(x.request_id, ())) * bs, *(
                    [req.num_prompt_tokens] if req.group is not None else []))
                assert x.num_tokens == 1 or (
                    x.num_computed_tokens in start
                    and x.num_computed_tokens + x.num_tokens == pre["num_tokens"][x.request_id]), (
                    "prefill split without chunked prefill", x)
            elif c.long_prefill_token_threshold and x.num_tokens > 1:
                assert x.num_tokens <= c.long_prefill_token_threshold, ("long prefill cap", x)
            table = pre["blocks"].get(x.request_id, []) + step_alloc.get(x.request_id, [])
            assert len(table) == blocks_for(x.num_computed_tokens + x.num_tokens, bs), (x, table)
            if x.request_id in e.requests:
                assert kv.block_ids(x.request_id) == table, (x, table)
            else:      # finished in the step: its free event named exactly this table
                assert any(ev.kind == BlockEventKind.FREED and ev.request_id == x.request_id
                           and list(ev.block_ids) == table for ev in rec.block_events), x

        # Preemption: only requests running (or parked with KV) at the start of the step, once each;
        # nothing is admitted in a step that preempted; each preemption frees what it held.
        pre_ids = set(pre["running"]) | set(pre["paused"])
        assert len(set(rec.preempted_ids)) == len(rec.preempted_ids), rec.preempted_ids
        assert (sorted([*rec.preempted_ids, *self.between["preempted"]])
                == sorted(ev.request_id for ev in rec.events if ev.kind == "preempted"))
        # (a swapped_out event of no preempted request: a group's head left while swapped out
        # and handed its CPU blocks over)
        swapped_out = {ev.request_id for ev in rec.block_events
                       if ev.kind == BlockEventKind.SWAPPED_OUT and ev.request_id in rec.preempted_ids}
        for rid in rec.preempted_ids:
            assert rid in pre_ids, f"preempted {rid} was not running at the start of step {rec.step}"
            assert pre["blocks"][rid], f"preempted {rid} held no KV"
            assert rid not in sched_ids
            assert not kv.block_ids(rid)
            info = preemption_info(next(ev.detail for ev in rec.events
                                        if ev.kind == "preempted" and ev.request_id == rid))
            if rid in swapped_out or info.mode == "swap":   # swap keeps the progress; recompute starts over
                # (a group's sequence whose computed KV is all in blocks its head copies has
                # no CPU block of its own: no swapped_out event)
                req = e.requests[rid]
                assert rid in swapped_out or (req.group is not None and blocks_for(
                    req.num_computed_tokens, bs) == req.num_prompt_tokens // bs), (rid, info)
                assert info.mode == "swap" and e.requests[rid].status is RequestStatus.SWAPPED
                assert e.requests[rid].num_computed_tokens == pre["num_computed"][rid] == info.num_tokens
            else:
                assert e.requests[rid].num_computed_tokens == 0
                assert info.mode == ("recompute_fallback" if c.preemption_mode == "swap"
                                     and rid in pre["running"] and info.num_tokens else "recompute"), info
                if info.mode == "recompute_fallback":   # only when the CPU pool had no room
                    # (for a group's sequence: for the whole group, at most all their blocks)
                    group = [r for r in rec.preempted_ids if r == rid or same_group([r, rid])]
                    need = sum(blocks_for(pre["num_computed"][r], bs) for r in group)
                    assert s.swap.pool.num_free_blocks < need + sum(
                        len(t) for r, t in self.cpu_tables.items() if r in swapped_out), info
        # Swap-ins: the oldest swapped-out requests, in order, before any admission.
        swapped_in = [rid for rid in sched_ids if rid in pre["swapped"]]
        assert swapped_in == pre["swapped"][:len(swapped_in)], ("swap-in out of FIFO order", swapped_in)
        admitted = [x.request_id for x in rec.scheduled if x.num_tokens
                    and x.request_id not in pre["running"] and x.request_id not in pre["swapped"]]
        started = [rid for rid in pre["waiting"] if rid in admitted or rid in forked]
        assert started == pre["waiting"][:len(started)] and admitted == [r for r in started if r in admitted], (
            "FCFS admission order", admitted, pre["waiting"])
        infos = {ev.request_id: preemption_info(ev.detail) for ev in rec.events
                 if ev.kind == "preempted" and ev.request_id in rec.preempted_ids}   # (not knob cuts)
        # Parked KV taken, when nothing ran, for the request that starts in this very step
        # (admitted, or swapped back in): liveness, not a preemption for memory.
        for_start = {rid for rid, info in infos.items() if info.reason == PreemptionReason.PAUSED_KV
                     and info.for_request in {*admitted, *swapped_in}}
        assert all(pre["paused"].count(rid) for rid in for_start), for_start
        if swapped_in:
            assert not set(rec.preempted_ids) - for_start, "swapped in during a step that preempted"
        reasons = {info.reason for rid, info in infos.items() if rid not in for_start}
        # Policy priority: a waiting head of strictly higher priority than every swapped-out
        # request is admitted ahead of them (unless the running requests preempted for memory);
        # then only requests outranking them start, and nobody is swapped in.
        prio_of = lambda rid: self.objs[rid].priority      # noqa: E731
        outranked = bool(c.policy == "priority" and pre["swapped"] and pre["waiting"]
                         and prio_of(pre["waiting"][0]) < min(map(prio_of, pre["swapped"]))
                         and not any(info.reason == PreemptionReason.NEEDED_BLOCKS or (
                             info.reason == PreemptionReason.PAUSED_KV and info.for_request not in pre["waiting"])
                             for info in infos.values()))
        if outranked:
            assert not swapped_in, ("swapped in while a higher-priority request waited", swapped_in)
            assert all(prio_of(r) < min(map(prio_of, pre["swapped"])) for r in admitted), admitted
        if reasons - {PreemptionReason.FOR_PRIORITY}:
            assert not admitted, "admitted a request in a step that preempted one for memory"
        # swapped-out requests first: no admission in a step that began with some or swapped
        # one out for memory (a priority preemption swaps out to admit)
        swapped_first = not outranked and bool(pre["swapped"]) or any(
            reason != PreemptionReason.FOR_PRIORITY for rid in swapped_out
            for reason in [preemption_info(next(ev.detail for ev in rec.events if ev.kind == "preempted"
                                                and ev.request_id == rid)).reason])
        if swapped_first:
            assert not admitted, "admitted a request in a step that began with swapped-out ones"
        if PreemptionReason.FOR_PRIORITY in reasons:       # made room for the first waiting request, which started
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
        sharing = c.enable_prefix_caching or any(r.group is not None for r in self.objs.values())
        if not sharing:                     # no sharing: exact per-step accounting
            assert kv.num_free_blocks == pre["free"] - allocated + freed, "G1: blocks appeared or vanished"

        # Why waiting requests were not admitted: the first one is listed with a true reason,
        # everyone behind it is implicitly behind an older request.
        waiting_now = [r.request_id for r in s.waiting]
        prio = {rid: r.priority for rid, r in e.requests.items()}.get
        if swapped_first:
            assert rec.waiting_reason == NotAdmittedReason.SWAPPED_FIRST
            assert rec.not_admitted == tuple((r, NotAdmittedReason.SWAPPED_FIRST) for r in waiting_now[:1])
            assert all(rec.not_admitted_reason(r) == NotAdmittedReason.SWAPPED_FIRST for r in waiting_now)
        elif c.policy == "static":
            # The blocked head and the batch's other waiting members are listed; everyone else
            # waits for the static batch to finish.
            listed = dict(rec.not_admitted)
            for rid in waiting_now:
                if rid in listed and listed[rid] != NotAdmittedReason.STATIC_BATCH:
                    assert rid in s.static_batch, (rid, "listed but not a member of the batch")
                elif rid not in listed:
                    assert rec.not_admitted_reason(rid) == NotAdmittedReason.STATIC_BATCH, rid
            joined = s.static_batch - pre["static_batch"]
            if joined:      # a batch forms only when the previous one is gone, up to the cap now
                assert not pre["static_batch"] and len(s.static_batch) <= c.max_num_seqs, (
                    "static batch formed over a live one or above max_num_seqs", joined)
            # (a batch formed before max_num_seqs was lowered keeps its members)
            assert all(rid in s.static_batch or rid not in e.requests for rid in admitted), (
                "static admitted a request outside its batch")
        else:
            assert [rid for rid, _ in rec.not_admitted] == waiting_now[:1], (rec.not_admitted, waiting_now)
            for rid in waiting_now[1:]:
                lower = c.policy == "priority" and prio(rid) > prio(waiting_now[0])
                assert rec.not_admitted_reason(rid, prio) == (
                    NotAdmittedReason.LOWER_PRIORITY if lower else NotAdmittedReason.BEHIND), rid
        if rec.not_admitted and rec.not_admitted[0][1] not in (
                NotAdmittedReason.STATIC_BATCH, NotAdmittedReason.BEHIND, NotAdmittedReason.SWAPPED_FIRST):
            head, reason = rec.not_admitted[0]
            assert rec.not_admitted_reason(head) == reason
            running_at_decision = (len([r for r in pre["running"] if r not in rec.preempted_ids])
                                   + len(admitted) + len(forked))
            left = c.max_num_batched_tokens - rec.total_num_scheduled_tokens
            free_at_decision = e.num_gpu_blocks - held_at_decision
            # a parallel-sampling group starts as a whole: a slot for each waiting sequence, its
            # whole prompt in the step, the blocks of its other sequences beyond the shared ones
            h = e.requests[head]
            group = [h] if h.group is None else h.group.live()
            extra = sum(blocks_for(r.num_tokens, bs) - h.num_prompt_tokens // bs for r in group if r is not h)
            if reason == NotAdmittedReason.SEQ_CAP:
                assert running_at_decision + len(group) > c.max_num_seqs >= running_at_decision
            elif reason == NotAdmittedReason.TOKEN_BUDGET:
                assert left == 0 or (not c.enable_chunked_prefill and left < h.num_tokens) or (
                    h.group is not None and left < h.num_prompt_tokens)
            elif reason == NotAdmittedReason.NO_FREE_BLOCKS:
                # (with prefix caching it may have needed fewer: at most all its blocks; with a
                # kv_watermark, those blocks stay free while others run)
                watermark = int(c.kv_watermark * kv.num_usable_blocks) if running_at_decision else 0
                assert rec.preempted_ids or blocks_for(h.num_tokens, bs) + extra + watermark > free_at_decision
            elif reason == NotAdmittedReason.LOWER_PRIORITY:      # displaced in this very step
                assert c.policy == "priority" and head in rec.preempted_ids
            else:
                raise AssertionError(f"unknown or misplaced reason {reason!r}")

        # G5 liveness: with waiting or running work, something computes or changes state at
        # least once every 2 steps; nobody waits who can never run.
        progress = rec.total_num_scheduled_tokens > 0 or any(ev.kind != "arrived" for ev in rec.events)
        if pre["running"] or pre["waiting"]:
            self.idle_steps = 0 if progress else self.idle_steps + 1
            assert self.idle_steps < 2, f"G5: no progress for {self.idle_steps} steps at step {rec.step}"
        for r in s.waiting:
            assert not is_impossible(c, e.num_gpu_blocks, r.num_prompt_tokens, r.sampling_params.max_tokens,
                                     1 if r.group is None else len(r.group.live()))

        # Streamed tokens: one per request per step, indexed in order.
        got = [t.request_id for t in rec.new_tokens]
        assert len(set(got)) == len(got)
        for t in rec.new_tokens:
            assert t.index == len(self.streamed[t.request_id]), t
            self.streamed[t.request_id].append(t)
        # A failed forward pass fails exactly the step's requests, with its error; nothing else fails.
        failed = {ev.request_id for ev in rec.events if ev.kind == "failed"}
        if rec.error:       # (and the sequences forked onto a failed head in the step)
            assert failed == set(sched_ids) | forked | self.between["failed"] and not rec.new_tokens, (
                rec.error, failed, sched_ids)
            assert all(self.delivered[rid].error == rec.error for rid in failed - self.between["failed"])
        else:
            assert failed == self.between["failed"], failed
        for rid in self.between["failed"]:
            assert "max_num_seqs was set to" in self.delivered[rid].error, self.delivered[rid].error
        self.between.clear()

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


def assert_recording_matches(result) -> None:
    """The README's "again from the recording": open ``result.recording`` (an
    ``engine_driver.RunResult`` run with ``record_to``) and check that every
    step's state and record read back equal the live ones, then re-check G1, G3, G4 (and G6 if the
    run drained) on the states read from the file, with the config stored in the file."""
    from recordings.file.open_reader import open_reader

    assert result.recording is not None, "run_workload(..., record_to=path) first"
    n = len(result.records)
    with open_reader(result.recording) as reader:
        assert reader.is_complete() and reader.latest_step() == n - 1
        config = reader.run_info().config
        # the config the run started with; the live knob changes it recorded give the live one
        knobs = {k: v for rec in result.records for k, v in rec.knobs if k in config}
        assert config | knobs == result.engine.config.to_dict()
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
    with open_reader(result.recording) as reader:         # the same checks as `batchscope check`
        assert_no_problems(check_file(reader))


def replay_states(result) -> list[EngineState]:
    """The state after each step of ``result`` (an ``engine_driver.RunResult``), rebuilt from the
    step records alone (as a replay does): a :class:`StateTimeline` started empty, fed one record
    at a time. The last one equals the live engine's state."""
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
