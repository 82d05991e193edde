"""Run one scheduler case *as data* (the format of ``tests/data/cases/scheduler-cases.json``)
through the real scheduler with every check the cases README asks for, so that hand-written
variants (``tests/data/cases/scheduler-case-variants.json``) and generated ones
(``test_case_fuzz.py``) share one path:

- G1-G6 after every step, from the engine and from the step records (``engine_invariants``);
- G7: outputs equal the reference run (10x blocks, no prefix cache; a parallel-sampling prompt's
  sequences as separate requests);
- "again from the recording": the run is recorded, read back step by step and re-checked
  (``assert_recording_matches``), and the run summary recomputed from the file equals the live one;
- the case kinds' expectations that hold for every workload (:func:`check_case_properties`);
- the variant's own machine-readable ``checks`` (:func:`check_expectations`).

A case is a dict: ``config`` (``EngineConfig`` knobs, vLLM names), ``requests`` (``id``,
``arrive_step``, ``prompt_len`` or a ``prompt`` phrase of ``engine_cases.case_prompts``,
``max_tokens``, optional ``priority``, ``n``, ``seed``, ``abort_step`` / ``pause_step`` /
``resume_step``), optional ``actions`` (``{"step", "kind", "id", "value"}`` of
``engine_driver.ACTIONS`` / ``VALUE_ACTIONS``) and ``expect`` (plain language) with ``checks``.
"""
from __future__ import annotations

import collections
from pathlib import Path

from engine.config import EngineConfig
from engine.request import SamplingParams
from engine.vocab import RequestStatus
from tests.support.engine_cases import case_prompts, engine_config
from tests.support.engine_driver import (Action, Arrival, RunResult, assert_outputs_match, reference_outputs,
                                         run_workload, solo_arrivals)
from tests.support.engine_invariants import assert_recording_matches

REQUEST_ACTIONS = ("pause", "resume", "abort")


def build_workload(case: dict) -> tuple[EngineConfig, list[Arrival], list[Action]]:
    """The case's engine config, arrivals (prompt ids from ``case_prompts``, EOS ignored,
    greedy unless ``seed`` is given) and user actions. Raises ``ValueError`` for an unknown
    prompt phrase (``case_prompts``)."""
    config = engine_config(case)
    prompts = case_prompts(case)
    arrivals, actions = [], []
    for r in case["requests"]:
        seed = r.get("seed")
        params = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True, priority=r.get("priority", 0),
                                n=r.get("n", 1), seed=seed, temperature=0.0 if seed is None else 1.0)
        arrivals.append(Arrival(r["id"], r.get("arrive_step", 0), prompts[r["id"]], params))
        for kind in REQUEST_ACTIONS:
            if f"{kind}_step" in r:
                actions.append(Action(r[f"{kind}_step"], kind, r["id"]))
    for a in case.get("actions", ()):
        actions.append(Action(a["step"], a["kind"], a.get("id", ""), a.get("value", 0)))
    actions.sort(key=lambda a: a.step)          # (stable: same-step actions keep their order)
    return config, arrivals, actions


def run_case(case: dict, tmp_path: Path, *, record: bool = True, make_runner=None) -> RunResult:
    """Run ``case`` with every check (see the module docstring); returns the run.
    ``make_runner(config)`` gives the runner of the run and of its reference run (default: the
    fake runner of ``engine_driver``; e.g. ``ModelRunner.from_config`` on a real model)."""
    config, arrivals, actions = build_workload(case)
    path = tmp_path / f"{case.get('id', 'case')}.sqlite" if record else None
    if path is not None and path.exists():
        path.unlink()
    runner = None if make_runner is None else make_runner(config)
    result = run_workload(config, arrivals, actions, record_to=path, runner=runner)
    if make_runner is None:
        reference = reference_outputs(config, solo_arrivals(arrivals))
    else:                   # the README's reference run, on the same kind of runner
        ref = config.replace(num_gpu_blocks=10 * config.num_gpu_blocks, enable_prefix_caching=False)
        reference = run_workload(ref, solo_arrivals(arrivals), runner=make_runner(ref)).outputs()
    assert_outputs_match(result, reference)
    check_case_properties(result)
    if record:
        assert_recording_matches(result)
        check_summary_from_recording(result)
    check_expectations(case, result)
    return result


def check_case_properties(result: RunResult) -> None:
    """The expectations of the case kinds that hold for any workload:

    - clean rejection / liveness: no step ends with requests waiting (or swapped out), none
      running, free blocks and nothing scheduled (capacity-never-fits);
    - preemption: counted once per event, per request and per step (metrics-after-preemption);
    - prefix cache: reported cached tokens in [0, prompt_len - 1] (full-hit-at-block-boundary),
      per-step hits <= queries (metrics-after-preemption);
    - metrics: TTFT recorded once, at the first token (never overwritten by a re-prefill);
      end-to-end latency >= TTFT; token times non-decreasing (metrics-after-preemption);
    - swap: CPU swap use never above ``num_cpu_blocks`` (swap-before-new-prefills).
    """
    e = result.engine
    cfg = e.config
    for rec, st in zip(result.records, result.states):
        swapped = len(st.queue("swapped"))
        idle = (rec.num_waiting + swapped > 0 and rec.num_running == 0 and rec.num_free_blocks > 0
                and rec.total_num_scheduled_tokens == 0)
        assert not idle, (f"step {rec.step}: {rec.num_waiting} waiting, {swapped} swapped, none running, "
                          f"{rec.num_free_blocks} free blocks and nothing scheduled")
        assert 0 <= rec.prefix_cache_hits <= rec.prefix_cache_queries
        if cfg.num_cpu_blocks:
            used = sum(1 for o in st.cpu_owner if o >= 0)
            assert used <= cfg.num_cpu_blocks
    events = collections.Counter(ev.request_id for rec in result.records for ev in rec.events
                                 if ev.kind == "preempted")
    assert sum(events.values()) == result.num_preemptions == sum(r.num_preemptions for r in result.requests.values())
    for rid, req in result.requests.items():
        assert req.num_preemptions == events[rid], rid
        if rid in result.rejected:
            assert req.num_output_tokens == 0 and req.first_token_time is None
            continue
        if req.num_cached_tokens >= 0:
            assert req.num_cached_tokens <= req.num_prompt_tokens - 1, (rid, req.num_cached_tokens)
        steps = result.token_steps(rid)
        assert len(steps) == req.num_output_tokens, rid
        if steps:
            assert req.first_token_step == steps[0] and req.first_token_time == steps[0] + 1, rid
            assert req.ttft == req.first_token_time - req.arrival_time > 0, rid
            assert req.finished_time - req.arrival_time >= req.ttft, rid
            assert req.token_times == sorted(req.token_times) and len(req.token_times) == len(steps), rid
        else:
            assert req.first_token_time is None and req.ttft is None, rid


def check_summary_from_recording(result: RunResult) -> None:
    """Every metric recomputed from the recording (``recordings.metrics.run_metrics.summarize``) equals the live
    value, and per request the stored TTFT, preemptions, status and output count."""
    from recordings.file.open_reader import open_reader
    from recordings.metrics.run_metrics import summarize
    from tests.support.case_metrics import live_summary

    with open_reader(result.recording) as reader:
        summary = summarize(reader)
        infos = {rid: reader.request_info(rid) for rid in result.requests}
    assert summary == live_summary(result)
    rate = summary.prefix_cache_hit_rate
    assert rate is None or 0.0 <= rate <= 1.0
    for rid, r in result.requests.items():
        i = infos[rid]
        assert (i.status, i.num_output_tokens, i.num_preemptions) == (
            r.status.value, r.num_output_tokens, r.num_preemptions), rid
        assert i.ttft == r.ttft, rid


def check_expectations(case: dict, result: RunResult) -> None:
    """A variant's ``checks``, each keyed by request id unless said:

    ``status`` (final status), ``error_contains`` (substrings of the error), ``num_output_tokens``,
    ``finish_by_step`` (its finish event at or before), ``first_scheduled_by`` (first scheduled at
    or before), ``never_scheduled`` (list of ids), ``max_preemptions`` (each request, at most),
    ``num_preemptions`` (per id, exactly), ``min_total_preemptions`` / ``max_total_preemptions``
    (the run), ``num_cached_tokens`` (per id, exactly), ``max_prefill_tokens`` (prefill tokens
    computed in the run, at most), ``same_output`` (pairs of ids with equal outputs),
    ``preempted_first`` (the id of the first request ever preempted), ``modes`` (allowed
    preemption modes), ``drained`` (every GPU block free at the end: G6, also with prefix caching),
    ``max_token_gap`` (per id: steps between two of its tokens, at most).
    Raises ``KeyError`` for an unknown check (so a typo in the data fails loudly)."""
    from engine.sched.preemption import preemption_info

    checks = case.get("checks", {})
    known = {"status", "error_contains", "num_output_tokens", "finish_by_step", "first_scheduled_by",
             "never_scheduled", "max_preemptions", "num_preemptions", "min_total_preemptions",
             "max_total_preemptions", "num_cached_tokens", "max_prefill_tokens", "same_output",
             "preempted_first", "modes", "drained", "max_token_gap"}
    unknown = set(checks) - known
    if unknown:
        raise KeyError(f"{case.get('id')}: unknown checks {sorted(unknown)}")
    reqs = result.requests
    for rid, status in checks.get("status", {}).items():
        assert reqs[rid].status is RequestStatus(status), (rid, reqs[rid].status, reqs[rid].error)
    for rid, parts in checks.get("error_contains", {}).items():
        for part in parts:
            assert part in (reqs[rid].error or ""), (rid, reqs[rid].error, part)
    for rid, n in checks.get("num_output_tokens", {}).items():
        assert reqs[rid].num_output_tokens == n, (rid, reqs[rid].num_output_tokens)
    for rid, step in checks.get("finish_by_step", {}).items():
        done = result.finish_step(rid)
        assert done is not None and done <= step, (rid, done, step)
    for rid, step in checks.get("first_scheduled_by", {}).items():
        sched = result.scheduled_steps(rid)
        assert sched and sched[0] <= step, (rid, sched[:1], step)
    for rid in checks.get("never_scheduled", ()):
        assert not result.scheduled_steps(rid), rid
    if "max_preemptions" in checks:
        worst = max((r.num_preemptions for r in reqs.values()), default=0)
        assert worst <= checks["max_preemptions"], worst
    for rid, n in checks.get("num_preemptions", {}).items():
        assert reqs[rid].num_preemptions == n, (rid, reqs[rid].num_preemptions)
    if "min_total_preemptions" in checks:
        assert result.num_preemptions >= checks["min_total_preemptions"], result.num_preemptions
    if "max_total_preemptions" in checks:
        assert result.num_preemptions <= checks["max_total_preemptions"], result.num_preemptions
    for rid, n in checks.get("num_cached_tokens", {}).items():
        assert reqs[rid].num_cached_tokens == n, (rid, reqs[rid].num_cached_tokens)
    if "max_prefill_tokens" in checks:
        prefill = sum(s.num_tokens for rec in result.records for s in rec.scheduled if s.is_prefill)
        assert prefill <= checks["max_prefill_tokens"], prefill
    for a, b in checks.get("same_output", ()):
        assert reqs[a].output_token_ids == reqs[b].output_token_ids, (a, b)
    preempted = [rid for rec in result.records for rid in rec.preempted_ids]
    if "preempted_first" in checks:
        assert preempted and preempted[0] == checks["preempted_first"], preempted[:3]
    if "modes" in checks:
        modes = {preemption_info(ev.detail).mode for rec in result.records for ev in rec.events
                 if ev.kind == "preempted"}
        assert modes <= set(checks["modes"]), modes
    if checks.get("drained"):
        kv = result.engine.scheduler.kv
        assert kv.num_free_blocks == kv.num_blocks
    for rid, gap in checks.get("max_token_gap", {}).items():
        steps = result.token_steps(rid)
        assert max((b - a for a, b in zip(steps, steps[1:])), default=0) <= gap, (rid, steps)
