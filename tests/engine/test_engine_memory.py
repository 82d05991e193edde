"""Memory follows what is live, not history: a 20,000-request run through the engine (a runner
that does no model work) holds no more objects after 20k finished requests than after 2k. Measured
by counts of live objects (``Request`` instances found by the garbage collector, container sizes
of the scheduler, the KV manager, the engine and its state timeline), never by time or RSS."""
from __future__ import annotations

import gc
import random
import weakref

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import Request, SamplingParams
from fake_runner import NullRunner

NUM_REQUESTS = 20_000
CHECKPOINTS = (2_000, 10_000, 20_000)
MAX_LIVE = 200                  # the driver keeps at most this many requests live (64 running)


def sizes(engine: LLMEngine) -> dict[str, int]:
    """Sizes of every container the engine keeps across steps (the ones that could leak)."""
    s, kv, tl = engine.scheduler, engine.scheduler.kv, engine.timeline
    return {
        "scheduler.requests": len(s.requests), "scheduler.waiting": len(s.waiting),
        "scheduler.running": len(s.running), "scheduler.paused": len(s.paused),
        "scheduler._finished": len(s._finished), "scheduler.events": len(s.events),
        "scheduler._free_slots": len(s._free_slots),
        "kv.block_tables": len(kv.block_tables), "kv.events": len(kv.events),
        "kv.pool._free": kv.pool.num_free_blocks, "kv._frozen": len(kv._frozen),
        "engine._future": len(engine._future), "engine._detok": len(engine._detok),
        "engine._deltas": len(engine._deltas), "engine._arrivals": len(engine._arrivals),
        "engine._arrival_index": len(engine._arrival_index), "engine._touched": len(engine._touched),
        "engine._finished_now": len(engine._finished_now),
        "timeline.num_live": tl.num_live, "timeline.capacity": len(tl._alive),
        "timeline._ids": len(tl._ids), "timeline._row": len(tl._row), "timeline.finished": len(tl.finished),
        "state.rows": len(engine.state()), "state.recently_finished": len(engine.state().recently_finished),
    }


PREFIX = "memtest-"   # this test's requests (other tests' engines may still hold theirs)


def count_requests() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Request and o.request_id.startswith(PREFIX))


def test_memory_does_not_grow_with_finished_requests():
    rng = random.Random(0)
    config = EngineConfig(block_size=16, num_gpu_blocks=512, max_model_len=256, max_num_seqs=64,
                          max_num_batched_tokens=1024)
    engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks)
    num_finished = 0

    def on_finished(req: Request) -> None:
        nonlocal num_finished
        num_finished += 1

    engine.on_finished = on_finished
    alive: dict[int, weakref.ref] = {}          # weak references to every request, dropped with it
    added, steps, peak_live = 0, 0, 0
    measured: dict[int, dict[str, int]] = {}
    while num_finished < NUM_REQUESTS:
        while added < NUM_REQUESTS and len(engine.requests) < MAX_LIVE:
            rid = engine.add_request([rng.randrange(1, 1000) for _ in range(rng.randint(2, 24))],
                                     SamplingParams(max_tokens=rng.randint(1, 6), ignore_eos=True),
                                     request_id=f"{PREFIX}{added}")
            req = engine.requests[rid]
            alive[id(req)] = weakref.ref(req, lambda _, k=id(req): alive.pop(k))
            del req
            added += 1
        peak_live = max(peak_live, len(engine.requests))
        engine.step()
        steps += 1
        for cp in CHECKPOINTS:
            if num_finished >= cp and cp not in measured:
                live = len(engine.requests)
                m = sizes(engine) | {"live": live, "gc Request objects": count_requests(),
                                     "weakref Request objects": len(alive)}
                measured[cp] = m
                # Requests alive = the live ones (finished ones were dropped once handed over).
                assert m["gc Request objects"] == m["weakref Request objects"] == live, m
                for k in ("scheduler.requests", "kv.block_tables", "kv._frozen", "timeline.num_live", "timeline._row",
                          "state.rows"):
                    assert m[k] <= live, (k, m)
                assert m["scheduler.running"] <= config.max_num_seqs
                assert m["scheduler.waiting"] + m["scheduler.running"] + m["scheduler.paused"] == live
                for k in ("scheduler._finished", "scheduler.events", "kv.events", "engine._arrivals",
                          "engine._arrival_index", "engine._touched", "engine._finished_now",
                          "engine._deltas", "engine._detok", "engine._future"):
                    assert m[k] == 0, (k, m)                       # nothing pending between steps
                assert m["scheduler._free_slots"] + m["scheduler.running"] == config.max_num_seqs
                assert m["timeline.capacity"] <= 4 * peak_live + 64 and m["timeline._ids"] <= m["timeline.capacity"]
                assert m["timeline.finished"] <= 64 and m["state.recently_finished"] <= 64
    assert engine.scheduler.num_finished == NUM_REQUESTS and not engine.has_unfinished
    first, last = measured[CHECKPOINTS[0]], measured[CHECKPOINTS[-1]]
    # Flat: 10x the finished requests, no more of anything than the live bound allows.
    for k, v in last.items():
        assert v <= max(first[k], MAX_LIVE, 4 * peak_live + 64), (k, first[k], v)
    assert count_requests() == len(alive) == 0
    assert engine.timeline.num_live == 0 and len(engine.timeline._ids) <= 4 * peak_live + 64
    # The one structure that grows with history: the ids seen (for the "ids are unique within a
    # run" rule): one short string per request, not the request.
    assert len(engine._seen_ids) == NUM_REQUESTS
    assert steps < 4 * NUM_REQUESTS
