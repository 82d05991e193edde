"""Memory follows what is live, not history: a 20,000-request run through the engine (a runner
that does no model work), recorded or not, holds no more objects after 20k finished requests than
after 2k. Measured by counts of live objects (``Request`` instances found by the garbage
collector, container sizes of the scheduler, the KV manager, the engine, its request-id registry,
its state timeline and the recording writer) and by the bytes Python allocated (``tracemalloc``)
between 10k and 20k finished requests, never by time or RSS. The one stated growth: without a
recording, finished request ids are kept as 64-bit hashes, 8 bytes each (``engine.request_ids``)."""
from __future__ import annotations

import gc
import random
import tracemalloc
import weakref

import pytest

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import Request, SamplingParams
from engine.request_ids import IdHashes
from tests.support.fake_runner import NullRunner

NUM_REQUESTS = 20_000
CHECKPOINTS = (2_000, 10_000, 20_000)
MAX_LIVE = 200                  # the driver keeps at most this many requests live (64 running)
# With the engine drained (no live request) after 10k and after 20k requests, Python's
# allocations may grow this much beyond the stated 8 bytes per finished id without a recording
# (one id string kept per finished request would be ~600 kB, a dict entry per request ~500 kB).
SLACK_BYTES = 384 * 1024
SLACK_BLOCKS = 1000             # a leaked object per finished request: 10,000 more blocks


def held(snapshot: tracemalloc.Snapshot) -> tuple[int, int]:
    """(bytes, blocks) Python holds in ``snapshot``."""
    stats = snapshot.statistics("filename")
    return sum(st.size for st in stats), sum(st.count for st in stats)


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
        "scheduler.groups": len(s.groups.groups), "ids.live": len(engine._request_ids.live),
        "ids.hashes.recent": len(engine._request_ids.hashes._recent),
        "ids.lookups": len(engine._request_ids.lookups),
    }


def writer_sizes(writer) -> dict[str, int]:
    """Sizes of the per-request containers of a recording writer (live requests and the queue)."""
    if writer is None:
        return {}
    return {"writer._seq": len(writer._seq), "writer._num_prompt": len(writer._num_prompt),
            "writer.queued ids": len(writer._recorded.queued)}


PREFIX = "memtest-"   # this test's requests (other tests' engines may still hold theirs)


def count_requests() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Request and o.request_id.startswith(PREFIX))


@pytest.mark.slow
@pytest.mark.parametrize("recorded", [False, True], ids=["no-recording", "recorded"])
def test_memory_does_not_grow_with_finished_requests(tmp_path, recorded):
    rng = random.Random(0)
    config = EngineConfig(block_size=16, num_gpu_blocks=512, max_model_len=256, max_num_seqs=64,
                          max_num_batched_tokens=1024)
    writer = None
    if recorded:
        from recordings.file.writer import RecordingWriter
        writer = RecordingWriter(tmp_path / "mem.sqlite", {"config": config.to_dict()})
    engine = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=writer)
    num_finished = 0

    def on_finished(req: Request) -> None:
        nonlocal num_finished
        num_finished += 1

    engine.on_finished = on_finished
    alive: dict[int, weakref.ref] = {}          # weak references to every request, dropped with it
    added, steps, peak_live = 0, 0, 0
    measured: dict[int, dict[str, int]] = {}
    names = 0                                   # ids used (a parallel prompt's id and its sequences')
    drained: list[tuple[int, int]] = []         # (bytes Python allocated since 2k, ids used)
    while True:
        cap = CHECKPOINTS[len(drained)]
        if added == cap and not engine.has_unfinished:      # drained after 2k, 10k, 20k requests
            if writer is not None:
                writer.flush()
            gc.collect()
            if not drained:
                tracemalloc.start()             # from here on: what Python allocates and keeps
            drained.append((tracemalloc.take_snapshot(), names))
            if len(drained) == len(CHECKPOINTS):
                break
            continue
        while added < cap and len(engine.requests) < MAX_LIVE:
            n = 2 if added % 20 == 0 else 1     # some parallel sampling: groups come and go too
            rid = engine.add_request([rng.randrange(1, 1000) for _ in range(rng.randint(2, 24))],
                                     SamplingParams(max_tokens=rng.randint(1, 6), ignore_eos=True, n=n),
                                     request_id=f"{PREFIX}{added}")
            for req in engine.scheduler.groups.groups[rid].members if n > 1 else [engine.requests[rid]]:
                alive[id(req)] = weakref.ref(req, lambda _, k=id(req): alive.pop(k))
            del req
            added += 1
            names += 1 + (n if n > 1 else 0)
        peak_live = max(peak_live, len(engine.requests))
        engine.step()
        steps += 1
        for cp in CHECKPOINTS:
            if num_finished >= cp and cp not in measured:
                if writer is not None:
                    writer.flush()              # its queue empty: what stays is what it keeps
                live = len(engine.requests)
                m = sizes(engine) | writer_sizes(writer) | {
                    "live": live, "gc Request objects": count_requests(), "weakref Request objects": len(alive)}
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
                # ids: the live ones (each request's, and its parallel prompt's), and the
                # finished ones in the recording (or as hashes, bounded by IdHashes.MERGE here)
                assert m["ids.live"] <= 2 * live and m["scheduler.groups"] <= live
                assert m["ids.hashes.recent"] < IdHashes.MERGE and m["ids.lookups"] == int(recorded)
                if recorded:
                    assert len(engine._request_ids.hashes) == 0, m
                    assert m["writer._seq"] <= live and m["writer._num_prompt"] <= live
                    assert m["writer.queued ids"] == 0          # committed: only the file holds them
    tracemalloc.stop()
    if writer is not None:
        writer.close()
    assert engine.scheduler.num_finished == (NUM_REQUESTS + NUM_REQUESTS // 20) and not engine.has_unfinished
    first, last = measured[CHECKPOINTS[0]], measured[CHECKPOINTS[-1]]
    # Flat: 10x the finished requests, no more of anything than the live bound allows.
    for k, v in last.items():
        assert v <= max(first[k], MAX_LIVE, 4 * peak_live + 64), (k, first[k], v)
    assert count_requests() == len(alive) == 0
    assert engine.timeline.num_live == 0 and len(engine.timeline._ids) <= 4 * peak_live + 64
    # Python's allocations (traced from the drained engine at 2k requests) from the drained engine
    # at 10k to the drained engine at 20k: flat, up to the stated 8 bytes per finished id without
    # a recording (engine.request_ids).
    (mid, mid_names), (end, end_names) = drained[1:]
    stated = 0 if recorded else 8 * (end_names - mid_names)
    (mid_bytes, mid_blocks), (end_bytes, end_blocks) = held(mid), held(end)
    top = [str(d) for d in end.compare_to(mid, "lineno")[:5]]
    # A leak of anything per finished request adds a block per request (10k more); a set or
    # dict that grew its table to a new peak of live requests adds bytes but no block.
    assert end_blocks - mid_blocks <= SLACK_BLOCKS, (end_blocks - mid_blocks, top)
    assert end_bytes - mid_bytes <= stated + SLACK_BYTES, (end_bytes - mid_bytes, stated, top)
    ids = engine._request_ids
    assert ids.live == {} and len(ids.hashes) == (0 if recorded else names)
    assert steps < 4 * NUM_REQUESTS
