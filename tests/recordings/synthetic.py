"""A small, deterministic stand-in engine that produces plausible step records (no model, no torch).

``generate(...)`` simulates FCFS continuous batching over a paged KV pool: requests arrive, are
admitted into batch slots under a token budget and a slot cap, prefill in chunks, decode one token
per step, gain blocks, get preempted (recompute) when blocks run out, are paused/resumed/aborted by
a "user", occasionally fail in a step, and finish by length or stop. It returns every
``StepRecord`` with the live ``EngineState`` after it (``states[k] = states[k-1].apply(records[k])``)
and the arrivals the engine would announce with ``RecordingWriter.write_request``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from engine.outputs import (NOT_ADMITTED_BEHIND, NOT_ADMITTED_NO_FREE_BLOCKS,
                            NOT_ADMITTED_SEQ_CAP, NOT_ADMITTED_TOKEN_BUDGET, NewToken,
                            RequestEvent, RequestView, ScheduledRequest, SchedulerOutput,
                            StepRecord)
from engine.state import EngineState

_REASON = {"FINISHED_LENGTH": "length", "FINISHED_STOPPED": "stop",
           "FINISHED_ABORTED": "abort", "FINISHED_ERROR": "error"}


@dataclass(frozen=True)
class Arrival:
    """The arguments of one ``write_request`` call."""

    request_id: str
    arrival_step: int
    arrival_time: float
    prompt_token_ids: tuple[int, ...]
    prompt_text: str
    sampling: dict[str, Any]


@dataclass(frozen=True)
class SyntheticRun:
    """A whole synthetic run: ``records[k]`` is step k, ``states[k]`` the state after it."""

    run_info: dict[str, Any]
    initial: EngineState
    arrivals: dict[int, list[Arrival]]
    records: list[StepRecord]
    states: list[EngineState]


@dataclass
class _Req:
    rid: str
    arrival_step: int
    arrival_time: float = 0.0
    prompt_len: int = 1
    max_tokens: int = 1
    status: str = "WAITING"
    num_computed: int = 0
    output: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    slot: int | None = None
    num_preemptions: int = 0
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + len(self.output)

    def view(self) -> RequestView:
        times = self.token_times
        return RequestView(
            request_id=self.rid, status=self.status, arrival_step=self.arrival_step,
            arrival_time=self.arrival_time, num_prompt_tokens=self.prompt_len,
            num_output_tokens=len(self.output), num_computed_tokens=self.num_computed,
            max_tokens=self.max_tokens, block_ids=tuple(self.blocks), slot=self.slot,
            num_preemptions=self.num_preemptions,
            ttft=times[0] - self.arrival_time if times else None,
            mean_itl=(times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
            finish_reason=self.finish_reason, error=self.error)


class _Sim:
    def __init__(self, rng: random.Random, cfg: dict[str, Any]) -> None:
        self.rng, self.cfg = rng, cfg
        self.free = list(range(cfg["num_gpu_blocks"]))
        self.reqs: dict[str, _Req] = {}
        self.running: list[_Req] = []
        self.waiting: list[_Req] = []
        self.events: list[RequestEvent] = []

    # --- helpers --------------------------------------------------------------------------
    def event(self, r: _Req, kind: str, detail: str = "") -> None:
        self.events.append(RequestEvent(r.rid, kind, detail))

    def release(self, r: _Req) -> None:
        self.free = sorted(self.free + r.blocks)
        r.blocks = []

    def finish(self, r: _Req, status: str, kind: str = "finished", detail: str = "") -> None:
        if r in self.running:
            self.running.remove(r)
        if r in self.waiting:
            self.waiting.remove(r)
        self.release(r)
        r.status, r.slot, r.finish_reason = status, None, _REASON[status]
        self.event(r, kind, detail or r.finish_reason)

    def free_slot(self) -> int:
        used = {r.slot for r in self.running}
        return min(s for s in range(self.cfg["max_num_seqs"]) if s not in used)

    def blocks_needed(self, r: _Req, n: int) -> int:
        bs = self.cfg["block_size"]
        return max(0, -(-(r.num_computed + n) // bs) - len(r.blocks))

    def preempt(self, victim: _Req, preempted: list[str]) -> None:
        self.running.remove(victim)
        self.release(victim)
        victim.status, victim.slot, victim.num_computed = "PREEMPTED", None, 0
        victim.num_preemptions += 1
        self.waiting.insert(0, victim)
        preempted.append(victim.rid)
        self.event(victim, "preempted", "no free blocks")

    # --- one step -------------------------------------------------------------------------
    def user_actions(self) -> None:
        rng = self.rng
        live = [r for r in self.reqs.values() if not r.status.startswith("FINISHED")]
        if live and rng.random() < 0.04:
            self.finish(rng.choice(live), "FINISHED_ABORTED", "aborted", "aborted by user")
        if self.running and rng.random() < 0.05:
            r = rng.choice(self.running)
            self.running.remove(r)
            r.status, r.slot = "PAUSED", None
            self.event(r, "paused")
        for r in [r for r in self.reqs.values() if r.status == "PAUSED"]:
            if rng.random() < 0.3 and len(self.running) < self.cfg["max_num_seqs"]:
                r.status, r.slot = "RUNNING", self.free_slot()
                self.running.append(r)
                self.event(r, "resumed")

    def schedule(self, step: int) -> SchedulerOutput:
        budget = self.cfg["max_num_batched_tokens"]
        scheduled: list[ScheduledRequest] = []
        preempted: list[str] = []
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = min(r.num_tokens - r.num_computed, budget)
            while self.blocks_needed(r, n) > len(self.free) and r in self.running:
                self.preempt(self.running[-1], preempted)
            if r not in self.running:
                break
            scheduled.append(self.allocate(r, n))
            budget -= n
            i += 1
        not_admitted: list[tuple[str, str]] = []
        blocked = False
        for r in list(self.waiting):
            n = min(r.num_tokens - r.num_computed, budget)
            if blocked:
                reason = NOT_ADMITTED_BEHIND
            elif len(self.running) >= self.cfg["max_num_seqs"]:
                reason = NOT_ADMITTED_SEQ_CAP
            elif budget <= 0:
                reason = NOT_ADMITTED_TOKEN_BUDGET
            elif self.blocks_needed(r, n) > len(self.free) or r.rid in preempted:
                reason = NOT_ADMITTED_NO_FREE_BLOCKS
            else:
                self.waiting.remove(r)
                r.status, r.slot = "RUNNING", self.free_slot()
                self.running.append(r)
                self.event(r, "scheduled")
                scheduled.append(self.allocate(r, n))
                budget -= n
                continue
            blocked = True
            not_admitted.append((r.rid, reason))
        return SchedulerOutput(step, tuple(scheduled), tuple(preempted), tuple(not_admitted))

    def allocate(self, r: _Req, n: int) -> ScheduledRequest:
        new = self.free[:self.blocks_needed(r, n)]
        self.free = self.free[len(new):]
        r.blocks += new
        return ScheduledRequest(r.rid, r.slot, n, r.num_computed,
                                r.num_tokens - r.num_computed > 1, tuple(new), tuple(r.blocks))

    def execute(self, so: SchedulerOutput, token_time: float) -> tuple[list[NewToken], str | None]:
        rng = self.rng
        tokens: list[NewToken] = []
        failed = None
        if so.scheduled and rng.random() < 0.03:
            failed = rng.choice(so.scheduled).request_id
        for s in so.scheduled:
            r = self.reqs[s.request_id]
            if r.rid == failed:
                r.error = "synthetic forward failure"
                self.finish(r, "FINISHED_ERROR", "failed", r.error)
                continue
            r.num_computed += s.num_tokens
            if r.num_computed < r.num_tokens:
                continue  # mid chunked prefill: no token yet
            token_id = rng.randrange(32000)
            tokens.append(NewToken(r.rid, len(r.output), token_id, f" w{token_id % 97}"))
            r.output.append(token_id)
            r.token_times.append(token_time)
            if len(r.output) >= r.max_tokens:
                self.finish(r, "FINISHED_LENGTH")
            elif rng.random() < 0.08:
                self.finish(r, "FINISHED_STOPPED")
        return tokens, (None if failed is None else f"request {failed}: forward failed")


def generate(seed: int = 0, num_requests: int = 8, num_gpu_blocks: int = 24,
             block_size: int = 4, max_num_seqs: int = 4, max_num_batched_tokens: int = 16,
             clock: str = "virtual", max_prompt_len: int = 24, max_output_len: int = 12,
             max_steps: int = 300) -> SyntheticRun:
    """Simulate a run; the same arguments always give the same run."""
    rng = random.Random(seed)
    cfg = {"model": "synthetic", "dtype": "float32", "device": "cpu", "seed": seed,
           "block_size": block_size, "num_gpu_blocks": num_gpu_blocks,
           "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
           "max_model_len": num_gpu_blocks * block_size, "clock": clock}
    run_info = {"config": cfg, "model": "synthetic", "device": "cpu", "dtype": "float32",
                "seed": seed, "trace": {"name": f"synthetic-{seed}", "hash": "0" * 8},
                "started_at": "2024-01-01T00:00:00+00:00"}
    sim = _Sim(rng, cfg)
    arrival_steps = sorted(rng.randrange(0, 3 * num_requests + 1) for _ in range(num_requests))
    pending = [_Req(f"req-{i}", s, prompt_len=rng.randint(1, max_prompt_len),
                    max_tokens=rng.randint(1, max_output_len))
               for i, s in enumerate(arrival_steps)]
    initial = EngineState(step=-1, clock=0.0, num_total_blocks=num_gpu_blocks,
                          block_size=block_size, max_num_seqs=max_num_seqs)
    state, views = initial, {}
    arrivals: dict[int, list[Arrival]] = {}
    records: list[StepRecord] = []
    states: list[EngineState] = []
    end_ns = 0
    for step in range(max_steps):
        if not pending and all(r.status.startswith("FINISHED") for r in sim.reqs.values()):
            break
        start_ns = end_ns + rng.randrange(10_000, 50_000)
        now = float(step) if clock == "virtual" else start_ns / 1e9
        sim.events = []
        while pending and pending[0].arrival_step == step:
            r = pending.pop(0)
            r.arrival_time = now
            sim.reqs[r.rid] = r
            prompt = tuple(rng.randrange(32000) for _ in range(r.prompt_len))
            arrivals.setdefault(step, []).append(Arrival(
                r.rid, step, now, prompt, " ".join(f"p{t % 89}" for t in prompt),
                {"max_tokens": r.max_tokens, "temperature": 0.0, "top_p": 1.0}))
            sim.event(r, "arrived")
            if r.prompt_len + r.max_tokens > cfg["max_model_len"]:
                r.error = "prompt + max_tokens exceed the KV cache"
                sim.finish(r, "FINISHED_ERROR", "rejected", r.error)
            else:
                sim.waiting.append(r)
        sim.user_actions()
        schedule_ns, forward_ns, update_ns = (rng.randrange(1_000, 90_000) for _ in range(3))
        so = sim.schedule(step)
        end_ns = start_ns + schedule_ns + forward_ns + update_ns
        token_time = now + 1.0 if clock == "virtual" else end_ns / 1e9
        tokens, error = sim.execute(so, token_time)
        changed = []
        for r in sim.reqs.values():
            v = r.view()
            if views.get(r.rid) != v:
                views[r.rid] = v
                changed.append(v)
        statuses = [r.status for r in sim.reqs.values()]
        record = StepRecord(
            step=step, start_ns=start_ns, end_ns=end_ns, clock=now, scheduler_output=so,
            new_tokens=tuple(tokens), events=tuple(sim.events), changed=tuple(changed),
            num_waiting=sum(s in ("WAITING", "PREEMPTED") for s in statuses),
            num_running=statuses.count("RUNNING"), num_paused=statuses.count("PAUSED"),
            num_finished=sum(s.startswith("FINISHED") for s in statuses),
            num_free_blocks=len(sim.free), num_total_blocks=num_gpu_blocks,
            schedule_ns=schedule_ns, forward_ns=forward_ns, update_ns=update_ns, error=error)
        state = state.apply(record)
        records.append(record)
        states.append(state)
    return SyntheticRun(run_info, initial, arrivals, records, states)


def write_run(run: SyntheticRun, path, upto: int | None = None, **writer_kwargs):
    """Record ``run`` (its first ``upto`` steps, default all) to ``path`` the way the engine would:
    each step's arrivals with ``write_request``, then ``write_step``. Returns the closed writer."""
    from recordings import RecordingWriter

    with RecordingWriter(path, run.run_info, **writer_kwargs) as writer:
        feed(writer, run, 0, len(run.records) if upto is None else upto)
    return writer


def feed(writer, run: SyntheticRun, start: int, stop: int) -> None:
    """Hand steps ``start <= k < stop`` of ``run`` (and their arrivals) to ``writer``."""
    for k in range(start, min(stop, len(run.records))):
        for a in run.arrivals.get(k, []):
            writer.write_request(a.request_id, a.arrival_step, a.arrival_time,
                                 list(a.prompt_token_ids), a.prompt_text, a.sampling)
        writer.write_step(run.records[k])
