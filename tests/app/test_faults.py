"""Faults: SQLite says the disk is full while recording, the model runs out of memory in one step,
the writer thread dies. The engine serves on (or fails only what it must), the window and the CLI
say what happened, and the file opens up to its last committed step and says it is incomplete."""
from __future__ import annotations
from tests.support.paths import REPO

import time

import pytest
import torch

ROOT = REPO

from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from tests.support.fake_runner import FakeRunner  # noqa: E402
from recordings.file.reader import Reader  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError  # noqa: E402
from recordings.file.writer import RecordingWriter  # noqa: E402
from recordings.check.file_check import check_file  # noqa: E402

CONFIG = EngineConfig(block_size=4, num_gpu_blocks=64, max_model_len=64, max_num_seqs=4,
                      max_num_batched_tokens=16, clock="virtual", check_invariants=True)
OOM_STEP = 5


class OutOfMemoryRunner(FakeRunner):
    """A model runner whose forward pass runs out of GPU memory at ``OOM_STEP``."""

    def execute(self, sched):
        if sched.step == OOM_STEP:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().execute(sched)


def serve(path, runner=None, num_requests=10, writer_kwargs=None, pause_s=0.0):
    """Ten requests (four at a time) through the engine, recorded to ``path``; the engine, its
    finished requests by id, and the writer's error on close (None if it closed cleanly).
    ``pause_s`` between steps lets the writer commit as it goes (a fast run is one batch)."""
    writer = RecordingWriter(path, {"config": CONFIG.to_dict(), "model": {"name": "fake"}},
                             flush_interval_s=0.01, **(writer_kwargs or {}))
    engine = LLMEngine(CONFIG, runner or FakeRunner(64, 4), 64, recorder=writer)
    finished = engine.collect_finished()
    for i in range(num_requests):
        engine.add_request([1 + i, 2, 3, 4, 5], SamplingParams(max_tokens=12, ignore_eos=True),
                           request_id=f"r{i}")
    while engine.has_unfinished:
        engine.step()
        time.sleep(pause_s)
    try:
        writer.close()
        closed_error = None
    except RecordingError as e:
        closed_error = str(e)
    return engine, finished, closed_error


def test_out_of_memory_fails_that_steps_requests_and_serves_the_others(tmp_path, monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    path = tmp_path / "oom.sqlite"
    engine, finished, closed_error = serve(path, OutOfMemoryRunner(64, 4))
    assert closed_error is None and emptied == [True]          # the CUDA cache was emptied once
    failed = {rid for rid, r in finished.items() if r.status.value == "FINISHED_ERROR"}
    with open_reader(path) as reader:
        (in_step,) = reader.records(OOM_STEP, OOM_STEP + 1)
        assert in_step.error.startswith("OutOfMemoryError: CUDA out of memory")
        assert failed == {e.request_id for e in in_step.scheduled} and 0 < len(failed) <= 4
        served = set(finished) - failed
        assert len(served) == 10 - len(failed)                   # the others were served to the end
        assert all(finished[rid].num_output_tokens == 12 for rid in served)
        assert reader.latest_step() > OOM_STEP and reader.is_complete()
        assert check_file(reader) == []                          # a clean, complete recording
        info = reader.request_info(sorted(failed)[0])
        assert info.status == "FINISHED_ERROR" and "OutOfMemoryError" in info.error
    assert engine.recorder_error is None


def test_the_window_shows_the_out_of_memory_step(tmp_path, qtbot):
    from ui import MainWindow
    path = tmp_path / "oom.sqlite"
    serve(path, OutOfMemoryRunner(64, 4))
    with open_reader(path) as reader:
        w = MainWindow(reader, None, open_recording=Reader)
        qtbot.addWidget(w)
        w.timer.stop()
        w.show_step(OOM_STEP + 2)
        w.refresh(force=True)
        assert w.banner.isVisibleTo(w)
        assert f"step {OOM_STEP}: OutOfMemoryError: CUDA out of memory" in w.banner.label.text()
        w.close()


def disk_full_after(monkeypatch, step: int):
    """Once the writer has committed ``step``, cap its file at the pages it has: from then on
    SQLite itself fails with SQLITE_FULL ("database or disk is full"), as on a full disk."""
    real = RecordingWriter._commit

    def commit(self, db, pending):
        real(self, db, pending)
        if self.last_committed_step >= step:
            (pages,), = db.execute("PRAGMA page_count").fetchall()
            db.execute(f"PRAGMA max_page_count = {pages}")

    monkeypatch.setattr(RecordingWriter, "_commit", commit)


def check_incomplete(path, capsys):
    from app.cli import main
    with open_reader(path) as reader:
        last = reader.latest_step()
        assert not reader.is_complete() and last >= 0
        reader.state_at(last)                                    # every committed step replays
        problems = check_file(reader)
    assert [(p.step, p.invariant) for p in problems] == [(last, "incomplete")], problems
    capsys.readouterr()
    assert main(["check", str(path)]) == 1
    assert f"step {last}: incomplete: the run was cut short" in capsys.readouterr().out
    return last


def test_sqlite_full_stops_the_recording_not_the_engine(tmp_path, monkeypatch, capsys):
    disk_full_after(monkeypatch, 10)
    path = tmp_path / "full.sqlite"
    # 4 kB pages (not the writer's 16 kB): the capped file's last pages fill within a few steps;
    # a pause between steps: the writer commits as it goes (at once, it would cap a finished file)
    engine, finished, closed_error = serve(path, num_requests=40, writer_kwargs={"page_size": 4096},
                                           pause_s=0.005)
    assert len(finished) == 40 and all(r.num_output_tokens == 12 for r in finished.values())
    assert "database or disk is full" in engine.recorder_error
    assert closed_error is None or "database or disk is full" in closed_error
    last = check_incomplete(path, capsys)
    assert 10 <= last < engine.step_index - 1


def test_the_cli_run_says_the_disk_filled(tmp_path, monkeypatch, capsys):
    from app.cli import main
    from recordings.workloads.workload import DEMO_TRACE
    disk_full_after(monkeypatch, 10)
    path = tmp_path / "full.sqlite"
    code = main(["run", "--trace", str(DEMO_TRACE), "--limit", "40", "--executor", "sim", "--sim-model",
                 "llama-3.2-1b", "--sim-device", "h200", "--num-gpu-blocks", "256", "--record", str(path)])
    err = capsys.readouterr().err
    assert code == 1 and "database or disk is full" in err
    check_incomplete(path, capsys)


def test_a_writer_thread_that_dies_leaves_a_file_that_says_so(tmp_path, monkeypatch, capsys):
    real = RecordingWriter._commit

    def dying(self, db, pending):
        if any(kind == "step" and payload.step >= 6 for kind, payload in pending):
            raise SystemExit("writer thread killed")             # escapes the commit: the thread ends
        real(self, db, pending)

    monkeypatch.setattr(RecordingWriter, "_commit", dying)
    path = tmp_path / "dead.sqlite"
    # a queue of 8 items: a dead writer must not leave the engine waiting on a full queue forever
    engine, finished, closed_error = serve(path, writer_kwargs={"max_queue_items": 8}, pause_s=0.03)
    assert len(finished) == 10                                   # served to the end
    assert "SystemExit: writer thread killed" in engine.recorder_error
    last = check_incomplete(path, capsys)
    assert last < 6


@pytest.mark.parametrize("error", [RuntimeError("CUDA error: out of memory"), torch.OutOfMemoryError("x")])
def test_what_counts_as_out_of_memory(error):
    from engine.engine import is_out_of_memory
    assert is_out_of_memory(error)
    assert not is_out_of_memory(RuntimeError("shape mismatch")) and not is_out_of_memory(ValueError("out of memory"))


def _summary_value(out: str, name: str) -> str:
    """The value of the summary line ``name`` (``"steps   1504"`` -> ``"1504"``)."""
    (line,) = [ln for ln in out.splitlines() if ln.split("  ")[0] == name]
    return line[len(name):].split()[0]


def test_a_full_disk_stops_the_run_at_once_and_every_number_is_the_files(tmp_path, monkeypatch, capsys):
    """The engine steps no more once the recording failed; the message and the summary name
    what the file holds, not what the engine ran."""
    import re

    from app.cli import main
    from recordings.workloads.workload import DEMO_TRACE
    disk_full_after(monkeypatch, 10)
    steps_after_failure = []
    real_step = LLMEngine.step

    def step(self, *args, **kwargs):
        if self.recorder_error:
            steps_after_failure.append(self.step_index)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(LLMEngine, "step", step)
    path = tmp_path / "full.sqlite"
    code = main(["run", "--trace", str(DEMO_TRACE), "--limit", "40", "--executor", "sim", "--sim-model",
                 "llama-3.2-1b", "--sim-device", "h200", "--num-gpu-blocks", "256", "--record", str(path)])
    captured = capsys.readouterr()
    assert code == 1 and steps_after_failure == []
    with open_reader(path) as reader:
        last = reader.latest_step()
        (num_requests,), = reader.execute("SELECT count(*) FROM requests")
    assert f"the file holds steps 0..{last} " in captured.err
    assert f"{path} holds steps 0..{last:,} and {num_requests:,} requests" in captured.err
    assert "killed or crashed" not in captured.out          # the cause is known: said instead
    assert re.search(r"INCOMPLETE recording: recording stopped: .*database or disk is full", captured.out)
    assert int(_summary_value(captured.out, "steps").replace(",", "")) == last + 1
    assert int(_summary_value(captured.out, "requests").replace(",", "")) == num_requests


def test_a_real_file_size_limit_keeps_every_committed_step(tmp_path):
    """``ulimit -f`` (the OS refuses to grow the file, as a full disk does): the run exits 1,
    the file (its WAL folded back or kept) replays every step the message names."""
    import resource
    import subprocess
    import sys

    from tests.support.paths import DATA
    limit = 1024 * 1024

    def cap_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    path = tmp_path / "f.sqlite"
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "--trace", str(DATA / "traces" / "azure_conv_300.csv"),
         "--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "h200", "--num-gpu-blocks",
         "512", "--limit", "200", "--record", str(path)],
        cwd=ROOT, capture_output=True, text=True, preexec_fn=cap_file_size, timeout=300,
        env={**__import__("os").environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the disk is full, or the file reached a size limit" in proc.stderr
    with open_reader(path) as reader:
        last = reader.latest_step()
        assert last > 0 and not reader.is_complete()
        reader.state_at(last)
        (num_requests,), = reader.execute("SELECT count(*) FROM requests")
    assert f"the file holds steps 0..{last} " in proc.stderr
    assert f"holds steps 0..{last:,} and {num_requests:,} requests" in proc.stderr
    assert int(_summary_value(proc.stdout, "steps").replace(",", "")) == last + 1
