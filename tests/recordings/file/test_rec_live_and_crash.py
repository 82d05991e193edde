"""A recording is readable while it is written, and after the writing process dies."""
from __future__ import annotations
from tests.support.paths import REPO

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.engine_driver import SMALL_SEED, run_engine, without_wall_times
from recordings.file.open_reader import open_reader

REPO = REPO
HERE = Path(__file__).resolve().parent


def test_a_reader_follows_a_growing_recording(tmp_path):
    path = tmp_path / "run.sqlite"
    seen = []
    readers = []

    def check(run):
        if len(run.records) % 10:
            return
        if not readers:
            readers.append(open_reader(path))
        reader = readers[0]
        run.writer.flush()
        latest = reader.latest_step()
        seen.append(latest)
        assert latest == len(run.records) - 1
        assert reader.state_at(latest) == run.states[latest]
        assert reader.state_at(10**6) == run.states[latest]  # clamped to what exists
        assert reader.records(0, 10**6) == run.records
        assert not reader.is_complete()

    run = run_engine(path, SMALL_SEED, between_steps=check,
                     writer_kwargs={"flush_interval_s": 60, "keyframe_interval": 8})
    assert len(seen) >= 3 and seen == sorted(seen) and len(set(seen)) == len(seen)
    reader = readers[0]
    assert reader.latest_step() == len(run.records) - 1
    assert reader.is_complete()
    assert reader.records(0, 10**6) == run.records


_CHILD = textwrap.dedent("""
    import logging, os, sys, time
    sys.path[:0] = [{repo!r}, {here!r}]
    logging.disable(logging.CRITICAL)
    from tests.support.engine_driver import run_engine

    def commit_once(run):
        if len(run.records) == {committed}:
            run.writer.flush()

    # the steps after the flush stay queued: never committed (fewer than a batch)
    run = run_engine({path!r}, {seed}, between_steps=commit_once, close=False,
                     writer_kwargs=dict(keyframe_interval=8, flush_interval_s=600))
    print("flushed", len(run.records), flush=True)
    if {how!r} == "exit":
        os._exit(1)
    time.sleep(60)
""")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_killed_writer_leaves_every_committed_step(tmp_path, how):
    path = tmp_path / "run.sqlite"
    committed = 21
    code = _CHILD.format(repo=str(REPO), here=str(HERE), path=str(path), committed=committed,
                         how=how, seed=SMALL_SEED)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        assert line[0] == "flushed" and int(line[1]) > committed + 5
        if how == "sigkill":
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0
    expected = run_engine(None, SMALL_SEED)  # the same run again (virtual clock: deterministic)
    reader = open_reader(path)
    assert reader.latest_step() == committed - 1
    assert not reader.is_complete()
    for k in range(committed):
        assert reader.state_at(k) == expected.states[k]
    assert [without_wall_times(r) for r in reader.records(0, 10**6)] == [
        without_wall_times(r) for r in expected.records[:committed]]
    for table in ("steps", "events", "block_events", "transitions", "keyframes"):
        (top,), = reader.execute(f"SELECT coalesce(max(step), -1) FROM {table}")
        assert top < committed, f"{table} has rows of an uncommitted step"
    (finished,), = reader.execute("SELECT coalesce(max(finish_step), -1) FROM requests")
    assert finished < committed


def test_a_writer_left_open_is_closed_at_interpreter_exit(tmp_path):
    path = tmp_path / "run.sqlite"
    code = textwrap.dedent(f"""
        import logging, sys
        sys.path[:0] = [{str(REPO)!r}]
        logging.disable(logging.CRITICAL)
        from tests.support.engine_driver import run_engine
        run_engine({str(path)!r}, {SMALL_SEED}, close=False,
                   writer_kwargs=dict(flush_interval_s=600))  # no flush, no close
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    expected = run_engine(None, SMALL_SEED)
    reader = open_reader(path)
    assert reader.is_complete()
    assert [without_wall_times(r) for r in reader.records(0, 10**6)] == [
        without_wall_times(r) for r in expected.records]
    assert reader.state_at(10**6) == expected.final
