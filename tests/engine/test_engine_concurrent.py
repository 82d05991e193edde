"""The engine's request API under concurrent control: aborts, pauses and resumes of random
requests from a second thread and from the runner's own callback while steps are in flight
(between ``schedule()`` and ``update_from_output``), with the invariants checked every step.

What must hold (vLLM's behaviour for an abort during a step): the request ends FINISHED_ABORTED,
its blocks are freed once, the step's output for it is dropped (its tokens stop where the abort
found them), and every other request's result is applied (each request that finishes normally
has exactly the reference output of the fake model)."""
from __future__ import annotations

import random
import threading

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import RequestStatus, SamplingParams
from tests.support.fake_runner import FakeRunner, reference_output
from tests.support.runner_state import assert_runner_matches_scheduler

BASE = dict(block_size=4, num_gpu_blocks=40, max_model_len=96, max_num_seqs=6,
            max_num_batched_tokens=24, check_invariants=True)
CONFIGS = {
    "fcfs-prefix": EngineConfig(**BASE, enable_prefix_caching=True),
    "fcfs-swap": EngineConfig(**BASE, preemption_mode="swap", num_cpu_blocks=24),
    "priority": EngineConfig(**BASE, policy="priority"),
    "static-unchunked": EngineConfig(**{**BASE, "max_num_batched_tokens": 96}, policy="static",
                                     enable_chunked_prefill=False),
}


def make_engine(config: EngineConfig) -> tuple[LLMEngine, FakeRunner]:
    runner = FakeRunner(config.num_gpu_blocks, config.block_size, num_cpu_blocks=config.num_cpu_blocks)
    return LLMEngine(config, runner, config.num_gpu_blocks), runner


def test_abort_while_step_in_flight_drops_its_output_and_applies_the_others():
    engine, runner = make_engine(EngineConfig(**BASE))
    done = engine.collect_finished()
    engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=4), request_id="a")
    engine.add_request([6, 7, 8], SamplingParams(max_tokens=4), request_id="b")
    seen: dict[str, int] = {}

    def abort_a(sched):
        if sched.step == 1:
            seen["a"] = len(engine.requests["a"].output_token_ids)
            assert engine.abort_request("a")
            assert engine.abort_request("a") is False         # once
    runner.during_execute = abort_a
    records = engine.run_until_done(20)
    assert done["a"].status is RequestStatus.FINISHED_ABORTED
    assert len(done["a"].output_token_ids) == seen["a"] == 1             # step 1's token dropped
    assert done["b"].output_token_ids == reference_output([6, 7, 8], 4)  # the rest applied
    assert runner.released.count("a") == 1
    assert "a" not in engine.scheduler.kv.block_tables
    assert any(e.kind == "aborted" and e.request_id == "a" for e in records[1].events)
    assert not any(t.request_id == "a" for r in records[1:] for t in r.new_tokens)


@pytest.mark.parametrize("action", ["pause_request", "pause_then_resume"])
def test_pause_while_step_in_flight(action):
    engine, runner = make_engine(EngineConfig(**BASE))
    done = engine.collect_finished()
    engine.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=5), request_id="a")
    engine.add_request([6, 7, 8], SamplingParams(max_tokens=5), request_id="b")

    def pause_a(sched):
        if sched.step == 2:
            assert engine.pause_request("a")
            if action == "pause_then_resume":
                assert engine.resume_request("a")
    runner.during_execute = pause_a
    for _ in range(3):
        engine.step()
    if action == "pause_request":
        assert engine.requests["a"].status is RequestStatus.PAUSED
        assert engine.resume_request("a")
    engine.run_until_done(40)
    assert done["a"].output_token_ids == reference_output([1, 2, 3, 4, 5], 5)
    assert done["b"].output_token_ids == reference_output([6, 7, 8], 5)


class Chaos:
    """Random aborts, pauses and resumes of the engine's requests, from the runner's callback
    (the stepping thread, mid-step) and from a second thread (in a handshake mid-step, and
    freely in between)."""

    def __init__(self, engine: LLMEngine, seed: int) -> None:
        self.engine = engine
        self.rng = random.Random(seed)
        self.ids: list[str] = []
        self.aborted_at: dict[str, int] = {}     # id -> its output length when the abort took
        self.errors: list[BaseException] = []
        self.go = threading.Event()
        self.acted = threading.Event()
        self.stop = threading.Event()
        self.in_flight_actions = 0

    def act(self, rng: random.Random) -> None:
        with self.engine.lock:
            live = list(self.engine.requests)
        if not self.ids:
            return
        rid = rng.choice(live if live and rng.random() < 0.9 else self.ids)   # sometimes a finished one
        kind = rng.choices(("abort", "pause", "resume"), weights=(1, 3, 4))[0]
        eng = self.engine
        if kind == "abort":
            with eng.lock:
                req = eng.requests.get(rid)
                n = None if req is None else len(req.output_token_ids)
                if eng.abort_request(rid):
                    self.aborted_at[rid] = n
        elif kind == "pause":
            eng.pause_request(rid)
        else:
            eng.resume_request(rid)

    def during_execute(self, sched) -> None:
        """The runner's callback: act here, or let the second thread act now, mid-step."""
        r = self.rng.random()
        if r < 0.15:
            self.act(self.rng)
            self.in_flight_actions += 1
        elif r < 0.3:
            self.go.set()
            assert self.acted.wait(10), "the second thread did not act"
            self.acted.clear()
            self.in_flight_actions += 1

    def second_thread(self) -> None:
        rng = random.Random(self.rng.random())
        try:
            while not self.stop.is_set():
                if self.go.wait(0.001):
                    self.go.clear()
                    for _ in range(rng.randint(1, 3)):
                        self.act(rng)
                    self.acted.set()
                elif rng.random() < 0.2:
                    self.act(rng)       # free-running: between steps or mid-step, as it falls
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)
            self.acted.set()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_control_from_two_threads_during_thousands_of_steps(name):
    config = CONFIGS[name]
    engine, runner = make_engine(config)
    finished: dict[str, object] = {}

    def on_finished(req):
        assert req.request_id not in finished, f"{req.request_id} finished twice"
        finished[req.request_id] = req
    engine.add_finished_listener(on_finished)
    chaos = Chaos(engine, seed=sum(map(ord, name)))
    runner.during_execute = chaos.during_execute
    thread = threading.Thread(target=chaos.second_thread, daemon=True)
    thread.start()
    rng = random.Random(7)
    prompts: dict[str, tuple[list[int], int]] = {}
    shared = [rng.randrange(1000) for _ in range(12)]      # a common prefix for prefix caching
    try:
        for step in range(2000):
            if step < 1800 and rng.random() < 0.35:
                rid = f"r{len(prompts)}"
                prompt = shared[:rng.randint(0, 12)] + [rng.randrange(1000) for _ in range(rng.randint(1, 14))]
                prompts[rid] = (prompt, rng.randint(1, 12))
                engine.add_request(prompt, SamplingParams(max_tokens=prompts[rid][1]), request_id=rid)
                chaos.ids.append(rid)
            engine.step()          # check_invariants: the scheduler's G1-G4 and the state, every step
            with engine.lock:
                assert_runner_matches_scheduler(engine.scheduler, runner.input_batch)
            assert not chaos.errors, chaos.errors
            assert not runner.violations, runner.violations
    finally:
        runner.during_execute = None
        chaos.stop.set()
        thread.join(10)
    assert not chaos.errors, chaos.errors
    for rid in list(engine.scheduler.requests):
        engine.resume_request(rid)
    engine.run_until_done(5000)
    assert set(finished) == set(prompts)
    assert chaos.in_flight_actions > 300 and len(chaos.aborted_at) > 20
    assert len(runner.released) == len(set(runner.released))          # released once each
    for rid, req in finished.items():
        prompt, max_tokens = prompts[rid]
        ref = reference_output(prompt, max_tokens)
        if rid in chaos.aborted_at:
            assert req.status is RequestStatus.FINISHED_ABORTED
            n = chaos.aborted_at[rid]
            assert len(req.output_token_ids) == (n or 0), f"{rid}: output grew after its abort"
            assert req.output_token_ids == ref[:len(req.output_token_ids)], rid
        else:
            assert req.status is RequestStatus.FINISHED_LENGTH, (rid, req.status, req.error)
            assert req.output_token_ids == ref, rid
    assert engine.scheduler.kv.num_free_blocks == engine.scheduler.kv.num_usable_blocks
