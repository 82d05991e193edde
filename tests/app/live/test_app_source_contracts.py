"""Every source the window can be given implements all of ``StepSource`` (engine.state.source);
the recordings also ``RecordingSource``, the live and in-memory sources not; every control all of
``EngineControl``. The members are read from the protocols, so a newly declared one is checked too."""
from __future__ import annotations

import shutil

import pytest

from app.live.bridge import EngineWorker
from app.live.source import LiveSource
from engine.state.source import EngineControl, RecordingSource, StepSource
from recordings.file.open_reader import open_reader
from recordings.file.reader import Reader
from recordings.file.step_batches import batch_columns
from recordings.file.v1_reader import V1Reader
from tests.support.fakes import FakeControl, FakeSource
from tests.support.paths import FIXTURES


def members(protocol) -> set[str]:
    """The methods and attributes ``protocol`` declares (its own and its bases')."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object,) or cls.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")}
        names |= set(getattr(cls, "__annotations__", {}))
    return names


@pytest.fixture
def sources(tmp_path):
    rec = tmp_path / "fake.sqlite"
    fake = FakeSource(12, record_to=rec)
    fake.close()
    v1 = tmp_path / "v1.sqlite"
    shutil.copy(FIXTURES / "v1_small.sqlite", v1)
    live = LiveSource(fake.state_at(-1), open_reader=Reader)
    live.reset(fake.state_at(-1), fake.run_info().replace(recording=str(rec)))
    for record in fake.records(0, 12):
        live.publish(fake.state_at(record.step), record)
    readers = [open_reader(rec), open_reader(v1)]
    yield {"reader": readers[0], "v1": readers[1], "live": live, "fake": fake}
    for r in readers:
        r.close()


def test_every_source_implements_all_the_window_uses(sources):
    assert {"step_batches", "request_info", "request_timeline", "records", "state_at"} <= members(StepSource)
    assert {"path", "damage", "is_complete", "keep_readable"} <= members(RecordingSource)
    for name, source in sources.items():
        missing = [m for m in members(StepSource) if not callable(getattr(source, m, None))]
        assert not missing, (name, missing)
        assert isinstance(source, RecordingSource) == (name in ("reader", "v1")), name
    assert isinstance(sources["v1"], V1Reader)


def test_step_batches_and_request_info_agree_across_sources(sources):
    fake, live, reader = sources["fake"], sources["live"], sources["reader"]
    want = batch_columns(fake.records(0, 12))
    for source in (fake, live, reader):
        got = source.step_batches(0, 12)
        assert got.keys() == want.keys()
        assert list(got["step"]) == list(range(12)) and list(got["batch_start"]) == list(want["batch_start"])
        assert list(got["request_id"]) == list(want["request_id"])
    assert fake.request_info("req-0") is None                 # nothing recorded to look it up in
    assert reader.request_info("req-0").arrival_step == 0
    assert live.request_info("req-0").arrival_step == 0       # through the recording being written
    assert reader.request_info("no-such") is None


def test_every_control_implements_the_engine_control():
    source = FakeSource(2)
    for control in (FakeControl(source), EngineWorker):
        missing = [m for m in members(EngineControl) if not callable(getattr(control, m, None))]
        assert not missing, (type(control).__name__, missing)
    assert FakeControl(source).status() is None
