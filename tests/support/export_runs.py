"""Recordings and checks shared by the export tests (``test_export_*.py``).

``sim_demo(path)`` records the built-in demo trace on the simulated executor (the real scheduler
and KV cache, step times from an A100's cost model, sim clock) through ``batchscope run``, in
process: the demo's scaling and 16 slots, arrivals 100x faster and 48 KV blocks of 16 tokens, so
the cache fills and requests are preempted (15 preemptions in the first 60 requests). ``check_trace_format(doc)`` checks a trace-event JSON document against the Trace
Event Format (JSON Object Format) and returns its events.
"""
from __future__ import annotations

from collections import defaultdict
from numbers import Real
from pathlib import Path

from app.cli import main
from recordings.workloads.workload import DEMO_TRACE

DEMO_SCALING = ("--time-scale", "0.01", "--prompt-scale", "0.08333", "--output-scale", "0.25",
                "--min-prompt-tokens", "8", "--max-prompt-tokens", "96", "--min-output-tokens", "8",
                "--max-output-tokens", "64")


def sim_demo(path: Path, limit: int = 60, *extra: str) -> Path:
    """Record the first ``limit`` demo requests on the sim executor to ``path``."""
    argv = ["run", "--trace", str(DEMO_TRACE), "--limit", str(limit), "--record", str(path),
            "--executor", "sim", "--sim-model", "smollm2-135m", "--sim-device", "a100",
            "--num-gpu-blocks", "48", *DEMO_SCALING, *extra]
    assert main(argv) == 0
    return path


PHASES = {"X", "b", "e", "C", "i", "M"}
METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index"}


def _number(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def check_trace_format(doc) -> list[dict]:
    """Assert that ``doc`` (a loaded JSON document) is a trace in the JSON Object Format: a
    ``traceEvents`` list of events with ``ph``, ``name``, integer ``pid`` / ``tid``, ``ts`` in
    microseconds (a number >= 0), ``dur`` >= 0 on ``X``, numeric ``args`` on counters, a scope
    on instants, ``b`` / ``e`` balanced and properly nested per (``cat``, ``id``) with
    timestamps that never go back, and a ``process_name`` / ``thread_name`` metadata event for
    every process and slice thread used. Returns the events."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    events = doc["traceEvents"]
    open_slices: dict[tuple, list[str]] = defaultdict(list)
    last_ts: dict[tuple, float] = {}
    named_pids, named_threads, used_pids, slice_threads = set(), set(), set(), set()
    for ev in events:
        ph = ev["ph"]
        assert ph in PHASES, ev
        assert isinstance(ev["name"], str) and ev["name"], ev
        assert type(ev["pid"]) is int and type(ev.get("tid", 0)) is int, ev
        if ph == "M":
            assert ev["name"] in METADATA and METADATA[ev["name"]] in ev["args"], ev
            (named_pids if ev["name"] == "process_name" else named_threads).add(
                ev["pid"] if ev["name"] == "process_name" else (ev["pid"], ev["tid"]))
            continue
        used_pids.add(ev["pid"])
        assert _number(ev["ts"]) and ev["ts"] >= 0, ev
        if ph == "X":
            assert _number(ev["dur"]) and ev["dur"] >= 0, ev
            slice_threads.add((ev["pid"], ev["tid"]))
        elif ph == "C":
            assert ev["args"] and all(_number(v) for v in ev["args"].values()), ev
        elif ph == "i":
            assert ev.get("s", "t") in ("g", "p", "t"), ev
        else:                                       # nestable async begin / end
            key = (ev["pid"], ev["cat"], ev["id"])
            assert ev["ts"] >= last_ts.get(key, 0), ev
            last_ts[key] = ev["ts"]
            if ph == "b":
                open_slices[key].append(ev["name"])
            else:
                assert open_slices[key] and open_slices[key].pop() == ev["name"], ev
    assert not [k for k, v in open_slices.items() if v], "async slices without an end"
    assert used_pids <= named_pids and slice_threads <= named_threads
    return events
