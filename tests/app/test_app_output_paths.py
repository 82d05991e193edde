"""Every output path is checked before anything heavy runs (``app.usage.check_output``), with the
same message in every command: an existing file, a folder that takes no new file, a disk
without room. Exit status 2, nothing loaded, nothing written."""
from __future__ import annotations

import shutil

import pytest

from app.cli import main
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import SamplingParams
from recordings.file.writer import RecordingWriter
from recordings.workloads.workload import DEMO_TRACE
from tests.support.fake_runner import FakeRunner
from tests.support.paths import unwritable_folder

SIM = ("--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100", "--num-gpu-blocks", "64")
CONFIG = EngineConfig(block_size=4, num_gpu_blocks=32, max_model_len=32, max_num_seqs=2,
                      max_num_batched_tokens=16, clock="virtual")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "run.sqlite"
    with RecordingWriter(path, {"config": CONFIG.to_dict(), "model": {"name": "fake"}}) as writer:
        engine = LLMEngine(CONFIG, FakeRunner(64, 4), 32, recorder=writer)
        engine.add_request([1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True), request_id="r0")
        while engine.has_unfinished:
            engine.step()
    return path


def argv_of(command: str, rec, out) -> list[str]:
    return {
        "run": ["run", "--trace", str(DEMO_TRACE), "--limit", "3", *SIM, "--record", str(out)],
        "demo": ["demo", *SIM, "--record", str(out)],
        "recover": ["recover", str(rec), str(out)],
        "export json": ["export", str(rec), "--format", "json", "-o", str(out)],
        "export csv": ["export", str(rec), "--format", "csv", "-o", str(out)],
        "fit": ["fit", str(rec), "-o", str(out)],
        "compare --report": ["compare", str(rec), str(rec), "--report", str(out), "--no-window"],
    }[command]


COMMANDS = ["run", "demo", "recover", "export json", "export csv", "fit", "compare --report"]


@pytest.fixture
def nothing_heavy(monkeypatch):
    """Fail the test if a command gets as far as building an engine or reading the recording."""
    def heavy(*args, **kwargs):
        raise AssertionError("an output path was checked only after the heavy work started")
    import app.factory
    import recordings.file.open_reader
    monkeypatch.setattr(app.factory, "build_engine", heavy)
    monkeypatch.setattr(recordings.file.open_reader, "open_reader", heavy)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_folder_that_takes_no_file(command, recording, tmp_path, capsys, nothing_heavy):
    folder = unwritable_folder(tmp_path)
    out = folder / ("out" if command == "export csv" else "out.sqlite")
    assert main(argv_of(command, recording, out)) == 2
    err = capsys.readouterr().err
    assert f"cannot write {out}" in err and f"folder {folder} is not writable" in err, err


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "compare --report"])  # a report is replaced
def test_an_existing_file(command, recording, tmp_path, capsys, nothing_heavy):
    out = tmp_path / "out.sqlite"
    out.write_text("keep")
    targets = [tmp_path / "out-requests.csv"] if command == "export csv" else [out]
    for target in targets:
        target.write_text("keep")
    assert main(argv_of(command, recording, tmp_path / "out" if command == "export csv" else out)) == 2
    assert f"{targets[0]} exists" in capsys.readouterr().err
    assert all(t.read_text() == "keep" for t in targets)


@pytest.mark.parametrize("command", ["run", "demo", "recover"])
def test_a_left_over_write_ahead_log_counts_as_the_recording(command, recording, tmp_path, capsys, nothing_heavy):
    """A killed run's ``OUT.sqlite-wal`` (and ``-shm``) left without ``OUT.sqlite``: the recorder
    would refuse it ('file already exists (pass overwrite=True ...)', exit 1 after the model
    loaded), so the command line is refused first, naming the file, and nothing is deleted."""
    out = tmp_path / "out.sqlite"
    wal, shm = tmp_path / "out.sqlite-wal", tmp_path / "out.sqlite-shm"
    wal.write_bytes(b"")
    shm.write_bytes(b"\0" * 32768)
    assert main(argv_of(command, recording, out)) == 2
    err = capsys.readouterr().err
    assert f"{wal} exists: the write-ahead log of an earlier recording at out.sqlite" in err, err
    assert "delete out.sqlite-wal and out.sqlite-shm" in err and "overwrite=True" not in err
    assert wal.exists() and shm.read_bytes() == b"\0" * 32768 and not out.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk(command, recording, tmp_path, capsys, monkeypatch, nothing_heavy):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=3 * 2**20))
    out = tmp_path / ("out" if command == "export csv" else "out.sqlite")
    assert main(argv_of(command, recording, out)) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "only 3.0 MiB free on the disk of" in err, err


def test_the_live_windows_default_recording_is_checked_too(tmp_path, capsys, monkeypatch, nothing_heavy):
    folder = unwritable_folder(tmp_path)
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(folder))
    assert main(["demo", *SIM]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {folder / 'runs'}" in err and f"folder {folder} is not writable" in err, err
