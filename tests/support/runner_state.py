"""Compare a runner's own per-request state (an ``engine.runner.input_batch.InputBatch``) with the
scheduler's live requests: the check the random-workload tests run after every step."""
from __future__ import annotations

import numpy as np

from engine.runner.input_batch import InputBatch
from engine.sched.scheduler import Scheduler


def assert_runner_matches_scheduler(scheduler: Scheduler, batch: InputBatch) -> int:
    """After a step: the runner holds exactly the requests the scheduler believes it holds plus
    those it will drop next step, rows dense; and for every held request its token ids (prompt
    and output), prompt length, ``num_computed_tokens``, block table and sampling arrays equal
    the scheduler's ``Request`` and KV manager. Raises ``AssertionError`` naming the request
    and field. Returns the number of requests compared."""
    sync = scheduler.runner_sync
    rows = set(batch.req_ids)
    assert len(rows) == batch.num_reqs, f"a request holds two rows: {batch.req_ids}"
    assert rows == sync.held | set(sync.pending_drops), (
        f"runner holds {sorted(rows)}, scheduler believes {sorted(sync.held)} "
        f"+ to drop {sorted(sync.pending_drops)}")
    assert sorted(batch.req_id_to_index.values()) == list(range(batch.num_reqs)), "rows not dense"
    for rid in sync.held:
        req, row = scheduler.requests[rid], batch.req_id_to_index[rid]
        assert batch.req_ids[row] == rid
        n = int(batch.num_tokens[row])
        assert batch.token_ids[row, :n].tolist() == list(req.all_token_ids), f"{rid}: token ids"
        assert int(batch.num_prompt_tokens[row]) == req.num_prompt_tokens, f"{rid}: prompt length"
        assert int(batch.num_computed_tokens[row]) == req.num_computed_tokens, f"{rid}: num_computed_tokens"
        assert batch.block_ids(row).tolist() == list(scheduler.kv.block_ids(rid)), f"{rid}: block table"
        p = req.sampling_params
        assert batch.sampling_params[row] == p, f"{rid}: sampling params"
        assert (batch.temperature[row], batch.top_p[row], batch.top_k[row]) == (
            np.float32(p.temperature), np.float32(p.top_p), p.top_k), f"{rid}: sampling arrays"
        if p.seed is not None:
            assert batch.seed[row] == p.seed, f"{rid}: seed"
    return len(sync.held)
