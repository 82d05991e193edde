"""A recording is readable while it is written, and after the writing process dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recordings import Reader
from synthetic import feed

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def test_a_reader_follows_a_growing_recording(tmp_path, small_run):
    from recordings import RecordingWriter

    path = tmp_path / "run.sqlite"
    seen = []
    with RecordingWriter(path, small_run.run_info, flush_interval_s=60) as writer:
        reader = Reader(path)
        for start in range(0, len(small_run.records), 10):
            feed(writer, small_run, start, start + 10)
            writer.flush()
            latest = reader.latest_step()
            seen.append(latest)
            assert reader.state_at(latest) == small_run.states[latest]
            assert reader.state_at(10**6) == small_run.states[latest]  # clamped to what exists
            assert reader.records(0, 10**6) == small_run.records[:latest + 1]
            assert not reader.is_complete()
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert seen[-1] == len(small_run.records) - 1
    assert reader.is_complete()


_CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path[:0] = [{repo!r}, {here!r}]
    from recordings import RecordingWriter
    from synthetic import feed, generate
    run = generate(seed=1, num_requests=14, num_gpu_blocks=14, max_num_seqs=4)
    writer = RecordingWriter({path!r}, run.run_info, keyframe_interval=8, flush_interval_s=600)
    feed(writer, run, 0, {committed})
    writer.flush()
    feed(writer, run, {committed}, len(run.records))  # queued, never committed
    print("flushed", flush=True)
    if {how!r} == "exit":
        os._exit(1)
    time.sleep(60)
""")


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_killed_writer_leaves_every_committed_step(tmp_path, small_run, how):
    path = tmp_path / "run.sqlite"
    committed = 21
    code = _CHILD.format(repo=str(REPO), here=str(HERE), path=str(path), committed=committed,
                         how=how)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "flushed"
        if how == "sigkill":
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0
    reader = Reader(path)
    assert reader.latest_step() == committed - 1
    assert not reader.is_complete()
    for k in range(committed):
        assert reader.state_at(k) == small_run.states[k]
    assert reader.records(0, 10**6) == small_run.records[:committed]
    for table in ("step_requests", "events", "tokens", "request_states", "keyframes"):
        (top,), = reader.execute(f"SELECT coalesce(max(step), -1) FROM {table}")
        assert top < committed, f"{table} has rows of an uncommitted step"


def test_a_writer_left_open_is_closed_at_interpreter_exit(tmp_path, small_run):
    path = tmp_path / "run.sqlite"
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(REPO)!r}, {str(HERE)!r}]
        from recordings import RecordingWriter
        from synthetic import feed, generate
        run = generate(seed=1, num_requests=14, num_gpu_blocks=14, max_num_seqs=4)
        writer = RecordingWriter({str(path)!r}, run.run_info, flush_interval_s=600)
        feed(writer, run, 0, len(run.records))  # no flush, no close
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    reader = Reader(path)
    assert reader.is_complete()
    assert reader.records(0, 10**6) == small_run.records
