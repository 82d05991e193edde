"""A recording's ``runs.run_info_json`` through ``engine.run_info.RunInfo``: the fixtures written by
earlier releases and today's runs read back as the same JSON text; a stored value of the wrong
type keeps the file readable (a warning names the key) and survives a rewrite (salvage)."""
from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from engine.run_info import RunInfo, RunInfoWarning
from recordings.damage.salvage import salvage
from recordings.file import codec
from recordings.file.open_reader import open_reader
from recordings.metrics.summary_lines import summary_lines
from tests.support.engine_driver import SMALL_SEED, run_engine
from tests.support.fakes import FakeSource
from tests.support.paths import FIXTURES


def stored_text(path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT run_info_json FROM runs").fetchone()[0]


def store(path, info: dict) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET run_info_json = ?", (json.dumps(info),))


@pytest.mark.parametrize("name", ["v1_small", "v3_prefix", "v3_swap"])
def test_the_fixtures_run_info_reads_back_as_the_same_text(name):
    text = stored_text(FIXTURES / f"{name}.sqlite")
    assert codec.dumps(RunInfo.from_json(json.loads(text)).to_json()) == text
    with open_reader(FIXTURES / f"{name}.sqlite") as reader:
        info = reader.run_info()
    assert info.to_json() == json.loads(text) and info.extra == {}
    assert info.config["block_size"] == 4 and info.model_name in ("fake", "fake-hash")


def test_todays_runs_write_run_info_that_reads_back_as_the_same_text(tmp_path):
    run = run_engine(tmp_path / "engine.sqlite", seed=SMALL_SEED, run_info={"newer_key": {"a": [1]}})
    FakeSource(8, record_to=tmp_path / "fake.sqlite").close()
    for path in (run.path, tmp_path / "fake.sqlite"):
        text = stored_text(path)
        assert codec.dumps(RunInfo.from_json(json.loads(text)).to_json()) == text
    with open_reader(run.path) as reader:
        assert reader.run_info() == run.run_info and reader.run_info().extra == {"newer_key": {"a": [1]}}


def test_a_stored_value_of_the_wrong_type_is_named_and_kept(tmp_path):
    run = run_engine(tmp_path / "run.sqlite", seed=SMALL_SEED, close=True)
    bad = {**run.run_info.to_json(), "trace": "azure.csv", "written_by_v9": 1}
    store(run.path, bad)
    with pytest.warns(RunInfoWarning, match=r"run\.sqlite: run_info\['trace'\] is str 'azure.csv', not an object"):
        reader = open_reader(run.path)
    info = reader.run_info()
    assert info.trace is None and info.extra == {"trace": "azure.csv", "written_by_v9": 1}
    assert summary_lines(reader)                          # the run still reads and summarizes
    reader.close()
    with pytest.warns(RunInfoWarning, match="trace"):
        result = salvage(run.path, tmp_path / "copy.sqlite")
    copied = json.loads(stored_text(result.path))
    assert list(copied) == [*bad, "salvaged"] and {k: copied[k] for k in bad} == bad


def test_a_stored_run_info_that_is_not_an_object_is_a_recording_error(tmp_path):
    from recordings.errors import RecordingError

    path = tmp_path / "run.sqlite"
    shutil.copy(FIXTURES / "v3_swap.sqlite", path)
    store(path, [1, 2])
    with pytest.raises(RecordingError, match=r"corrupt recording \(run info\).*run_info is a list, not an object"):
        open_reader(path)
