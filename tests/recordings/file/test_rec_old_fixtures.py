"""Schema-3 and schema-4 recordings (written by BatchScope before schema 4 and before schema 5:
``fixtures/v3_*.sqlite``, ``fixtures/v4_*.sqlite``, made by ``fixtures/make_v3_fixture.py``) open
and replay exactly as that release's reader gave them (``fixtures/v*_*.json``): every state, in
order and out of order, and every step record."""
from __future__ import annotations

import json
import random
import shutil

import pytest

from recordings.file import opening
from recordings.file.open_reader import open_reader
from recordings.file.schema import latest_version
from tests.support.canonical import as_recorded, record_data, state_data
from tests.support.paths import FIXTURES

NAMES = ("v3_prefix", "v3_swap", "v4_prefix", "v4_swap")


@pytest.fixture(params=NAMES)
def fixture(request, tmp_path):
    path = tmp_path / f"{request.param}.sqlite"
    shutil.copy(FIXTURES / f"{request.param}.sqlite", path)
    expected = json.loads((FIXTURES / f"{request.param}.json").read_text())
    return path, expected


def test_the_fixture_is_of_the_schema_its_name_says(fixture):
    path, expected = fixture
    version = int(path.name[1])
    with open_reader(path) as reader:
        assert expected["schema"] == version
        assert reader.execute("PRAGMA user_version") == [(version,)]
        assert reader.latest_step() == len(expected["records"]) - 1


def test_every_state_replays_as_before(fixture):
    path, expected = fixture
    states = expected["states"]            # states[0] is the state before step 0
    with open_reader(path, cache_size=2) as reader:
        for k in range(-1, len(states) - 1):
            assert as_recorded(state_data(reader.state_at(k)), states[k + 1]) == states[k + 1], f"state after step {k}"
        order = list(range(-1, len(states) - 1))
        random.Random(0).shuffle(order)
        for k in order:
            assert as_recorded(state_data(reader.state_at(k)), states[k + 1]) == states[k + 1], f"state after step {k}"


def test_every_record_reads_as_before(fixture):
    path, expected = fixture
    with open_reader(path) as reader:
        records = reader.records(0, len(expected["records"]))
        assert [record_data(r) for r in records] == expected["records"]
        assert [record_data(r) for r in reader.records(5, 9)] == expected["records"][5:9]


def test_the_file_is_only_read(fixture):
    path, _ = fixture
    before = path.read_bytes()
    with open_reader(path) as reader:
        reader.state_at(reader.latest_step())
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", ["v4_prefix", "v4_swap"])
def test_a_schema_4_recording_upgrades_in_place_and_replays_as_before(tmp_path, name):
    """Schema 5 changed only how new keyframes store their block map: a schema-4 file (whose
    keyframes all hold theirs) is brought to 5 as it is and reads the same."""
    path = tmp_path / f"{name}.sqlite"
    shutil.copy(FIXTURES / f"{name}.sqlite", path)
    expected = json.loads((FIXTURES / f"{name}.json").read_text())
    assert opening.upgrade_file(path) == latest_version() == 5
    with open_reader(path) as reader:
        assert reader.execute("PRAGMA user_version") == [(5,)]
        states = expected["states"]
        for k in (-1, len(states) // 2, len(states) - 2):
            assert as_recorded(state_data(reader.state_at(k)), states[k + 1]) == states[k + 1]
        assert [record_data(r) for r in reader.records(0, 10**6)] == expected["records"]
