"""What ``batchscope run`` / ``summary`` / ``replay`` tell about a run: rejections grouped by
reason, a run cut short, time spent paused, latencies of a virtual-clock run in wall seconds."""
from __future__ import annotations
from tests.support.paths import REPO

import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = REPO

from tests.support.engine_driver import run_engine  # noqa: E402
from tests.support.fake_runner import FakeRunner  # noqa: E402

from app.cli import main  # noqa: E402
from app.commands.run import rejection_report  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.metrics.run_metrics import summarize  # noqa: E402
from recordings.file.completeness import completeness  # noqa: E402
from recordings.metrics.wall_clock import wall_clock  # noqa: E402


def rejected_by_the_engine(lengths: list[tuple[int, int]], **config) -> list:
    """Requests of (prompt, max_tokens) lengths added to a real engine; the ones it rejected."""
    cfg = EngineConfig(num_gpu_blocks=8, block_size=4, max_model_len=24, **config)
    eng = LLMEngine(cfg, FakeRunner(8, 4), 8)
    rejected = []
    eng.on_finished = rejected.append
    for i, (p, m) in enumerate(lengths):
        eng.add_request(list(range(1, p + 1)), SamplingParams(max_tokens=m), request_id=f"r{i}")
    eng.step()
    return [r for r in rejected if r.error]


def test_rejections_are_grouped_by_reason_with_counts_and_ranges():
    # three over max_model_len (24) with different lengths, one over the whole cache is impossible
    # here (8 blocks x 4 = 32 > 24), so add a bad max_tokens as the second reason
    rejected = rejected_by_the_engine([(20, 10), (4, 2), (30, 4), (22, 3), (5, 0)])
    report = rejection_report(rejected, total=5)
    lines = report.splitlines()
    assert lines[0] == "4 of 5 requests failed or were rejected at admission:"
    assert lines[1].strip().startswith("3 x prompt (20–30) + max_tokens (3–10) = 25–34 tokens exceeds "
                                       "max_model_len 24"), lines[1]
    assert "[r0, r2, r3]" in lines[1]
    assert lines[2].strip().startswith("1 x max_tokens must be >= 1, got 0"), lines[2]
    # the first request's numbers are not given for the others (the old report did)
    assert "prompt (20) + max_tokens (10)" not in report


def test_decimals_in_reasons_are_grouped_and_spanned_as_numbers():
    class R:                          # timed out by admission control: the waits are decimals
        def __init__(self, rid, waited):
            self.request_id, self.num_prompt_tokens, self.sampling_params = rid, 4, SamplingParams(max_tokens=2)
            self.error = f"timed out: waited {waited} s without being admitted, over max_queue_time 2 s"

    report = rejection_report([R("a", "2.05"), R("b", "2"), R("c", "12.5")], total=3)
    assert "3 x timed out: waited 2–12.5 s without being admitted, over max_queue_time 2 s  [a, b, c]" in report


def test_a_reason_without_numbers_gets_the_lengths():
    class R:                          # a request failed in a step: its error names no length
        def __init__(self, rid, p, m):
            self.request_id, self.num_prompt_tokens, self.error = rid, p, "forward pass failed"
            self.sampling_params = SamplingParams(max_tokens=m)

    report = rejection_report([R("a", 10, 4), R("b", 30, 8)], total=9)
    assert "2 x forward pass failed (prompts 10–30, max_tokens 4–8 tokens)  [a, b]" in report


def test_a_run_stopped_early_is_summarised_as_incomplete(tmp_path, capsys):
    path = tmp_path / "stopped.sqlite"
    run = run_engine(path, seed=3, num_requests=14, max_steps=6, fail_steps=())   # the window closed
    recorded = open_reader(path).request_ids()                  # the requests that had arrived
    unfinished = [rid for rid in recorded if rid not in run.finished]
    assert unfinished
    c = completeness(open_reader(path))
    assert c.closed_cleanly and not c.is_complete and c.num_unfinished == len(unfinished)
    assert set(c.first_unfinished) <= set(unfinished)
    assert len(c.first_unfinished) == min(len(unfinished), 8)
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("INCOMPLETE recording: the run was stopped after 6 steps")
    assert f"unfinished requests: {len(unfinished)} of {len(recorded)} (" in out
    assert main(["check", str(path)]) == 0              # an intact file: said, not a problem
    lines = capsys.readouterr().out.splitlines()
    assert "clean" in lines[0] and "INCOMPLETE recording: the run was stopped after 6 steps" in lines[1]
    assert f"unfinished requests: {len(unfinished)} of {len(recorded)} (" in lines[2]

    whole = tmp_path / "whole.sqlite"
    run_engine(whole, seed=3, num_requests=6, fail_steps=())
    assert completeness(open_reader(whole)).is_complete
    assert main(["summary", str(whole)]) == 0
    assert "INCOMPLETE" not in capsys.readouterr().out
    assert main(["check", str(whole)]) == 0
    assert "INCOMPLETE" not in capsys.readouterr().out


def test_a_killed_run_is_summarised_as_incomplete(tmp_path):
    """kill -9 while recording: the writer never closes the file."""
    path = tmp_path / "killed.sqlite"
    code = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT)!r})
from tests.support.engine_driver import run_engine
run = run_engine({str(path)!r}, seed=4, num_requests=10, max_steps=5, fail_steps=(), close=False)
run.writer.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    out = subprocess.run([sys.executable, "-m", "app.cli", "summary", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("INCOMPLETE recording: the file was not closed by its writer")
    assert "unfinished requests:" in out.stdout


def test_replay_says_on_the_console_that_a_recording_is_incomplete(tmp_path, capsys):
    from app.commands.window import warn_if_incomplete

    path = tmp_path / "stopped.sqlite"
    run_engine(path, seed=3, num_requests=14, max_steps=4, fail_steps=())
    warn_if_incomplete(open_reader(path))
    err = capsys.readouterr().err
    assert "INCOMPLETE recording" in err and "unfinished requests:" in err


def test_paused_time_is_not_counted_in_the_wall_duration(tmp_path):
    pause_s = 0.5

    def pause_once(run):
        if len(run.records) == 3:
            run.engine.freeze_clock()          # what the window's pause does
            time.sleep(pause_s)
            run.engine.thaw_clock()

    path = tmp_path / "paused.sqlite"
    run_engine(path, seed=5, num_requests=8, fail_steps=(), clock="wall", between_steps=pause_once)
    reader = open_reader(path)
    wc = wall_clock(reader)
    assert pause_s <= wc.paused_s < pause_s + 0.2
    s = summarize(reader)
    assert s.wall_duration_s == pytest.approx(wc.span_s - wc.paused_s)
    assert s.output_tokens_per_s == pytest.approx(s.num_output_tokens / s.wall_duration_s)
    assert any(line.startswith("paused (s)") for line in wc.format_lines())


def test_a_virtual_clock_run_gets_wall_clock_latencies(tmp_path):
    path = tmp_path / "virtual.sqlite"
    run = run_engine(path, seed=6, num_requests=8, fail_steps=())
    wc = wall_clock(open_reader(path))
    assert wc.paused_s == 0.0
    # ITL in wall seconds: the gaps between the end times of the steps that gave a request tokens
    ends: dict[str, list[float]] = {}
    for rec in run.records:
        for t in rec.new_tokens:
            ends.setdefault(t.request_id, []).append(rec.end_ns / 1e9)
    gaps = sorted(b - a for times in ends.values() for a, b in zip(times, times[1:]))
    assert wc.itl.num_samples == len(gaps)
    assert wc.itl.p50 == pytest.approx(float(np.percentile(gaps, 50)))
    lines = wc.format_lines()
    assert any("latency unit" in line and "steps" in line for line in lines)
    assert any(line.startswith("ITL wall p50/90/99 (s)") for line in lines)
    assert summarize(open_reader(path)).itl.p50 == 1.0          # in steps


@pytest.mark.slow
def test_a_terminated_run_closes_its_recording_and_says_it_is_incomplete(tiny_model, tmp_path):
    """`kill PID` (SIGTERM) stops `batchscope run` like Ctrl+C: exit 130, the recording closed and
    summarised as a run cut short."""
    import signal

    rec = tmp_path / "term.sqlite"
    demo = ROOT / "recordings" / "workloads" / "data" / "azure_conv_demo.csv"
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run", "--model", str(tiny_model), "--trace",
                             str(demo), "--record", str(rec), "--clock", "virtual", "--max-num-seqs", "2",
                             "--max-prompt-tokens", "32", "--max-output-tokens", "64"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if rec.exists():
            try:
                if open_reader(rec).latest_step() >= 3:
                    break
            except Exception:                 # noqa: BLE001 - the file is being created
                pass
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be terminated"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert out.startswith("INCOMPLETE recording: the run was stopped after")
    assert "unfinished requests:" in out and "interrupted:" in out
    assert completeness(open_reader(rec)).closed_cleanly


def test_closing_the_window_waits_for_the_step_in_progress(capsys):
    """Leaving while the engine thread is inside a forward pass aborts Python (rc 134) and leaves
    the recording unclosed: the window's exit waits for the step, and says so."""
    import threading

    from app.commands.window import stop_worker

    class SlowStep(threading.Thread):            # the EngineWorker's stop/join protocol
        def __init__(self):
            super().__init__(daemon=True)
            self.stopping, self.closed = threading.Event(), False

        def run(self):
            time.sleep(0.6)                      # a step that takes longer than the patience
            self.stopping.wait()
            self.closed = True                   # the recorder is closed after the loop

        def stop(self, timeout):
            self.stopping.set()
            self.join(timeout)

    worker = SlowStep()
    worker.start()
    stop_worker(worker, patience_s=0.1)
    assert not worker.is_alive() and worker.closed
    assert "waiting for the engine's current step to finish" in capsys.readouterr().err


def test_summary_groups_a_recordings_rejections_by_reason(tmp_path, capsys):
    """The reasons ``run`` printed are in ``summary`` too, read back from the recording; the
    hint about shrinking requests only comes with a length reason."""
    from tests.support.engine_driver import make_config
    from tests.support.fake_runner import NullRunner
    from recordings.file.writer import RecordingWriter

    config, run_info = make_config(num_gpu_blocks=32, max_num_seqs=8)
    path = tmp_path / "rejected.sqlite"
    with RecordingWriter(path, run_info) as writer:
        eng = LLMEngine(config, NullRunner(), config.num_gpu_blocks, recorder=writer)
        too_long = config.max_model_len + 5
        for i in range(3):
            eng.add_request([1] * (too_long + i), SamplingParams(max_tokens=2), request_id=f"long{i}")
        eng.add_request([1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True), request_id="ok")
        eng.run_until_done()
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 of 4 requests failed or were rejected at admission:" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("3 x prompt"))
    assert f"exceeds max_model_len {config.max_model_len}" in line and "[long0, long1, long2]" in line
    assert "--max-prompt-tokens" in out
    rejected = [type("R", (), {"request_id": "p", "error": "priority 3 needs policy=priority",
                               "num_prompt_tokens": 4, "sampling_params": SamplingParams(max_tokens=2)})()]
    assert "--max-prompt-tokens" not in rejection_report(rejected, total=1)
