"""Serving metrics (E2E latency, queue time, requests/s, prefill/decode split, goodput) on a tiny
run of the real engine whose every value is worked out by hand below (sim clock, every step
exactly D simulated seconds), and goodput's edge cases."""
from __future__ import annotations
from tests.support.paths import FIXTURES

from pathlib import Path

import pytest


from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from tests.support.fake_runner import NullRunner  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.file.writer import RecordingWriter  # noqa: E402
from recordings.metrics.serving import Slo, summarize_serving  # noqa: E402

D = 1 / 64          # seconds per step: binary-exact, so sums compare exactly
# (id, arrival in sim s, prompt tokens, output tokens). max_num_seqs 2, 16 tokens a step:
# step 0 (t=0):  a prefill 8 + b prefill 4                     -> first tokens of a, b at 1D
# step 1 (1D):   a, b decode                                    -> b done (2 tokens) at 2D
# step 2 (2D):   a decode + e prefill 4 (e waited 2D for b's slot) -> a done at 3D, e done at 3D
# idle until c arrives at 5D (the sim clock jumps)
# step 3 (5D):   c prefill chunk 16 of 20
# step 4 (6D):   c prefill 4 -> first token at 7D
# step 5 (7D):   c decode -> done at 8D
WORKLOAD = [("a", 0.0, 8, 3), ("b", 0.0, 4, 2), ("e", 0.0, 4, 1), ("c", 5 * D, 20, 2)]
TTFT = {"a": 1 * D, "b": 1 * D, "e": 3 * D, "c": 2 * D}
TPOT = {"a": D, "b": D, "c": D}          # e has one token: no TPOT
E2E = {"a": 3 * D, "b": 2 * D, "e": 3 * D, "c": 3 * D}
QUEUE = {"a": 0.0, "b": 0.0, "e": 2 * D, "c": 0.0}


def record(path: Path, clock: str = "sim") -> Path:
    config = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=64, max_num_seqs=2,
                          max_num_batched_tokens=16, clock=clock, check_invariants=True)
    writer = RecordingWriter(path, {"config": config.to_dict(), "model": "none"})
    engine = LLMEngine(config, NullRunner(step_duration=lambda sched: D), config.num_gpu_blocks,
                       recorder=writer)
    for rid, at, p, m in WORKLOAD:
        engine.add_request(list(range(1, p + 1)), SamplingParams(max_tokens=m, ignore_eos=True),
                           request_id=rid, arrival_time=at if clock == "sim" else at / D)
    engine.run_until_done(max_steps=50)
    writer.close()
    return path


def percentile(values, q):
    """Linear interpolation between order statistics (numpy's default), written out."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("serving") / "run.sqlite")


def test_latencies_queue_and_throughput_match_the_hand_worked_schedule(sim_run):
    with open_reader(sim_run) as reader:
        s = summarize_serving(reader)
    assert (s.clock, s.time_unit, s.duration_unit) == ("sim", "sim s", "sim s")
    assert s.num_requests == s.num_completed == 4
    assert s.duration == 8 * D                            # first step's start 0 .. last token 8D
    assert s.requests_per_s == pytest.approx(4 / (8 * D))
    assert s.e2e_latency.num_samples == 4
    assert s.e2e_latency.p50 == pytest.approx(percentile(E2E.values(), 50))
    assert s.e2e_latency.p99 == pytest.approx(percentile(E2E.values(), 99))
    assert s.queue_time.num_samples == 4
    assert s.queue_time.p99 == pytest.approx(percentile(QUEUE.values(), 99))
    assert s.queue_time.p50 == 0.0


def test_prefill_decode_split_attributes_step_time_by_tokens(sim_run):
    with open_reader(sim_run) as reader:
        s = summarize_serving(reader)
    # steps 0, 3, 4 all prefill; step 2 has 4 prefill + 1 decode token; steps 1, 5 decode only
    assert s.prefill_time == pytest.approx(3 * D + 4 / 5 * D)
    assert s.decode_time == pytest.approx(2 * D + 1 / 5 * D)
    assert s.prefill_step_time == pytest.approx(4 * D)
    assert s.decode_only_step_time == pytest.approx(2 * D)
    assert s.prefill_share == pytest.approx(3.8 / 6)
    lines = s.format_lines()
    assert any(line.startswith("prefill / decode time (sim s)") and "63.3% prefill" in line
               for line in lines)


@pytest.mark.parametrize("slo, good", [
    (Slo(ttft_ms=D * 1000), {"a", "b"}),                 # exactly at the limit counts as met
    (Slo(ttft_ms=D * 1000 - 0.001), set()),
    (Slo(ttft_ms=2 * D * 1000), {"a", "b", "c"}),
    (Slo(tpot_ms=D * 1000 - 0.001), {"e"}),              # one token: no TPOT, meets any TPOT SLO
    (Slo(tpot_ms=D * 1000), {"a", "b", "c", "e"}),
    (Slo(ttft_ms=3 * D * 1000, tpot_ms=D * 500), {"e"}),
])
def test_goodput_counts_requests_meeting_both_slos(sim_run, slo, good):
    with open_reader(sim_run) as reader:
        g = summarize_serving(reader, slo).goodput
    expected = {rid for rid in TTFT if TTFT[rid] * 1000 <= (slo.ttft_ms or 1e9)
                and TPOT.get(rid, 0.0) * 1000 <= (slo.tpot_ms or 1e9)}
    assert expected == good                       # the table above agrees with the hand count
    assert (g.num_good, g.num_requests) == (len(good), 4)
    assert g.per_s == pytest.approx(len(good) / (8 * D))
    assert g.share == len(good) / 4


def test_goodput_is_undefined_under_the_virtual_clock(tmp_path):
    with open_reader(record(tmp_path / "virtual.sqlite", clock="virtual")) as reader:
        s = summarize_serving(reader, Slo(ttft_ms=100))
    assert s.time_unit == "steps" and s.duration_unit == "wall s"
    assert s.goodput.undefined and "steps" in s.goodput.undefined
    assert any("goodput" in line and "n/a" in line for line in s.format_lines())
    assert s.e2e_latency.p50 == pytest.approx(percentile([e / D for e in E2E.values()], 50))


def test_no_slo_means_no_goodput_and_bad_slos_are_refused(sim_run):
    with open_reader(sim_run) as reader:
        assert summarize_serving(reader).goodput is None
        assert summarize_serving(reader, Slo()).goodput is None
    for bad in (0, -5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="milliseconds"):
            Slo(ttft_ms=bad)


def test_a_schema_1_recording_says_its_serving_metrics_are_not_available(tmp_path):
    import shutil

    from recordings.metrics.summary_lines import summary_lines
    v1 = tmp_path / "v1.sqlite"
    shutil.copy(FIXTURES / "v1_small.sqlite", v1)
    with open_reader(v1) as reader:
        assert summarize_serving(reader, Slo(ttft_ms=100)) is None
        lines = summary_lines(reader, Slo(ttft_ms=100))
    serving = [line for line in lines if line.startswith("E2E, queue time, goodput")]
    assert len(serving) == 1 and "n/a: a schema-1 recording" in serving[0]
    assert any(line.startswith("TTFT p50/p90/p99 (steps)") for line in lines)
