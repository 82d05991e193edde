"""Scheduling policies (priority, static) on the bare scheduler, in the style of vLLM's
``tests/v1/core/test_scheduler.py``: add requests, ``schedule()``, hand-build the runner's output,
``update_from_output()``, assert who runs, who waits and why."""
from __future__ import annotations

import pytest

from engine.config import ConfigError, EngineConfig
from engine.outputs import not_admitted_reason
from engine.sched.preemption import preemption_info
from engine.vocab import RequestStatus
from engine.sched.queue import FCFSQueue, PriorityQueue
from tests.engine.sched.test_scheduler import add, ids, make_request, make_scheduler, sample_all, tokens
from engine.vocab import NotAdmittedReason, PreemptionReason


def run_step(s, step):
    out = s.schedule(step)
    s.update_from_output(out, sample_all(out, s), float(step + 1), step)
    return out


def preemptions(s):
    return [(e.request_id, preemption_info(e.detail)) for e in s.take_events() if e.kind == "preempted"]


# --- queues ----------------------------------------------------------------------------------
def test_priority_queue_orders_by_priority_then_arrival():
    q = PriorityQueue()
    reqs = [make_request(f"r{i}", 4, priority=p) for i, p in enumerate([5, 1, 5, 0, 1])]
    for i, r in enumerate(reqs):
        r.seq = i
        q.add(r)
    assert ids(q) == ["r3", "r1", "r4", "r0", "r2"]
    q.remove(reqs[1])
    reqs[2].priority = -1
    q.reorder(reqs[2])
    assert [q.pop().request_id for _ in range(len(q))] == ["r2", "r3", "r4", "r0"]
    with pytest.raises(IndexError):
        q.peek()


def test_fcfs_queue_prepend_goes_first():
    q = FCFSQueue()
    a, b, c = (make_request(x, 4) for x in "abc")
    q.add(a)
    q.add(b)
    q.prepend(c)
    assert ids(q) == ["c", "a", "b"] and q.pop() is c


# --- priority --------------------------------------------------------------------------------
def test_waiting_queue_served_by_priority():
    s = make_scheduler(policy="priority", max_num_seqs=2)
    add(s, make_request("low", 4, priority=3), make_request("mid", 4, priority=2),
        make_request("high", 4, priority=1))
    out = run_step(s, 0)
    assert ids(out.scheduled) == ["high", "mid"]
    assert out.not_admitted == (("low", NotAdmittedReason.SEQ_CAP),)


def test_higher_priority_preempts_lowest_newest_running():
    s = make_scheduler(policy="priority", max_num_seqs=3)
    add(s, make_request("a", 4, 50, priority=5), make_request("b", 4, 50, priority=7),
        make_request("c", 4, 50, priority=7))
    run_step(s, 0)
    s.take_events()
    add(s, make_request("h", 4, 4, priority=1))
    out = run_step(s, 1)
    assert out.preempted_ids == ("c",)                      # priority 7, the later arrival
    (victim, info), = preemptions(s)
    assert victim == "c" and (info.reason, info.for_request, info.num_tokens) == (PreemptionReason.FOR_PRIORITY, "h", 4)
    assert "h" in ids(out.scheduled) and s.requests["c"].status is RequestStatus.PREEMPTED
    assert ids(s.running) == ["h", "a", "b"]                # kept in (priority, arrival) order


def test_equal_priority_never_preempts():
    s = make_scheduler(policy="priority", max_num_seqs=2)
    add(s, make_request("a", 4, 50, priority=2), make_request("b", 4, 50, priority=2))
    run_step(s, 0)
    add(s, make_request("c", 4, 4, priority=2))
    out = run_step(s, 1)
    assert out.preempted_ids == () and out.not_admitted == (("c", NotAdmittedReason.SEQ_CAP),)


def test_priority_preempts_only_when_it_lets_the_request_start():
    # 8 blocks of 4 tokens: a (prio 0) holds 4 blocks, b (prio 9) 2; h (prio 1) needs 5 blocks:
    # preempting b frees only 2 + 2 free = 4 < 5, so nobody is preempted.
    s = make_scheduler(num_blocks=8, policy="priority", max_model_len=64)
    add(s, make_request("a", 16, 8, priority=0), make_request("b", 8, 8, priority=9))
    run_step(s, 0)
    add(s, make_request("h", 20, 1, priority=1))
    out = run_step(s, 1)
    assert out.preempted_ids == ()
    assert out.not_admitted == (("h", NotAdmittedReason.NO_FREE_BLOCKS),)


def test_memory_preemption_takes_lowest_priority():
    # Three decoding requests outgrow 6 blocks of 4 tokens; the victim is the lowest priority.
    s = make_scheduler(num_blocks=6, policy="priority", max_model_len=64)
    add(s, make_request("x", 7, 10, priority=9), make_request("y", 7, 10, priority=0),
        make_request("z", 7, 10, priority=4))
    step, victims = 0, []
    while not victims and step < 20:
        run_step(s, step)
        victims = preemptions(s)
        step += 1
    assert victims and victims[0][0] == "x" and victims[0][1].reason == PreemptionReason.NEEDED_BLOCKS


def test_lower_priority_reason_for_those_behind():
    s = make_scheduler(policy="priority", max_num_seqs=1)
    add(s, make_request("run", 4, 50, priority=0))
    run_step(s, 0)
    add(s, make_request("p1", 4, priority=1), make_request("p1b", 4, priority=1),
        make_request("p5", 4, priority=5))
    out = run_step(s, 1)
    prio = {r.request_id: r.priority for r in s.requests.values()}.get
    assert out.not_admitted == (("p1", NotAdmittedReason.SEQ_CAP),)
    assert not_admitted_reason(out, "p1b", prio) == NotAdmittedReason.BEHIND
    assert not_admitted_reason(out, "p5", prio) == NotAdmittedReason.LOWER_PRIORITY


def test_set_priority_moves_a_waiting_request_up():
    s = make_scheduler(policy="priority", max_num_seqs=1)
    add(s, make_request("run", 4, 3), make_request("a", 4), make_request("b", 4))
    run_step(s, 0)
    assert ids(s.waiting) == ["a", "b"]
    assert s.set_priority("b", -1)
    assert ids(s.waiting) == ["b", "a"]
    assert [e.kind for e in s.take_events()][-1] == "priority"


def test_priority_without_priority_policy_is_rejected():
    s = make_scheduler()
    r = make_request("p", 4, priority=3)
    assert not s.add_request(r)
    assert r.status is RequestStatus.FINISHED_ERROR and "policy='priority'" in r.error
    with pytest.raises(ValueError, match="policy='priority'"):
        s.set_priority("x", 1)


def test_unknown_policy_names_the_choices():
    with pytest.raises(ConfigError, match="policy must be one of.*'lifo'"):
        EngineConfig(policy="lifo")


# --- static ----------------------------------------------------------------------------------
def test_static_admits_next_batch_only_when_the_whole_batch_finished():
    s = make_scheduler(policy="static", max_num_seqs=2)
    add(s, make_request("a", 4, 1), make_request("b", 4, 3), make_request("c", 4, 2))
    out = run_step(s, 0)
    assert ids(out.scheduled) == ["a", "b"]               # a finishes here (1 token)
    assert s.static_batch == {"b"}
    assert out.not_admitted == (("c", NotAdmittedReason.STATIC_BATCH),)
    out = run_step(s, 1)
    assert ids(out.scheduled) == ["b"] and out.waiting_reason == NotAdmittedReason.STATIC_BATCH
    assert not_admitted_reason(out, "c") == NotAdmittedReason.STATIC_BATCH   # a slot is idle
    run_step(s, 2)                                          # b finishes
    out = run_step(s, 3)
    assert ids(out.scheduled) == ["c"] and s.static_batch == {"c"}
    assert out.not_admitted == ()


def test_static_batch_members_behind_a_blocked_member():
    # 6 blocks of 4: a takes 4 blocks; b (needs 3) cannot start, c (member) is behind b,
    # d (not a member: max_num_seqs 3) waits for the next batch.
    s = make_scheduler(num_blocks=6, policy="static", max_num_seqs=3, max_model_len=64)
    add(s, make_request("a", 16, 2), make_request("b", 12, 1), make_request("c", 4, 1),
        make_request("d", 4, 1))
    out = run_step(s, 0)
    assert ids(out.scheduled) == ["a"] and s.static_batch == {"a", "b", "c"}
    assert dict(out.not_admitted) == {"b": NotAdmittedReason.NO_FREE_BLOCKS, "c": NotAdmittedReason.BEHIND}
    assert not_admitted_reason(out, "d") == NotAdmittedReason.STATIC_BATCH
    out = run_step(s, 1)                                    # a finishes, still blocks b
    out = run_step(s, 2)
    assert ids(out.scheduled) == ["b", "c"] and tokens(out) == {"b": 12, "c": 4}
    assert dict(out.not_admitted) == {"d": NotAdmittedReason.STATIC_BATCH}
