"""recordings.compare.comparison / recordings.compare.fairness on recordings of the real engine (fake runner)."""
from __future__ import annotations
from tests.support.paths import FIXTURES

import numpy as np
import pytest

from tests.support.engine_driver import run_engine
from recordings.file.open_reader import open_reader
from recordings.compare.comparison import compare_recordings
from recordings.compare.fingerprint import WorkloadMismatch, check_same_workload, workload_fingerprint
from recordings.compare.requests import PARTS, request_times
from recordings.compare.fairness import bucket_edges, jain_index, latency_by_prompt_bucket


def _run(path, seed=3, **kw):
    """A plain workload (no user actions, no failed steps), so runs differ only by config."""
    kw.setdefault("num_gpu_blocks", 20)
    return run_engine(path, seed=seed, num_requests=16, fail_steps=(), p_action=0.0, keep_states=False,
                      arrivals_per_step=2.0, **kw)


def test_latency_parts_add_up_to_e2e_and_match_the_token_times(tmp_path):
    run = _run(tmp_path / "a.sqlite", num_gpu_blocks=12)       # tight: preemptions happen
    reader = open_reader(run.path)
    t = request_times(reader)
    served = np.isfinite(t.e2e)
    assert served.sum() >= 10
    total = sum(t.parts[p] for p in PARTS)
    np.testing.assert_allclose(total[served], t.e2e[served], atol=1e-9)
    for p in PARTS:
        assert np.all(t.parts[p][served] >= -1e-9), p
    # E2E = last token time - arrival, from the recorded tokens
    last = {t.request_id: r.token_time for r in reader.records(0, reader.latest_step() + 1)
            for t in r.new_tokens}
    arrival = dict(reader.execute("SELECT request_id, arrival_time FROM requests"))
    for i in np.flatnonzero(served):
        rid = t.request_ids[i]
        assert t.e2e[i] == pytest.approx(last[rid] - arrival[rid])
    # preemptions as recorded, and time preempted only for preempted requests
    recorded = dict(reader.execute("SELECT request_id, count(*) FROM events JOIN requests USING (seq) "
                                   "WHERE kind = 'preempted' GROUP BY seq"))
    assert recorded, "the tight cache should preempt someone"
    assert {rid: int(n) for rid, n in zip(t.request_ids, t.num_preemptions) if n} == recorded
    assert np.all(t.parts["preempted"][served & (t.num_preemptions == 0)] == 0)
    assert np.any(t.parts["preempted"][served & (t.num_preemptions > 0)] > 0)
    # every served request had a prefill step; decode steps have a batch of at least itself
    assert np.all(t.num_prefill_steps[served] >= 1)
    decoded = served & (t.num_output_tokens >= 2)
    assert np.all(t.mean_batch_size[decoded] >= 1)


def test_fewer_slots_show_up_as_queueing_in_the_deltas(tmp_path):
    a, b = _run(tmp_path / "a.sqlite", max_num_seqs=4), _run(tmp_path / "b.sqlite", max_num_seqs=1)
    c = compare_recordings([a.path, b.path], ["four", "one"])
    assert [h.name for h in c.headlines] == ["four", "one"]
    assert c.headlines[1].slot_occupancy > c.headlines[0].slot_occupancy   # one slot is always full
    deltas = c.deltas[0]
    assert len(deltas) == int(np.isfinite(c.times[0].e2e).sum())
    assert [d.delta for d in deltas] == sorted((d.delta for d in deltas), reverse=True)
    for d in deltas:
        assert sum(d.parts.values()) == pytest.approx(d.delta, abs=1e-9)
    worst = deltas[0]
    assert worst.delta > 0 and worst.cause == "queueing" and "after arrival" in worst.evidence
    assert sum(d.parts["queue"] for d in deltas) > 0
    assert c.ratios(1)["ttft_p50"] > 1 and c.ratios(0)["ttft_p50"] == 1.0


def test_different_workloads_are_refused_naming_the_difference(tmp_path):
    a, b = _run(tmp_path / "a.sqlite", seed=3), _run(tmp_path / "b.sqlite", seed=4)
    with pytest.raises(WorkloadMismatch, match=r"not runs of one workload: (prompt length|max_tokens|arrival)"):
        compare_recordings([a.path, b.path])
    fa = workload_fingerprint(open_reader(a.path))
    assert fa.digest == workload_fingerprint(open_reader(_run(tmp_path / "c.sqlite", seed=3, max_num_seqs=2).path)).digest
    shorter = type(fa)(fa.clock, fa.request_ids[:-1], fa.arrival[:-1], fa.num_prompt_tokens[:-1], fa.max_tokens[:-1])
    with pytest.raises(WorkloadMismatch, match="16 vs 15 requests"):
        check_same_workload(fa, shorter)
    late = type(fa)(fa.clock, fa.request_ids, fa.arrival + np.r_[0.0, [0.5] * (len(fa.arrival) - 1)],
                    fa.num_prompt_tokens, fa.max_tokens)
    with pytest.raises(WorkloadMismatch, match="arrival of"):
        check_same_workload(fa, late)
    with pytest.raises(WorkloadMismatch, match="clock virtual vs wall"):
        check_same_workload(fa, type(fa)("wall", *(getattr(fa, k) for k in
                                                   ("request_ids", "arrival", "num_prompt_tokens", "max_tokens"))))
    with pytest.raises(ValueError, match="two or more"):
        compare_recordings([a.path])


def test_jain_index():
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([5.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)        # 1/n: one gets all
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / (2 * 10))
    assert jain_index([]) is None and jain_index([0.0, 0.0]) is None
    with pytest.raises(ValueError, match=">= 0"):
        jain_index([1.0, -1.0])


def test_prompt_buckets_hold_every_request_once():
    rng = np.random.default_rng(0)
    prompt = rng.integers(8, 2000, 101)
    e2e = rng.random(101)
    e2e[::10] = np.nan                                   # not served
    edges = bucket_edges(prompt, 4)
    assert edges[0] == prompt.min() and edges[-1] == prompt.max() and edges == sorted(set(edges))
    buckets = latency_by_prompt_bucket(prompt, e2e, np.full(101, 4), edges)
    assert sum(b.num_requests for b in buckets) == 101
    assert all(b.lo <= b.hi for b in buckets) and [b.lo for b in buckets] == edges[:-1]
    inside = (prompt >= buckets[1].lo) & (prompt <= buckets[1].hi) & np.isfinite(e2e)
    assert buckets[1].e2e_p50 == pytest.approx(np.percentile(e2e[inside], 50))
    assert buckets[1].norm_p50 == pytest.approx(np.percentile(e2e[inside] / 4, 50))
    assert bucket_edges([7, 7, 7]) == [7, 7]             # one length: one bucket
    with pytest.raises(ValueError, match="num_buckets"):
        bucket_edges(prompt, 0)


def test_schema_1_recordings_are_refused_by_name():

    from recordings.errors import RecordingError
    v1 = FIXTURES / "v1_small.sqlite"
    with pytest.raises(RecordingError, match="schema-1 recording"):
        compare_recordings([v1, v1])
