"""``batchscope export --format perfetto``: the trace follows the Trace Event Format and says
what the recording says, on fake-runner (virtual clock) and simulated (sim clock) runs."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from tests.support.engine_driver import run_engine
from tests.support.export_runs import check_trace_format, sim_demo
from recordings.file.open_reader import open_reader
from recordings.export.perfetto import export_perfetto


def _export(path, out, **kw):
    with open_reader(path) as reader:
        result = export_perfetto(reader, out, **kw)
    with open(out, encoding="utf-8") as f:
        return result, check_trace_format(json.load(f))


def _by(events, ph, cat=None):
    return [e for e in events if e["ph"] == ph and (cat is None or e.get("cat") == cat)]


def test_virtual_clock_steps_counters_and_instants_match_the_records(recorded, tmp_path):
    result, events = _export(recorded.path, tmp_path / "t.json", us_per_step=250)
    records = recorded.records
    steps = _by(events, "X", "step")
    assert [(e["args"]["step"], e["ts"], e["dur"]) for e in steps] == [
        (r.step, r.step * 250, 250) for r in records]          # 1 step = 250 us, as asked
    counters = defaultdict(list)
    for e in _by(events, "C"):
        counters[e["name"]].append((e["ts"], e["args"]))
    assert [a for _, a in counters["queues"]] == [
        {"waiting": r.num_waiting, "running": r.num_running, "swapped": 0, "paused": r.num_paused}
        for r in records]
    assert [(ts, a["used"] + a["cached_free"] + a["free"], a["used"]) for ts, a in counters["KV blocks"]] == [
        ((r.step + 1) * 250, r.num_total_blocks, r.num_total_blocks - r.num_free_blocks) for r in records]
    busy = [(r.step * 250, sum(e.num_tokens for e in r.scheduled)) for r in records]
    busy += [((records[-1].step + 1) * 250, 0)] if busy[-1][1] else []     # back to 0 at the end
    assert [(ts, a["prefill"] + a["decode"]) for ts, a in counters["tokens"]] == busy
    preempted = [(r.step, e.request_id, json.loads(e.detail)) for r in records for e in r.events
                 if e.kind == "preempted"]
    instants = _by(events, "i", "preemption")
    assert preempted and [(e["ts"], e["args"]["request_id"], e["args"]["mode"], e["args"]["reason"])
                          for e in instants] == [(k * 250, rid, d["mode"], d["reason"])
                                                 for k, rid, d in preempted]
    assert result.num_steps == len(records) and result.num_events == len(events)
    assert result.counts[("engine", "C")] == sum(map(len, counters.values()))


def test_slot_slices_cover_every_batch_entry_once_in_maximal_runs(recorded, tmp_path):
    _, events = _export(recorded.path, tmp_path / "t.json")
    cells = {(e.slot, r.step): e.request_id for r in recorded.records for e in r.scheduled}
    covered = Counter()
    for x in _by(events, "X", "slot"):
        a, slot = x["args"], x["tid"]
        assert x["name"] == a["request_id"] and x["ts"] == a["first_step"] * 1000
        assert x["dur"] == (a["last_step"] + 1 - a["first_step"]) * 1000
        for k in range(a["first_step"], a["last_step"] + 1):
            assert cells[(slot, k)] == a["request_id"]
            covered[(slot, k)] += 1
        for k in (a["first_step"] - 1, a["last_step"] + 1):       # maximal: not one step longer
            assert cells.get((slot, k)) != a["request_id"]
    assert covered == Counter(dict.fromkeys(cells, 1))


def test_request_lifecycles_are_queued_prefill_decode_with_preempted_gaps(recorded, tmp_path):
    _, events = _export(recorded.path, tmp_path / "t.json")
    phases, ends = defaultdict(list), {}
    for e in _by(events, "b", "request"):
        phases[e["id"]].append(e["name"])
    for e in _by(events, "e", "request"):
        if e["name"] == e["id"]:
            ends[e["id"]] = (e["ts"], e["args"]["event"])
    assert set(phases) == set(recorded.prompts)              # every request, once
    outcome = {}
    for r in recorded.records:
        for ev in r.events:
            if ev.kind in ("finished", "failed"):
                outcome[ev.request_id] = ((r.step + 1) * 1000, ev.kind)
            elif ev.kind in ("aborted", "rejected"):
                outcome[ev.request_id] = (r.step * 1000, ev.kind)
    assert ends == outcome
    preempted = {e.request_id for r in recorded.records for e in r.events if e.kind == "preempted"}
    ran = {e.request_id for r in recorded.records for e in r.scheduled}
    for rid, names in phases.items():
        assert names[0] == rid and names[1] == "queued"
        assert ("prefill" in names) == (rid in ran)
        assert ("preempted" in names) == (rid in preempted)
        for a, b in zip(names[1:], names[2:]):
            assert a != b or a == "preempted"          # a phase begins only when it changes


def test_a_recording_cut_short_closes_every_slice(tmp_path):
    run = run_engine(tmp_path / "cut.sqlite", seed=3, max_steps=12, num_requests=12)
    _, events = _export(run.path, tmp_path / "t.json")       # balanced: checked by the format check
    unfinished = {e["id"] for e in _by(events, "e", "request") if e.get("args", {}).get("unfinished")}
    assert unfinished == set(run.final.request_ids) and unfinished
    last_end = (run.records[-1].step + 1) * 1000
    assert max(e["ts"] + e.get("dur", 0) for e in events if e["ph"] != "M") == last_end


def test_sim_demo_on_the_sim_clock_in_microseconds(tmp_path):
    rec = sim_demo(tmp_path / "sim.sqlite", limit=60)
    result, events = _export(rec, tmp_path / "t.json")
    with open_reader(rec) as reader:
        records = reader.records(0, reader.latest_step() + 1)
    assert result.timebase.clock == "sim" and result.timebase.us_per_unit == 1e6
    steps = _by(events, "X", "step")
    assert [(e["ts"], e["dur"]) for e in steps] == [
        (round(r.clock * 1e6, 3), pytest.approx((r.token_time - r.clock) * 1e6, abs=2e-3)) for r in records]
    names = {e["args"]["name"] for e in _by(events, "M") if e["name"] == "process_name"}
    assert "batch slots (sim clock)" in names
    instants = _by(events, "i", "preemption")
    assert instants and {e["args"]["reason"] for e in instants} == {"no_free_blocks"}
    assert all(e["s"] == "t" and 0 <= e["tid"] < 16 for e in instants)
    assert max(e["args"]["running"] for e in _by(events, "C") if e["name"] == "queues") == 16


def test_bad_arguments_leave_no_file(recorded, tmp_path):
    with open_reader(recorded.path) as reader:
        with pytest.raises(ValueError, match="must be > 0"):
            export_perfetto(reader, tmp_path / "t.json", us_per_step=0)
        with pytest.raises(OSError):
            export_perfetto(reader, tmp_path / "missing" / "t.json")
    assert not list(tmp_path.glob("*.json"))


def test_streams_the_recording_in_chunks_with_the_same_result(recorded, tmp_path, monkeypatch):
    whole = tmp_path / "whole.json"
    with open_reader(recorded.path) as reader:
        export_perfetto(reader, whole)
    import recordings.export.step_chunks
    monkeypatch.setattr(recordings.export.step_chunks, "CHUNK_STEPS", 8)
    spans = []
    with open_reader(recorded.path) as reader:
        batches = reader.batches
        monkeypatch.setattr(reader, "batches", lambda a, b, *s: spans.append(b - a) or batches(a, b, *s))
        export_perfetto(reader, tmp_path / "chunked.json")
    assert len(spans) == -(-len(recorded.records) // 8) and max(spans) == 8   # never the whole run
    assert (tmp_path / "chunked.json").read_bytes() == whole.read_bytes()


def test_swap_preemptions_show_in_the_swapped_queue(tmp_path):
    rec = sim_demo(tmp_path / "swap.sqlite", 60, "--preemption-mode", "swap", "--num-cpu-blocks", "64")
    _, events = _export(rec, tmp_path / "t.json")
    swapped = [e["args"]["swapped"] for e in _by(events, "C") if e["name"] == "queues"]
    with open_reader(rec) as reader:
        assert swapped == [len(reader.state_at(k).queue_rows("swapped"))
                           for k in range(reader.latest_step() + 1)]
    assert max(swapped) > 0
    assert "swap" in {e["args"]["mode"] for e in _by(events, "i", "preemption")}
