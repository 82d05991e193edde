"""One test per scheduler fault case of ``tests/data/cases/scheduler-cases.json`` (the project's copy
of ``../shared/cases/scheduler-cases.json``), read at test time.

Every workload runs through the real ``Scheduler`` and ``KVCacheManager`` inside ``LLMEngine`` with
the fake runner (``fake_runner.py``), with G1-G6 checked after every step (``engine_invariants.py``)
and outputs compared with the reference run (10x blocks, G7); the harness also rebuilds every
state from the step records alone and checks it against the live one. Each case's workload is built
by one function (``WORKLOADS``) and runs once per module (``CaseRuns``), recorded as it runs
(``recordings.file.writer.RecordingWriter``): the case's test checks the live run, and
``test_recording_replays_the_live_run`` checks it "again from the recording": every step's
state and record read back equal the live ones, and G1/G3/G4/G6 hold on the states read from the
file. Block math needs no shift: the engine keeps no reserved null block, T tokens of KV hold
ceil(T / block_size) blocks.

The case with sampling penalties (``recompute-keeps-output-split``) also runs on the tiny random
Llama through the real model runner, since penalties act on logits the fake runner does not have.

Every case runs as a real test (no xfail): ``test_every_case_is_handled`` fails when the cases
file gains one this file does not run.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pytest

from engine.config import ConfigError, EngineConfig
from engine.sched.preemption import preemption_info
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.engine_cases import (CASES, CASES_FILE, SHARED_CASES_FILE, arrivals_and_actions, case, case_prompts,
                          engine_config)
from tests.support.engine_driver import (Action, Arrival, RunResult, assert_outputs_match, distinct_prompt,
                                         reference_outputs, run_workload)
from tests.support.engine_invariants import assert_recording_matches, blocks_for, replay_states
from tests.support.fake_runner import ToyTokenizer, script_next_token
from tests.support.case_metrics import live_summary
from engine.vocab import BlockEventKind, NotAdmittedReason, PreemptionReason


@dataclass(frozen=True)
class Workload:
    """One case's run: what ``run_workload`` gets. Built by one function per case so that the
    live test and the recording re-check run exactly the same thing."""

    config: EngineConfig
    arrivals: list
    actions: list = field(default_factory=list)
    kw: dict = field(default_factory=dict)

    def run(self, **extra) -> RunResult:
        return run_workload(self.config, self.arrivals, self.actions, **self.kw, **extra)

    def run_with_reference(self) -> RunResult:
        """The run, with outputs equal to the reference run's (G7)."""
        result = self.run()
        assert_outputs_match(result, reference_outputs(self.config, self.arrivals, **self.kw))
        return result


def case_workload(case_id: str, **overrides) -> Workload:
    """A case's own requests (numeric arrive_step and prompt_len) under its config."""
    c = case(case_id)
    config = engine_config(c, **overrides)
    return Workload(config, *arrivals_and_actions(c))


def first_scheduled(result, rid: str) -> int:
    return result.scheduled_steps(rid)[0]


# --- clean rejection --------------------------------------------------------------------------
def wl_capacity_never_fits(prefix_caching: bool) -> Workload:
    return case_workload("capacity-never-fits", enable_prefix_caching=prefix_caching)


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_capacity_never_fits(prefix_caching, case_runs):
    c = case("capacity-never-fits")
    w = wl_capacity_never_fits(prefix_caching)
    config = w.config
    result = case_runs.checked("capacity-never-fits" + ("/prefix-cache" if prefix_caching else ""))
    big = c["requests"][0]
    r0 = result.requests[big["id"]]
    assert r0.status is RequestStatus.FINISHED_ERROR
    assert "KV blocks" in r0.error and str(config.num_gpu_blocks) in r0.error   # names the limit
    assert result.finish_step(r0.request_id) <= 1
    assert result.scheduled_steps(r0.request_id) == [] and r0.num_preemptions == 0
    # It never held a block nor ran: no block event names it, its only recorded transition is
    # its rejection, and no state shows it holding blocks.
    assert not any(ev.request_id == r0.request_id for rec in result.records for ev in rec.block_events)
    transitions = [t for rec in result.records for t in rec.transitions if t.request_id == r0.request_id]
    assert [(t.status, t.slot, t.num_computed_tokens) for t in transitions] == [("FINISHED_ERROR", -1, 0)]
    assert all(r0.request_id not in st.request_ids and st.block_ids(r0.request_id) == () for st in result.states)
    for r in c["requests"][1:]:
        req = result.requests[r["id"]]
        assert req.status is RequestStatus.FINISHED_LENGTH and req.num_output_tokens == r["max_tokens"]
        assert result.finish_step(r["id"]) <= 12
    for rec in result.records:   # never idle while someone waits with free blocks and no one runs
        assert not (rec.num_waiting > 0 and rec.num_running == 0 and rec.num_free_blocks > 0
                    and rec.total_num_scheduled_tokens == 0), rec.step


def wl_lone_request() -> Workload:
    return case_workload("lone-request-outgrows-cache")


def test_lone_request_outgrows_cache_rejected_at_admission(case_runs):
    c = case("lone-request-outgrows-cache")
    w = wl_lone_request()
    config = w.config
    result = case_runs.checked("lone-request-outgrows-cache")
    big, small = c["requests"]
    r0 = result.requests[big["id"]]
    # Our documented choice (engine/sched/scheduler.py): rejected at admission when prompt + max_tokens
    # exceeds the cache.
    assert r0.status is RequestStatus.FINISHED_ERROR
    need = blocks_for(big["prompt_len"] + big["max_tokens"], config.block_size)
    assert f"needs {need} KV blocks" in r0.error and f"has {config.num_gpu_blocks} blocks" in r0.error
    assert r0.num_preemptions == 0 and result.scheduled_steps(r0.request_id) == []
    r1 = result.requests[small["id"]]
    assert r1.status is RequestStatus.FINISHED_LENGTH and r1.num_output_tokens == small["max_tokens"]
    assert result.engine.scheduler.kv.num_free_blocks == config.num_gpu_blocks     # G6


# --- admission -------------------------------------------------------------------------------
def wl_parked() -> Workload:
    return case_workload("parked-requests-hold-slots")


def test_parked_requests_hold_no_slots(case_runs):
    c = case("parked-requests-hold-slots")
    w = wl_parked()
    config = w.config
    result = case_runs.checked("parked-requests-hold-slots")
    parked = [r for r in c["requests"] if "pause_step" in r]
    new = [r for r in c["requests"] if "pause_step" not in r]
    assert parked and new and all(ok for _, ok in result.action_results)
    states = replay_states(result)
    abort_step = parked[0]["abort_step"]
    before_abort = states[abort_step - 1]
    held = set()
    for r in parked:
        v = before_abort.view(r["id"])
        blocks = before_abort.block_ids(r["id"])
        assert v.status == "PAUSED" and v.slot is None and blocks, v     # KV kept, no slot
        held |= set(blocks)
        assert result.requests[r["id"]].status is RequestStatus.FINISHED_ABORTED
    for r in new:
        assert first_scheduled(result, r["id"]) <= 4
        assert result.finish_step(r["id"]) <= 13
        assert result.requests[r["id"]].num_output_tokens == r["max_tokens"]
    # The aborts free every block the parked requests held, in the step they happen.
    assert before_abort.num_used_blocks == len(held)
    assert states[abort_step].num_used_blocks == 0
    assert result.records[abort_step].num_free_blocks == config.num_gpu_blocks
    assert states[-1] == result.engine.state()                   # replay == live


# --- preemption storms ---------------------------------------------------------------------
def wl_readmit(prefix_caching: bool) -> Workload:
    return case_workload("readmit-preempt-loop", enable_prefix_caching=prefix_caching)


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_readmit_preempt_loop(prefix_caching, case_runs):
    c = case("readmit-preempt-loop")
    w = wl_readmit(prefix_caching)
    config = w.config
    result = case_runs.checked("readmit-preempt-loop" + ("/prefix-cache" if prefix_caching else ""))
    r0, r1 = c["requests"]
    for r in (r0, r1):
        req = result.requests[r["id"]]
        assert req.status is RequestStatus.FINISHED_LENGTH and req.num_output_tokens == r["max_tokens"]
    # What happens, exactly (the case only bounds it: <= 2 preemptions each, prefill <= 1000).
    # Our documented admission rule admits a waiting request only when the blocks for its whole
    # remaining prefill are free. R0 (300 + 100 tokens: 19 blocks after prefill, 25 at the end)
    # fits the 32 blocks alone, so it never has to preempt; R1 needs 19 free blocks to start, and
    # while R0 holds 19..25 there are at most 13. So R1 waits (token budget during R0's prefill,
    # then no free blocks) until R0 finishes: no preemption at all, each prompt prefilled once.
    bs, total = config.block_size, config.num_gpu_blocks
    assert blocks_for(r0["prompt_len"] + r0["max_tokens"], bs) <= total
    assert total - blocks_for(r0["prompt_len"], bs) < blocks_for(r1["prompt_len"], bs)
    assert result.num_preemptions == 0
    assert [result.requests[r["id"]].num_preemptions for r in (r0, r1)] == [0, 0]
    prompt_total = sum(r["prompt_len"] for r in c["requests"])
    prefill = sum(s.num_tokens for rec in result.records for s in rec.scheduled if s.is_prefill)
    assert prompt_total == 600 and prefill == prompt_total
    assert first_scheduled(result, r1["id"]) == result.finish_step(r0["id"]) + 1
    waits = {rec.not_admitted_reason(r1["id"]) for rec in result.records[:first_scheduled(result, r1["id"])]}
    assert waits == {NotAdmittedReason.TOKEN_BUDGET, NotAdmittedReason.NO_FREE_BLOCKS}
    assert {reason for rec in result.records for _, reason in rec.not_admitted} == waits
    # No repeating cycle: the scheduler state after a step that did something is never seen again.
    seen = set()
    for rec, st in zip(result.records, replay_states(result)):
        if rec.total_num_scheduled_tokens == 0 and not rec.events:
            continue
        key = tuple((v.request_id, v.status, v.num_computed_tokens, v.num_output_tokens)
                    for v in st.requests.values())
        assert key not in seen, f"state repeats at step {rec.step}"
        seen.add(key)


def wl_pressure() -> Workload:
    return case_workload("pressure-many-small")


def test_pressure_many_small(case_runs):
    c = case("pressure-many-small")
    result = case_runs.checked("pressure-many-small")   # per step: victims were running, once each, freed exactly
    assert result.num_preemptions > 0, "the case is meant to force preemptions"
    events = [(rec.step, e.request_id) for rec in result.records for e in rec.events if e.kind == "preempted"]
    assert sorted(events) == sorted((rec.step, rid) for rec in result.records for rid in rec.preempted_ids)
    states = [None] + replay_states(result)
    for rec in result.records:
        before = states[rec.step]
        for rid in rec.preempted_ids:
            assert before.view(rid).status == "RUNNING"
            # A preempted request is back in the waiting queue, holding no blocks, after the step.
            after = states[rec.step + 1]
            assert after.view(rid).status == "PREEMPTED" and after.block_ids(rid) == ()
    for r in c["requests"]:
        req = result.requests[r["id"]]
        assert req.status is RequestStatus.FINISHED_LENGTH and req.num_output_tokens == r["max_tokens"]
    assert sum(r.num_preemptions for r in result.requests.values()) == result.num_preemptions


# --- prefill / decode fairness ---------------------------------------------------------------
def wl_prefill_flood() -> Workload:
    c = case("prefill-flood-vs-decode")
    config = engine_config(c)
    d0, flood = c["requests"]
    lo, hi = map(int, re.search(r"from (\d+) to (\d+)", flood["arrive_step"]).groups())
    arrivals = [Arrival(d0["id"], d0["arrive_step"], distinct_prompt(0, d0["prompt_len"]),
                        SamplingParams(max_tokens=d0["max_tokens"], ignore_eos=True))]
    arrivals += [Arrival(f"P{s}", s, distinct_prompt(s, flood["prompt_len"]),
                         SamplingParams(max_tokens=flood["max_tokens"], ignore_eos=True))
                 for s in range(lo, hi + 1)]
    return Workload(config, arrivals)


def test_prefill_flood_does_not_starve_decode(case_runs):
    d0 = case("prefill-flood-vs-decode")["requests"][0]
    result = case_runs["prefill-flood-vs-decode"]
    steps = result.token_steps(d0["id"])
    assert len(steps) == d0["max_tokens"]
    assert max(b - a for a, b in zip(steps, steps[1:])) <= 2
    assert result.finish_step(d0["id"]) <= 205
    assert max(rec.num_waiting for rec in result.records) > 20, "the prefill queue was meant to grow"
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in result.requests.values())


def long_prefill_sub_case() -> tuple[int, int, int]:
    """Sub-case of prefill-flood-vs-decode: (long prompt, short prompt, max_tokens)."""
    sub = case("prefill-flood-vs-decode")["expect"][1]
    long_len, short_len = map(int, re.search(r"one (\d+)-token prompt L.*a (\d+)-token S", sub).groups())
    return long_len, short_len, int(re.search(r"max_tokens (\d+)", sub).group(1))


def wl_long_prefill(cap: int) -> Workload:
    c = case("prefill-flood-vs-decode")
    long_len, short_len, max_tokens = long_prefill_sub_case()
    # The case sets no max_model_len; ours defaults to 2048, too short for L.
    config = engine_config(c, long_prefill_token_threshold=cap, max_model_len=long_len + 2 * max_tokens)
    return Workload(config, [
        Arrival("L", 0, distinct_prompt(0, long_len), SamplingParams(max_tokens=max_tokens, ignore_eos=True)),
        Arrival("S", 1, distinct_prompt(1, short_len), SamplingParams(max_tokens=max_tokens, ignore_eos=True))])


@pytest.mark.parametrize("cap", [128, 0], ids=["long-prefill-cap", "no-cap"])
def test_long_prefill_vs_short_request(cap, case_runs):
    """Sub-case: one 8192-token prompt L at step 0, a 16-token S at step 1 (max_tokens 4)."""
    long_len, _, _ = long_prefill_sub_case()
    budget = case("prefill-flood-vs-decode")["config"]["max_num_batched_tokens"]
    assert 0 < 128 < budget
    result = case_runs.checked("prefill-flood-vs-decode/" + ("long-prefill-cap" if cap else "no-cap"))
    s = result.requests["S"]
    l_prefill_end = result.token_steps("L")[0]
    if cap:
        assert s.first_token_step - 1 < 2                      # first token within 2 steps of arrival
        assert all(x.num_tokens <= cap for rec in result.records for x in rec.scheduled)
    else:
        # Documented: without a cap the long prefill takes the whole budget and S waits for it.
        assert s.first_token_step >= l_prefill_end
        assert l_prefill_end == -(-long_len // budget) - 1
        for rec in result.records[1:l_prefill_end]:
            assert rec.not_admitted == (("S", NotAdmittedReason.TOKEN_BUDGET),)
            assert rec.not_admitted_reason("S") == NotAdmittedReason.TOKEN_BUDGET


# --- bad input -------------------------------------------------------------------------------
def wl_edge_inputs() -> Workload:
    return case_workload("edge-inputs")


def test_edge_inputs(case_runs):
    c = case("edge-inputs")
    result = case_runs.checked("edge-inputs")
    by_id = {r["id"]: r for r in c["requests"]}
    e0, e1, e2, n = (result.requests[k] for k in ("E0", "E1", "E2", "N"))
    assert by_id["E0"]["prompt_len"] == 0 and by_id["E1"]["max_tokens"] == 0
    assert e0.status is RequestStatus.FINISHED_ERROR and "empty prompt" in e0.error
    assert e1.status is RequestStatus.FINISHED_ERROR and "max_tokens" in e1.error
    for r in (e0, e1):
        assert result.scheduled_steps(r.request_id) == [] and r.num_output_tokens == 0
        assert result.finish_step(r.request_id) == by_id[r.request_id]["arrive_step"]
    # E2: one token, made by its prefill step, TTFT == end-to-end latency, blocks freed that step.
    assert e2.status is RequestStatus.FINISHED_LENGTH and e2.num_output_tokens == 1
    (step,) = result.scheduled_steps("E2")
    assert e2.first_token_step == step == result.finish_step("E2")
    assert e2.ttft == e2.finished_time - e2.arrival_time > 0
    after = replay_states(result)[step]
    assert "E2" not in after.request_ids and after.block_ids("E2") == ()
    v = after.view("E2")                                          # among the recently finished
    assert v.status == "FINISHED_LENGTH" and v.num_output_tokens == 1 and v.ttft == e2.ttft
    freed = [ev for ev in result.records[step].block_events if ev.request_id == "E2"]
    assert [ev.kind for ev in freed] == ["allocated", "freed"] and freed[0].block_ids == freed[1].block_ids
    assert n.status is RequestStatus.FINISHED_LENGTH and n.num_output_tokens == by_id["N"]["max_tokens"]


# --- stop conditions -------------------------------------------------------------------------
def stop_case():
    c = case("stop-string-across-tokens")
    pieces = re.search(r"decodes to the tokens (.*)$", c["config"]["note"]).group(1).split(", ")
    finals = dict(re.findall(r"(\w+) '([^']*)'", next(e for e in c["expect"] if e.startswith("final texts"))))
    return c, pieces, finals


def stop_string_setup():
    """(workload, tokenizer, continuation ids, full continuation text, max_tokens of the longest)."""
    c, pieces, _ = stop_case()
    max_len = max(r["max_tokens"] for r in c["requests"])
    pieces = pieces + [f"{chr(ord('k') + i)}" for i in range(max_len)]   # continuation goes on
    cont_ids = list(range(100, 100 + len(pieces)))
    table = dict(zip(cont_ids, pieces))
    stops = sorted({s for r in c["requests"] for s in r["sampling"]["stop"]})
    prompt_ids = list(range(10, 10 + len(stops)))
    table.update(zip(prompt_ids, stops))            # every stop string also occurs in the prompt
    tok = ToyTokenizer(table)
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_seqs=8, max_num_batched_tokens=64)
    arrivals = [Arrival(r["id"], 0, tuple(prompt_ids),
                        SamplingParams(max_tokens=r["max_tokens"], stop=tuple(r["sampling"]["stop"]),
                                       include_stop_str_in_output=r["sampling"].get("include_stop_str_in_output", False)))
                for r in c["requests"]]
    # A control request without stop strings: the prompt's stop strings never end anything.
    arrivals.append(Arrival("control", 0, tuple(prompt_ids), SamplingParams(max_tokens=max_len)))
    w = Workload(config, arrivals, kw=dict(tokenizer=tok, next_token_fn=script_next_token(cont_ids)))
    return w, tok, cont_ids, tok.decode(cont_ids), max_len


def test_stop_string_across_tokens(case_runs):
    c, _, finals = stop_case()
    w, tok, cont_ids, full, max_len = stop_string_setup()
    result = case_runs["stop-string-across-tokens"]
    assert set(finals) == {r["id"] for r in c["requests"]}
    for r in c["requests"]:
        req = result.requests[r["id"]]
        assert req.output_text == finals[r["id"]], r["id"]
        assert req.status is RequestStatus.FINISHED_STOPPED and req.finish_reason.value == "stop"
        include = r["sampling"].get("include_stop_str_in_output", False)
        matched = [s for s in r["sampling"]["stop"]
                   if (req.output_text.endswith(s) if include else full.startswith(req.output_text + s))]
        assert req.stop_reason in matched, (r["id"], req.stop_reason, matched)
        deltas = [t.text for t in result.streamed[r["id"]]]
        assert "".join(deltas) == req.output_text
        for k in range(len(deltas)):                  # never streams a character later cut
            assert req.output_text.startswith("".join(deltas[:k + 1]))
        assert req.output_token_ids == cont_ids[:req.num_output_tokens]
    ctrl = result.requests["control"]
    assert ctrl.status is RequestStatus.FINISHED_LENGTH and ctrl.output_text == full[:len(tok.decode(cont_ids[:max_len]))]


def stop_at_last_token_setup():
    _, pieces, _ = stop_case()
    cont_ids = list(range(100, 100 + len(pieces)))
    tok = ToyTokenizer(dict(zip(cont_ids, pieces)))
    stop = pieces[-1]
    config = EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=2, max_num_batched_tokens=32)
    arrivals = [Arrival("S", 0, (1, 2, 3), SamplingParams(max_tokens=len(pieces), stop=(stop,)))]
    return Workload(config, arrivals, kw=dict(tokenizer=tok, next_token_fn=script_next_token(cont_ids))), pieces


def test_stop_string_completed_by_the_last_allowed_token_is_a_stop(case_runs):
    """A stop string finished by the max_tokens-th token: finish reason stop, not length."""
    w, pieces = stop_at_last_token_setup()
    result = case_runs["stop-string-across-tokens/last-allowed-token"]
    req = result.requests["S"]
    assert req.status is RequestStatus.FINISHED_STOPPED and req.stop_reason == pieces[-1]
    assert req.output_text == "".join(pieces[:-1]) == "".join(t.text for t in result.streamed["S"])


# --- output after preemption -----------------------------------------------------------------
def wl_recompute() -> Workload:
    return case_workload("recompute-keeps-output-split")


def assert_output_split(c: dict, requests, records, states) -> None:
    """The case's expectations on one run: every request finished by length with the case's
    prompt and output counts, and each preemption of a request mid-decode (with k outputs) is
    followed by a resume prefill covering prompt + k tokens from scratch while the output count
    stays k, then exactly one new token. ``records`` are the run's step records and
    ``states[k]`` the state after step k - 1 (``states[0]`` is None), live or read from a file."""
    preempted_any = False
    for r in c["requests"]:
        req = requests[r["id"]]
        assert req.status is RequestStatus.FINISHED_LENGTH
        assert req.num_output_tokens == r["max_tokens"] and req.num_prompt_tokens == r["prompt_len"]
        v = states[-1].view(r["id"])                           # among the recently finished
        assert (v.num_prompt_tokens, v.num_output_tokens) == (r["prompt_len"], r["max_tokens"])
        for rec in records:
            if r["id"] not in rec.preempted_ids:
                continue
            preempted_any = True
            k = states[rec.step].view(r["id"]).num_output_tokens     # outputs when preempted
            assert 0 < k < r["max_tokens"], "preempted mid-decode"
            # The resume prefill covers prompt + k tokens while the output count stays k.
            later = [x for rr in records[rec.step + 1:] for x in rr.scheduled if x.request_id == r["id"]]
            covered, chunks = 0, []
            for x in later:
                chunks.append(x)
                covered += x.num_tokens
                if covered >= r["prompt_len"] + k:
                    break
            assert chunks[0].num_computed_tokens == 0 and all(x.is_prefill for x in chunks)
            assert covered == r["prompt_len"] + k
            resume_steps = [rr.step for rr in records[rec.step + 1:]
                            if any(x.request_id == r["id"] for x in rr.scheduled)]
            for step in resume_steps[:len(chunks) - 1]:
                assert states[step + 1].view(r["id"]).num_output_tokens == k
            assert states[resume_steps[len(chunks) - 1] + 1].view(r["id"]).num_output_tokens == k + 1
    assert preempted_any, "the case is meant to preempt B mid-decode"
    assert requests[c["requests"][-1]["id"]].num_preemptions >= 1


def test_recompute_keeps_output_split(case_runs):
    """With the fake runner (which has no logits: the case's penalties are left out here and
    tested on a real model below)."""
    c = case("recompute-keeps-output-split")
    result = case_runs.checked("recompute-keeps-output-split")   # outputs equal the reference (greedy)
    assert_output_split(c, result.requests, result.records, [None] + replay_states(result))


@pytest.fixture(scope="module")
def tiny_model(one_torch_thread):
    """The tiny random fp32 Llama (``engine.model.tiny_model``), with torch on one thread (the tiny
    matmuls are many times slower with two on a busy 2-core machine)."""
    from engine.model.tiny_model import tiny_llama

    return tiny_llama(seed=0)


def run_on_model(model, config: EngineConfig, arrivals, **kw) -> RunResult:
    """``run_workload`` through the real ``ModelRunner`` on a copy of ``model`` (the runner
    switches its model's attention implementation)."""
    import copy

    from engine.runner.model_runner import ModelRunner

    runner = ModelRunner(copy.deepcopy(model), config.num_gpu_blocks, config.block_size)
    return run_workload(config, arrivals, runner=runner, **kw)


def generate_with_penalties(model, prompt, params: SamplingParams) -> list[int]:
    """transformers ``generate()`` alone, greedy, with its own repetition penalty (prompt +
    output) and a frequency penalty over the generated tokens written here: an implementation of
    the same semantics independent of ``engine.runner.penalties``."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class FrequencyPenalty(LogitsProcessor):
        def __call__(self, input_ids, scores):
            out = input_ids[:, len(prompt):]
            counts = torch.zeros_like(scores).scatter_add_(1, out, torch.ones_like(out, dtype=scores.dtype))
            return scores - params.frequency_penalty * counts

    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=params.max_tokens, eos_token_id=-1, pad_token_id=0,
                             repetition_penalty=params.repetition_penalty,
                             logits_processor=LogitsProcessorList([FrequencyPenalty()]))
    return out[0, len(prompt):].tolist()


def test_recompute_keeps_output_split_with_penalties(tiny_model, tmp_path):
    """The case as specified, penalties on, on the tiny random Llama through the real model
    runner (fp32, CPU): B is preempted mid-decode and recomputed, both outputs equal the
    reference run (10x blocks, no preemption) and transformers ``generate()`` with the same
    penalties, and the recording shows the output split."""
    from recordings.file.open_reader import open_reader

    c = case("recompute-keeps-output-split")
    config = engine_config(c)
    arrivals, _ = arrivals_and_actions(c, with_sampling=True, vocab=tiny_model.config.vocab_size)
    for a in arrivals:
        assert a.params.repetition_penalty == 1.2 and a.params.frequency_penalty == 0.5, a.params
        assert a.params.is_greedy
    result = run_on_model(tiny_model, config, arrivals, record_to=tmp_path / "run.sqlite")
    reference = run_on_model(tiny_model, config.replace(num_gpu_blocks=10 * config.num_gpu_blocks), arrivals)
    assert reference.num_preemptions == 0 and result.num_preemptions >= 1
    assert_outputs_match(result, reference.outputs())
    plain = [Arrival(a.request_id, a.arrive_step, a.prompt,
                     SamplingParams(max_tokens=a.params.max_tokens, ignore_eos=True)) for a in arrivals]
    without = run_on_model(tiny_model, config.replace(num_gpu_blocks=10 * config.num_gpu_blocks), plain)
    for a in arrivals:
        out = result.requests[a.request_id].output_token_ids
        assert out == generate_with_penalties(tiny_model, a.prompt, a.params), a.request_id
        assert out != without.requests[a.request_id].output_token_ids, "the penalties changed nothing"
    # Everything again from the recording: its records and states are the live ones, and they show
    # the split; the reported prompt / completion token counts are the case's.
    assert_recording_matches(result)
    with open_reader(result.recording) as reader:
        n = reader.latest_step() + 1
        records = reader.records(0, n)
        states = [None] + [reader.state_at(k) for k in range(n)]
        infos = {r["id"]: reader.request_info(r["id"]) for r in c["requests"]}
    assert_output_split(c, result.requests, records, states)
    for r in c["requests"]:
        info = infos[r["id"]]
        assert (info.num_prompt_tokens, info.num_output_tokens) == (r["prompt_len"], r["max_tokens"])
        assert info.sampling["repetition_penalty"] == 1.2 and info.sampling["frequency_penalty"] == 0.5


# --- metrics -------------------------------------------------------------------------------
def metrics_case():
    c = case("metrics-after-preemption")
    reqs = []
    a = next(r for r in c["requests"] if r["id"] == "A")
    for i, r in enumerate(c["requests"]):
        m = re.match(r"prefix_of (\w+) (\d+) tokens", str(r.get("prompt", "")))
        if m:   # W: the first n tokens of another request's prompt
            src = next(j for j, q in enumerate(c["requests"]) if q["id"] == m.group(1))
            r = {**r, "prompt_len": int(m.group(2)), "_prefix_of": src}
        reqs.append(r)
    assert a["prompt_len"] >= 32
    return c, reqs


def wl_metrics(prefix_caching: bool = False) -> Workload:
    c, reqs = metrics_case()
    config = engine_config(c, enable_prefix_caching=prefix_caching)
    arrivals = []
    for i, r in enumerate(reqs):
        src = r.get("_prefix_of", i)
        prompt = distinct_prompt(src, reqs[src]["prompt_len"])[:r["prompt_len"]]
        arrivals.append(Arrival(r["id"], r.get("arrive_step", 0), prompt,
                                SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True)))
    return Workload(config, arrivals)


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_metrics_after_preemption(prefix_caching, case_runs):
    """From the live engine (recomputed from the recording:
    ``test_metrics_recomputed_from_the_recording``), with and without prefix caching."""
    result = case_runs.checked("metrics-after-preemption" + ("/prefix-cache" if prefix_caching else ""))
    reqs_live = result.requests.values()
    n_events = sum(1 for rec in result.records for e in rec.events if e.kind == "preempted")
    assert result.num_preemptions == n_events == sum(r.num_preemptions for r in reqs_live) > 0
    produced = [r for r in reqs_live if r.num_output_tokens > 0]
    assert len([r for r in reqs_live if r.ttft is not None]) == len(produced) == len(reqs_live)
    for r in reqs_live:
        first = result.token_steps(r.request_id)[0]
        assert r.first_token_step == first and r.first_token_time == first + 1   # never overwritten
        assert r.ttft == first + 1 - r.arrival_time > 0
        e2e = r.finished_time - r.arrival_time
        assert e2e >= r.ttft
        assert r.token_times == sorted(r.token_times) and len(r.token_times) == r.num_output_tokens
        if r.num_preemptions:
            assert r.first_token_step < max(rec.step for rec in result.records
                                            if r.request_id in rec.preempted_ids)
    for rec in result.records:
        assert 0.0 <= rec.kv_cache_usage <= 1.0
        assert 0 <= rec.prefix_cache_hits <= rec.prefix_cache_queries
    # Prefix-cache counters: each admission queries the request's tokens and hits its shared
    # blocks (hit events), in tokens; a request starts from its first admission's hit.
    bs = result.engine.config.block_size
    admitted = [(rec, e.request_id) for rec in result.records for e in rec.events if e.kind == "scheduled"]
    queries = sum(s.num_computed_tokens + s.num_tokens if s.is_prefill else s.num_computed_tokens + 1
                  for rec, rid in admitted for s in rec.scheduled if s.request_id == rid)
    hits = sum(len(ev.block_ids) * bs for rec in result.records for ev in rec.block_events
               if ev.kind == BlockEventKind.HIT)
    total_q = sum(rec.prefix_cache_queries for rec in result.records)
    total_h = sum(rec.prefix_cache_hits for rec in result.records)
    if prefix_caching:
        assert total_q >= queries > 0 and total_h == hits
        assert 0.0 <= total_h / total_q <= 1.0
        for r in reqs_live:
            assert 0 <= r.num_cached_tokens <= r.num_prompt_tokens - 1
    else:
        assert total_q == total_h == hits == 0
    # The state's metrics (columns) agree with the engine's requests: TTFT and mean ITL per
    # request, as the view of each request showed them in the step it finished.
    for rec, st in zip(result.records, result.states):
        for t in rec.transitions:
            if t.status.startswith("FINISHED"):
                v, r = st.view(t.request_id), result.requests[t.request_id]
                assert v.ttft == r.ttft and v.mean_itl == pytest.approx(r.mean_itl), t.request_id


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no-prefix-cache", "prefix-cache"])
def test_metrics_recomputed_from_the_recording(prefix_caching, case_runs):
    """Every metric recomputed from the recording equals the live value."""
    from recordings.file.open_reader import open_reader
    from recordings.metrics.run_metrics import summarize

    result = case_runs["metrics-after-preemption" + ("/prefix-cache" if prefix_caching else "")]
    assert_recording_matches(result)
    reqs_live = result.requests.values()
    n_events = sum(1 for rec in result.records for e in rec.events if e.kind == "preempted")
    produced = [r for r in reqs_live if r.num_output_tokens > 0]
    with open_reader(result.recording) as reader:
        summary = summarize(reader)
        info = {rid: reader.request_info(rid) for rid in result.requests}
        records = reader.records(0, reader.latest_step() + 1)
    live = live_summary(result)
    assert summary == live
    rate = summary.prefix_cache_hit_rate
    assert (rate is not None) == prefix_caching and (rate is None or 0.0 <= rate <= 1.0)
    assert ("prefix cache hits / queries" in summary.format_table()) == prefix_caching
    assert summary.num_preemptions == n_events == result.num_preemptions
    assert summary.ttft.num_samples == len(produced) == len(reqs_live)
    assert summary.ttft.p50 == float(np.percentile([r.ttft for r in reqs_live], 50))
    first_token_step = {}
    for rec in records:
        for t in rec.new_tokens:
            first_token_step.setdefault(t.request_id, rec.step)
    for r in reqs_live:
        i = info[r.request_id]
        assert i.ttft == r.ttft and i.num_preemptions == r.num_preemptions
        # TTFT and E2E recomputed from the rows: a token made in step s has time s + 1.
        assert first_token_step[r.request_id] + 1 - i.arrival_time == r.ttft
        assert i.finish_step + 1 - i.arrival_time == r.finished_time - r.arrival_time >= r.ttft
        assert i.status == r.status.value and i.num_output_tokens == r.num_output_tokens


def test_recompute_after_preemption_hits_its_own_cached_blocks():
    """readmit-preempt-loop's "repeat with prefix caching on: the recompute mostly hits the cache
    unless its blocks were evicted", where our admission rule lets a preemption happen: the
    recompute-keeps-output-split workload preempts B mid-decode. With prefix caching B's
    readmission starts from its own full blocks that are still cached (all of them unless
    evicted), so it recomputes less than prompt + output; outputs still equal the reference."""
    result = case_workload("recompute-keeps-output-split", enable_prefix_caching=True).run_with_reference()
    bs = result.engine.config.block_size
    rehit = 0
    tables: dict[str, list[int]] = {}
    tags: dict[int, int] = {}
    for rec in result.records:
        for rid in rec.preempted_ids:
            held = tables[rid]
            readmit = next(r for r in result.records[rec.step + 1:]
                           if any(e.request_id == rid and e.kind == "scheduled" for e in r.events))
            evicted = {b for r in result.records[rec.step:readmit.step + 1] for ev in r.block_events
                       if ev.kind == BlockEventKind.EVICTED for b in ev.block_ids}
            hit = next((ev.block_ids for ev in readmit.block_events
                        if ev.kind == BlockEventKind.HIT and ev.request_id == rid), ())
            cached_then = [b for b in held if b in tags]       # its full, written, tagged blocks
            num_tokens = result.requests[rid].num_prompt_tokens + sum(
                1 for r in result.records[:rec.step] for t in r.new_tokens if t.request_id == rid)
            # every hit block is one of its own; the hit stops only at an evicted block or at
            # the cap (the last token is always computed)
            assert list(hit) == cached_then[:len(hit)]
            assert (len(hit) == len(cached_then) or cached_then[len(hit)] in evicted
                    or len(hit) == (num_tokens - 1) // bs), (rid, hit, cached_then, evicted)
            entry = next(s for s in readmit.scheduled if s.request_id == rid)
            assert entry.num_computed_tokens == len(hit) * bs
            rehit += len(hit)
        for ev in rec.block_events:
            if ev.kind in ("allocated", BlockEventKind.HIT):
                tables.setdefault(ev.request_id, []).extend(ev.block_ids)
            elif ev.kind == "freed":
                tables.pop(ev.request_id)
            elif ev.kind == BlockEventKind.CACHED:
                tags.update(zip(ev.block_ids, ev.block_hashes))
            elif ev.kind == BlockEventKind.EVICTED:
                for b in ev.block_ids:
                    tags.pop(b)
    assert result.num_preemptions > 0 and rehit > 0, "the preempted request re-hit nothing"


# --- prefix caching ---------------------------------------------------------------------------
def prompt_workload(case_id: str, **overrides) -> Workload:
    """A case whose requests give ``prompt`` phrases (``same_as``, ``prefix_of`` ...)."""
    c = case(case_id)
    prompts = case_prompts(c)
    arrivals = [Arrival(r["id"], r.get("arrive_step", 0), prompts[r["id"]],
                        SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True))
                for r in c["requests"]]
    actions = [Action(r["abort_step"], "abort", r["id"]) for r in c["requests"] if "abort_step" in r]
    return Workload(engine_config(c, **overrides), arrivals, actions)


def block_events_of(result, kind: str, rid: str | None = None) -> list[tuple[int, tuple[int, ...]]]:
    """(step, block ids) of every block event of ``kind`` (of ``rid`` if given)."""
    return [(rec.step, ev.block_ids) for rec in result.records for ev in rec.block_events
            if ev.kind == kind and (rid is None or ev.request_id == rid)]


def wl_stale_hash() -> Workload:
    return prompt_workload("stale-hash-after-reuse")


def test_stale_hash_after_reuse(case_runs):
    """X's cached blocks are evicted and reused by R1; R2 (same prompt as X) then finds no stale
    entry: 0 cached tokens, output equal to the reference. The pool's hash map is checked every
    step (each entry names a block tagged with that hash whose tokens hash to it, and the fake
    runner's cache holds exactly those tokens in it)."""
    result = case_runs.checked("stale-hash-after-reuse")
    x_blocks = {b for _, blocks in block_events_of(result, BlockEventKind.CACHED, "R0") for b in blocks}
    assert len(x_blocks) == 2                           # X: 8 tokens = 2 full blocks, cached
    evicted = {b for _, blocks in block_events_of(result, BlockEventKind.EVICTED, "R1") for b in blocks}
    r1_blocks = {b for _, blocks in block_events_of(result, "allocated", "R1") for b in blocks}
    assert x_blocks <= evicted and x_blocks <= r1_blocks   # evicted, then reused by R1
    r2 = result.requests["R2"]
    assert r2.num_cached_tokens == 0 and not block_events_of(result, BlockEventKind.HIT, "R2")
    admit = first_scheduled(result, "R2")
    assert (result.records[admit].prefix_cache_queries, result.records[admit].prefix_cache_hits) == (8, 0)
    for rid in ("R0", "R1", "R2"):
        assert result.requests[rid].status is RequestStatus.FINISHED_LENGTH


def wl_same_step() -> Workload:
    return prompt_workload("same-step-shared-prefix")


def test_same_step_shared_prefix(case_runs):
    """Three requests sharing a prefix admitted in one step: nothing is a hit in that step (no
    block's KV was written by a completed step yet), so R1 reports 0 cached tokens and is not
    deferred (our documented choice); outputs equal the solo references."""
    c = case("same-step-shared-prefix")
    result = case_runs.checked("same-step-shared-prefix")
    for r in c["requests"]:
        assert first_scheduled(result, r["id"]) == 0
        assert result.requests[r["id"]].num_cached_tokens == 0
    assert not block_events_of(result, BlockEventKind.HIT)
    prompts = [a.prompt for a in wl_same_step().arrivals]
    assert (result.records[0].prefix_cache_queries, result.records[0].prefix_cache_hits) == (
        sum(map(len, prompts)), 0)
    # After step 0 one block per distinct full-block prefix is cached (R1's copies of R0's
    # blocks, and R2's of R0's first two, stay untagged: one block per hash).
    bs = result.engine.config.block_size
    prefixes = {tuple(p[:(k + 1) * bs]) for p in prompts for k in range(len(p) // bs)}
    cached0 = [blocks for step, blocks in block_events_of(result, BlockEventKind.CACHED) if step == 0]
    assert sum(len(b) for b in cached0) == len(prefixes)
    ref = reference_outputs(result.engine.config, wl_same_step().arrivals)
    solo = {a.request_id: reference_outputs(result.engine.config, [a])[a.request_id]
            for a in wl_same_step().arrivals}
    assert ref == solo == result.outputs()


def wl_full_hit() -> Workload:
    return prompt_workload("full-hit-at-block-boundary")


def test_full_hit_at_block_boundary(case_runs):
    """A prompt whose blocks are all cached still computes at least its last token: the hit is
    capped at num_tokens - 1, rounded down to whole blocks; R1 and R2 share R0's first block."""
    c = case("full-hit-at-block-boundary")
    w = wl_full_hit()
    result = case_runs.checked("full-hit-at-block-boundary")
    bs = w.config.block_size
    prompts = {a.request_id: a.prompt for a in w.arrivals}
    out = result.outputs()
    assert out["R1"] == out["R0"] and out["R2"] == out["R0"][:1]
    r0_blocks = len(prompts["R0"]) // bs                   # R0's full prompt blocks, cached
    for r in c["requests"]:
        rid, req = r["id"], result.requests[r["id"]]
        assert req.status is RequestStatus.FINISHED_LENGTH
        p = prompts[rid]
        common = next((k for k, (a, b) in enumerate(zip(p, prompts["R0"])) if a != b), min(len(p), len(prompts["R0"])))
        want = 0 if rid == "R0" else min((len(p) - 1) // bs, common // bs, r0_blocks) * bs
        assert req.num_cached_tokens == want <= len(p) - 1, (rid, req.num_cached_tokens, want)
        entry = result.records[first_scheduled(result, rid)]
        s = next(x for x in entry.scheduled if x.request_id == rid)
        assert s.num_computed_tokens == want and s.num_tokens >= 1
        assert s.num_computed_tokens + s.num_tokens == len(p)   # the rest of the prompt, one chunk
    assert result.requests["R4"].num_cached_tokens == 2 * bs    # R0 + 1 token: both blocks hit
    # R1 and R2 (admitted together at step 6) both share R0's first (cached-free) block into
    # their tables in that step: held twice until R2 finishes at the end of it.
    hits = {rid: block_events_of(result, BlockEventKind.HIT, rid) for rid in ("R1", "R2")}
    assert hits["R1"] == hits["R2"] == [(first_scheduled(result, "R1"), hits["R1"][0][1])]


def wl_abort_shared(stagger: int = 0) -> Workload:
    w = prompt_workload("abort-shared-blocks")
    arrivals = [a if a.request_id in ("G1", "H") else
                Arrival(a.request_id, a.arrive_step + stagger, a.prompt, a.params) for a in w.arrivals]
    return Workload(w.config, arrivals, w.actions)


@pytest.mark.parametrize("stagger", [0, 1], ids=["as-given", "G2-G3-a-step-later"])
def test_abort_shared_blocks(stagger, case_runs):
    """Aborting requests that share blocks: counts drop to 0 (never below), every block is then
    free or cached-free, and H (608 tokens: nearly the whole cache) gets distinct blocks,
    evicting the cached ones, with the right output. As given, G1-G3 arrive together (no hit in
    their first step: each computes its own blocks); staggered by a step, G2 and G3 share G1's
    first block (reference count 3) until the aborts."""
    w = wl_abort_shared(stagger)
    result = case_runs.checked("abort-shared-blocks" + ("/staggered" if stagger else ""))
    abort_step = w.actions[0].step
    states = replay_states(result)
    before = states[abort_step - 1]
    ref = before.block_ref_cnt()
    if stagger:
        assert ref.max() == 3 and result.requests["G2"].num_cached_tokens == w.config.block_size
    else:
        assert ref.max() == 1
    after = states[abort_step]
    assert after.num_used_blocks == 0 and after.block_ref_cnt().min() == 0
    assert result.records[abort_step].num_free_blocks == w.config.num_gpu_blocks      # G6
    assert after.cached_free_mask().sum() == len(
        {b for step, blocks in block_events_of(result, BlockEventKind.CACHED) if step <= abort_step for b in blocks})
    h = result.requests["H"]
    h_blocks = [b for _, blocks in block_events_of(result, "allocated", "H") for b in blocks]
    assert len(set(h_blocks)) == len(h_blocks) == blocks_for(608, w.config.block_size)
    cached_free = set(np.flatnonzero(after.cached_free_mask()).tolist())
    evicted = {b for _, blocks in block_events_of(result, BlockEventKind.EVICTED, "H") for b in blocks}
    assert evicted == cached_free & set(h_blocks)      # what H took of the cache was evicted
    assert h.status is RequestStatus.FINISHED_LENGTH and h.num_cached_tokens == 0


# --- priority -----------------------------------------------------------------------------------
def wl_priority(h_priority: int = 0) -> Workload:
    c = case("priority-at-seq-cap")
    w = case_workload("priority-at-seq-cap")
    arrivals = [a if a.request_id != "H" else dataclasses.replace(
        a, params=dataclasses.replace(a.params, priority=h_priority)) for a in w.arrivals]
    assert [r["id"] for r in c["requests"]] == ["L1", "L2", "H"]
    return dataclasses.replace(w, arrivals=arrivals)


def test_priority_at_seq_cap(case_runs):
    result = case_runs.checked("priority-at-seq-cap")
    h_arrival = next(a.arrive_step for a in wl_priority().arrivals if a.request_id == "H")
    start = first_scheduled(result, "H")
    assert start <= h_arrival + 1, f"H started at step {start}, arrived at {h_arrival}"
    # ... by preempting L2 (lowest priority, latest arrival), and only L2
    pre = [(rec.step, rid) for rec in result.records for rid in rec.preempted_ids]
    assert pre == [(start, "L2")]
    ev = next(e for rec in result.records for e in rec.events if e.kind == "preempted")
    info = preemption_info(ev.detail)
    assert (info.reason, info.for_request, info.mode) == (PreemptionReason.FOR_PRIORITY, "H", "recompute")
    assert info.num_tokens > 16 and info.count == 1       # its prompt and some decoded tokens
    assert result.requests["H"].num_output_tokens == 10
    assert all(result.requests[r].num_output_tokens == 200 for r in ("L1", "L2"))


def test_priority_equal_never_preempts(case_runs):
    result = case_runs.checked("priority-at-seq-cap/equal")
    assert result.num_preemptions == 0
    # H waits for a slot: its reason names the seq cap while L1 and L2 run
    h_arrival = next(a.arrive_step for a in wl_priority().arrivals if a.request_id == "H")
    rec = result.records[h_arrival]
    assert rec.not_admitted_reason("H") == NotAdmittedReason.SEQ_CAP
    assert first_scheduled(result, "H") > h_arrival + 100


def test_priority_queue_wait_from_recording(case_runs):
    """The recording gives H's queue wait in steps: arrival step to its first ``scheduled``
    event, both read from the file."""
    from recordings.file.open_reader import open_reader

    result = case_runs["priority-at-seq-cap"]
    with open_reader(result.recording) as reader:
        info = reader.request_info("H")
        scheduled = [e.step for e in reader.request_timeline("H") if e.kind == "scheduled"]
    assert scheduled[0] - info.arrival_step == first_scheduled(result, "H") - 5 <= 1


# --- swap ---------------------------------------------------------------------------------------
def wl_swap() -> Workload:
    return case_workload("swap-before-new-prefills")


def test_swap_before_new_prefills(case_runs):
    c = case("swap-before-new-prefills")
    result = case_runs.checked("swap-before-new-prefills")         # all finish, outputs equal the reference, G6
    assert all(result.requests[r["id"]].num_output_tokens == r["max_tokens"] for r in c["requests"])
    outs, ins, cpu_used = [], [], []
    swapped_before: list[str] = []
    for rec, st in zip(result.records, result.states):
        out_now = [e.request_id for e in rec.block_events if e.kind == BlockEventKind.SWAPPED_OUT]
        in_now = [e.request_id for e in rec.block_events if e.kind == BlockEventKind.SWAPPED_IN]
        started = [x.request_id for x in rec.scheduled if x.num_computed_tokens == 0]
        if swapped_before or out_now:       # no new request starts prefill in such a step
            assert not started, (rec.step, started, swapped_before, out_now)
        outs += out_now
        ins += in_now
        swapped_before = [v.request_id for v in st.queue("swapped")]
        cpu_used.append(int(np.count_nonzero(st.cpu_owner >= 0)))
    assert outs and ins == outs, "swapped requests come back in FIFO order"
    assert max(cpu_used) <= c["config"]["num_cpu_blocks"]
    modes = collections.Counter(preemption_info(e.detail).mode for rec in result.records
                                for e in rec.events if e.kind == "preempted")
    assert modes["swap"] == len(outs)
    # a recompute here is only ever the fallback of a swap that would overflow the CPU pool
    assert set(modes) <= {"swap", "recompute_fallback"}
    assert result.runner.num_swapped_blocks == 2 * sum(
        len(e.block_ids) for rec in result.records for e in rec.block_events if e.kind == BlockEventKind.SWAPPED_OUT)


def test_swap_falls_back_to_recompute_when_the_cpu_pool_is_full():
    """The same workload with a CPU pool of 2 blocks (a victim holds 3 or more once its prompt
    is in): preemptions fall back to recompute, recorded as such (the harness checks each one
    found the pool too full), and outputs still equal the reference."""
    w = case_workload("swap-before-new-prefills", num_cpu_blocks=2)
    result = w.run_with_reference()
    modes = collections.Counter(preemption_info(e.detail).mode for rec in result.records
                                for e in rec.events if e.kind == "preempted")
    assert modes["recompute_fallback"] > modes["swap"]


def test_swap_knobs_are_checked():
    with pytest.raises(ConfigError, match="num_cpu_blocks >= 1"):
        EngineConfig(preemption_mode="swap")
    with pytest.raises(ConfigError, match="num_cpu_blocks=4 is only used with preemption_mode='swap'"):
        EngineConfig(num_cpu_blocks=4)


# --- every case's run, again from its recording -------------------------------------------------
WORKLOADS = {
    "capacity-never-fits": lambda: wl_capacity_never_fits(False),
    "capacity-never-fits/prefix-cache": lambda: wl_capacity_never_fits(True),
    "readmit-preempt-loop/prefix-cache": lambda: wl_readmit(True),
    "metrics-after-preemption/prefix-cache": lambda: wl_metrics(True),
    "stale-hash-after-reuse": wl_stale_hash,
    "same-step-shared-prefix": wl_same_step,
    "full-hit-at-block-boundary": wl_full_hit,
    "abort-shared-blocks": wl_abort_shared,
    "abort-shared-blocks/staggered": lambda: wl_abort_shared(1),
    "lone-request-outgrows-cache": wl_lone_request,
    "parked-requests-hold-slots": wl_parked,
    "readmit-preempt-loop": lambda: wl_readmit(False),
    "pressure-many-small": wl_pressure,
    "prefill-flood-vs-decode": wl_prefill_flood,
    "prefill-flood-vs-decode/long-prefill-cap": lambda: wl_long_prefill(128),
    "prefill-flood-vs-decode/no-cap": lambda: wl_long_prefill(0),
    "edge-inputs": wl_edge_inputs,
    "stop-string-across-tokens": lambda: stop_string_setup()[0],
    "stop-string-across-tokens/last-allowed-token": lambda: stop_at_last_token_setup()[0],
    "recompute-keeps-output-split": wl_recompute,
    "metrics-after-preemption": wl_metrics,
    "priority-at-seq-cap": wl_priority,
    "priority-at-seq-cap/equal": lambda: wl_priority(10),
    "swap-before-new-prefills": wl_swap,
}


class CaseRuns:
    """Each case's run of :data:`WORKLOADS`, recorded during its one run (to a file in
    ``folder``) and shared by the tests that read it: the case's own test checks the live run,
    ``test_recording_replays_the_live_run`` the file. A run that fails is not kept."""

    def __init__(self, folder) -> None:
        self.folder = folder
        self.runs: dict[str, RunResult] = {}

    def __getitem__(self, name: str) -> RunResult:
        if name not in self.runs:
            path = self.folder / f"{name.replace('/', '--')}.sqlite"
            path.unlink(missing_ok=True)            # (left by a run that failed)
            self.runs[name] = WORKLOADS[name]().run(record_to=path)
        return self.runs[name]

    def checked(self, name: str) -> RunResult:
        """The run, with outputs equal to the reference run's (G7)."""
        w = WORKLOADS[name]()
        result = self[name]
        assert_outputs_match(result, reference_outputs(w.config, w.arrivals, **w.kw))
        return result


@pytest.fixture(scope="module")
def case_runs(tmp_path_factory) -> CaseRuns:
    return CaseRuns(tmp_path_factory.mktemp("case-runs"))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_recording_replays_the_live_run(name, case_runs):
    """The cases README's "again from the recording": each case's run recorded, read back step by
    step (records and states equal the live ones) and G1/G3/G4/G6 re-checked on the file's states."""
    result = case_runs[name]
    assert_recording_matches(result)


# --- every case has a test ---------------------------------------------------------------------
HANDLED = {"capacity-never-fits", "lone-request-outgrows-cache", "parked-requests-hold-slots",
           "readmit-preempt-loop", "pressure-many-small", "prefill-flood-vs-decode", "edge-inputs",
           "stop-string-across-tokens", "recompute-keeps-output-split", "metrics-after-preemption",
           "stale-hash-after-reuse", "same-step-shared-prefix", "full-hit-at-block-boundary",
           "abort-shared-blocks", "priority-at-seq-cap", "swap-before-new-prefills"}


def test_every_handled_case_is_re_checked_from_a_recording():
    assert {name.split("/")[0] for name in WORKLOADS} == HANDLED


def test_every_case_is_handled():
    case("capacity-never-fits")                # skips when the cases file is missing
    assert set(CASES) == HANDLED, f"cases without a test: {sorted(set(CASES) - HANDLED)}"


def test_the_shipped_cases_are_the_shared_ones():
    """tests/data/cases is a copy: it must not drift from ../shared/cases where that exists."""
    if not SHARED_CASES_FILE.is_file():
        pytest.skip(f"nothing to compare with: {SHARED_CASES_FILE} is absent (a plain clone)")
    assert CASES_FILE.read_bytes() == SHARED_CASES_FILE.read_bytes()


def test_abort_shared_blocks_unit_part():
    """abort-shared-blocks is a prefix-cache case, but its unit line applies to our block pool:
    freeing a block list that names one block twice is rejected, counts never go negative."""
    from engine.kv.manager import BlockPool

    c = case("abort-shared-blocks")
    assert any("names one block twice" in e for e in c["expect"])
    pool = BlockPool(c["config"]["num_gpu_blocks"])
    blocks = pool.allocate(2)
    with pytest.raises(ValueError):
        pool.free([blocks[0], blocks[0]])
    assert pool.ref_cnt[blocks[0]] == 1 and min(pool.ref_cnt) >= 0
    pool.free(blocks)
    with pytest.raises(ValueError):
        pool.free(blocks)
    assert min(pool.ref_cnt) == 0 and pool.num_free_blocks == pool.num_blocks
