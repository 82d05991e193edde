"""A deterministic fake run for UI tests: a tiny FCFS scheduler with chunked prefill over a
64-block paged cache and 4 batch slots, producing real StepRecords; the states are built with
``EngineState.apply`` exactly as a recording reader would."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.outputs import (NOT_ADMITTED_NO_FREE_BLOCKS, NOT_ADMITTED_SEQ_CAP,
                            NOT_ADMITTED_TOKEN_BUDGET, NewToken, RequestEvent, RequestView,
                            ScheduledRequest, SchedulerOutput, StepRecord)
from engine.state import EngineState

WORDS = ("the", " cache", " fills", " one", " block", " at", " a", " time", " while", " new",
         " requests", " wait", " their", " turn", ",", " and", " tokens", " stream", " out", ".")

# (prompt tokens, max_tokens, arrival step, stop early after n tokens or None)
WORKLOAD = ((120, 18, 0, None), (260, 14, 0, None), (64, 30, 2, None), (150, 20, 5, 9),
            (230, 16, 8, None), (180, 22, 11, None))


@dataclass
class _Req:
    rid: str
    prompt: int
    max_tokens: int
    arrival: int
    stop_after: int | None = None
    status: str = "PENDING"
    computed: int = 0
    outputs: int = 0
    slot: int | None = None
    blocks: list[int] = field(default_factory=list)
    first_token_step: int | None = None
    token_steps: list[int] = field(default_factory=list)
    error: str | None = None

    def view(self) -> RequestView:
        itl = None
        if len(self.token_steps) >= 2:
            itl = (self.token_steps[-1] - self.token_steps[0]) / (len(self.token_steps) - 1)
        reason = {"FINISHED_LENGTH": "length", "FINISHED_STOPPED": "stop",
                  "FINISHED_ABORTED": "abort", "FINISHED_ERROR": "error"}.get(self.status)
        return RequestView(
            self.rid, self.status, self.arrival, float(self.arrival), self.prompt, self.outputs,
            self.computed, self.max_tokens, tuple(self.blocks), self.slot, 0,
            None if self.first_token_step is None else float(self.first_token_step - self.arrival),
            itl, reason, self.error)


class FakeRun:
    """Steps a toy scheduler; each ``step()`` returns the next StepRecord."""

    def __init__(self, num_blocks=64, block_size=16, max_num_seqs=4, budget=96, workload=WORKLOAD,
                 error_at: int | None = None):
        self.num_blocks, self.block_size, self.max_num_seqs, self.budget = (
            num_blocks, block_size, max_num_seqs, budget)
        self.reqs = [_Req(f"req-{i}", *w) for i, w in enumerate(workload)]
        self.free = list(range(num_blocks))
        self.step_index = 0
        self.error_at = error_at
        self.ns = 0

    def add(self, prompt_tokens: int, max_tokens: int) -> str:
        r = _Req(f"req-{len(self.reqs)}", prompt_tokens, max_tokens, self.step_index)
        self.reqs.append(r)
        return r.rid

    def _finish(self, r: _Req, status: str) -> None:
        r.status, r.slot = status, None
        self.free.extend(r.blocks)
        r.blocks = []

    def step(self) -> StepRecord:
        k, bs = self.step_index, self.block_size
        changed: dict[str, _Req] = {}
        events: list[RequestEvent] = []
        for r in self.reqs:
            if r.status == "PENDING" and r.arrival <= k:
                r.status = "WAITING"
                changed[r.rid] = r
                events.append(RequestEvent(r.rid, "arrived"))
        budget, sched, not_admitted = self.budget, [], []
        running = sorted((r for r in self.reqs if r.status == "RUNNING"), key=lambda r: r.slot)
        for r in running + [r for r in self.reqs if r.status == "WAITING"]:
            total = r.prompt + r.outputs
            n = min(total - r.computed, budget)
            need = math.ceil((r.computed + n) / bs) - len(r.blocks)
            if r.status == "WAITING":
                used = {x.slot for x in self.reqs if x.status == "RUNNING"}
                reason = (NOT_ADMITTED_SEQ_CAP if len(used) >= self.max_num_seqs else
                          NOT_ADMITTED_TOKEN_BUDGET if n <= 0 else
                          NOT_ADMITTED_NO_FREE_BLOCKS if need > len(self.free) else None)
                if reason:
                    not_admitted.append((r.rid, reason))
                    continue
                r.status = "RUNNING"
                r.slot = min(set(range(self.max_num_seqs)) - used)
                events.append(RequestEvent(r.rid, "scheduled"))
            if n <= 0 or need > len(self.free):
                continue
            new = tuple(self.free.pop(0) for _ in range(need))
            r.blocks.extend(new)
            sched.append(ScheduledRequest(r.rid, r.slot, n, r.computed, r.outputs == 0 or
                                          r.computed < total - 1, new, tuple(r.blocks)))
            budget -= n
            r.computed += n
            changed[r.rid] = r
        new_tokens = []
        for s in sched:
            r = next(x for x in self.reqs if x.rid == s.request_id)
            if r.computed == r.prompt + r.outputs:
                new_tokens.append(NewToken(r.rid, r.outputs, 1000 + r.outputs,
                                           WORDS[(r.outputs + int(r.rid[4:])) % len(WORDS)]))
                r.outputs += 1
                r.token_steps.append(k)
                if r.first_token_step is None:
                    r.first_token_step = k
                if r.outputs >= r.max_tokens or r.outputs == r.stop_after:
                    self._finish(r, "FINISHED_LENGTH" if r.outputs >= r.max_tokens
                                 else "FINISHED_STOPPED")
                    events.append(RequestEvent(r.rid, "finished"))
        error = None
        if k == self.error_at and sched:
            r = next(x for x in self.reqs if x.rid == sched[-1].request_id)
            error = r.error = "RuntimeError: CUDA out of memory (fake)"
            self._finish(r, "FINISHED_ERROR")
            changed[r.rid] = r
        dur = 4_000_000 + 20_000 * sum(s.num_tokens for s in sched)
        start, self.ns = self.ns, self.ns + dur + 500_000
        count = {q: sum(1 for r in self.reqs if r.status == q) for q in ("WAITING", "RUNNING")}
        rec = StepRecord(
            k, start, start + dur, float(k), SchedulerOutput(k, tuple(sched), (), tuple(not_admitted)),
            tuple(new_tokens), tuple(events), tuple(r.view() for r in changed.values()),
            count["WAITING"], count["RUNNING"], 0,
            sum(1 for r in self.reqs if r.status.startswith("FINISHED")), len(self.free),
            self.num_blocks, error=error)
        self.step_index += 1
        return rec


class FakeSource:
    """StepSource over a FakeRun that has been stepped ``num_steps`` times."""

    def __init__(self, num_steps: int = 40, **run_kwargs):
        self.run = FakeRun(**run_kwargs)
        self._records: list[StepRecord] = []
        self._states = [EngineState(-1, 0.0, self.run.num_blocks, self.run.block_size,
                                    self.run.max_num_seqs)]
        self.advance(num_steps)

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            rec = self.run.step()
            self._records.append(rec)
            self._states.append(self._states[-1].apply(rec))

    def run_info(self) -> dict:
        return {"model": "fake/SmolLM2-135M", "device": "cpu", "dtype": "float32", "trace": None,
                "started_at": "2025-01-01T00:00:00",
                "config": {"block_size": self.run.block_size, "num_gpu_blocks": self.run.num_blocks,
                           "max_num_seqs": self.run.max_num_seqs,
                           "max_num_batched_tokens": self.run.budget}}

    def latest_step(self) -> int:
        return len(self._records) - 1

    def state_at(self, step: int) -> EngineState:
        return self._states[max(-1, min(step, self.latest_step())) + 1]

    def records(self, start: int, stop: int) -> list[StepRecord]:
        return self._records[max(start, 0):max(stop, 0)]

    def request_text(self, request_id: str, step: int) -> str:
        return "".join(t.text for rec in self._records[:max(step + 1, 0)]
                       for t in rec.new_tokens if t.request_id == request_id)


class FakeControl:
    """EngineControl that records every call; step_once advances the fake run by one step."""

    def __init__(self, source: FakeSource):
        self.source = source
        self.calls: list[tuple] = []
        self.paused = False
        self.error: str | None = None

    def pause(self) -> None:
        self.calls.append(("pause",))
        self.paused = True

    def resume(self) -> None:
        self.calls.append(("resume",))
        self.paused = False

    def step_once(self) -> None:
        self.calls.append(("step_once",))
        self.source.advance(1)

    def is_paused(self) -> bool:
        return self.paused

    def add_request(self, prompt: str, max_tokens: int, temperature: float = 0.0,
                    top_p: float = 1.0, seed: int | None = None) -> str:
        self.calls.append(("add_request", prompt, max_tokens, temperature, top_p, seed))
        return self.source.run.add(max(1, len(prompt.split())), max_tokens)

    def abort_request(self, request_id: str) -> None:
        self.calls.append(("abort_request", request_id))

    def pause_request(self, request_id: str) -> None:
        self.calls.append(("pause_request", request_id))

    def resume_request(self, request_id: str) -> None:
        self.calls.append(("resume_request", request_id))

    def last_error(self) -> str | None:
        return self.error

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]
