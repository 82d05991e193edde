"""``RunInfo``: the stored JSON object comes back from ``from_json -> to_json`` with the same keys,
values and order; unknown keys and values of the wrong type survive; typed fields read as typed."""
from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import EngineConfig
from engine.run_info import _TYPES, RunInfo, RunInfoWarning

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
KEYS = st.sampled_from(sorted(_TYPES)) | st.text(max_size=10)     # known keys, and any others


def dumped(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(KEYS, JSON, max_size=8))
def test_any_stored_object_comes_back_the_same_text(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RunInfoWarning)     # known keys holding values of other types
        info = RunInfo.from_json(data)
    assert dumped(info.to_json()) == dumped(data)
    for key, value in data.items():
        if key in _TYPES and key not in info.extra:
            assert getattr(info, key) == value
    assert len(caught) == sum(key in _TYPES for key in info.extra)    # one warning per bad known key


def test_every_known_key_is_a_field_with_a_default():
    fields = {f.name for f in dataclasses.fields(RunInfo)}
    assert set(_TYPES) == fields - {"extra", "layout"}
    assert RunInfo().to_json() == {}


def test_typed_fields_read_what_a_model_run_stores():
    stored = {"config": EngineConfig(block_size=4).to_dict(), "model": {"name": "m", "num_parameters": 7},
              "device": "cpu", "torch_threads": 2, "dtype": "float32", "seed": 0, "trace": None,
              "started_at": "2026-01-01T00:00:00+00:00", "newer_key": [1, 2]}
    info = RunInfo.from_json(stored)
    assert info.config["block_size"] == 4 and info.model_name == "m" and info.torch_threads == 2
    assert info.trace is None and info.extra == {"newer_key": [1, 2]} and info.simulated is None
    assert list(info.to_json()) == list(stored) and info.to_json() == stored
    assert RunInfo(model="fake").model_name == "fake" and RunInfo().model_name is None


def test_an_unknown_key_survives_and_a_field_set_later_goes_after_the_stored_keys():
    info = RunInfo.from_json({"model": "fake", "written_by_v9": {"x": 1}, "config": {"block_size": 4}})
    assert info.extra == {"written_by_v9": {"x": 1}}
    out = info.replace(recording="/tmp/r.sqlite", text_stored=False).to_json()
    assert list(out) == ["model", "written_by_v9", "config", "recording", "text_stored"]
    assert out["written_by_v9"] == {"x": 1}


def test_a_stored_null_stays_null_and_an_absent_key_stays_absent():
    assert RunInfo.from_json({"trace": None}).to_json() == {"trace": None}
    assert "trace" not in RunInfo.from_json({"model": "m"}).to_json()
    assert RunInfo(trace=None).to_json() == {}            # built in code: None is not written


GOOD = {"config": {"block_size": 4}, "seed": 3, "simulated": True, "model": "m2", "trace": {"name": "t"},
        "torch_threads": 4}


@pytest.mark.parametrize("key, value", [("config", [1, 2]), ("config", None), ("seed", "7"), ("seed", True),
                                        ("simulated", 1), ("model", 3), ("trace", "azure.csv"),
                                        ("torch_threads", 2.0)])
def test_a_value_of_the_wrong_type_is_kept_as_stored_and_named(key, value):
    stored = {"device": "cpu", key: value, "dtype": "float32"}
    with pytest.warns(RunInfoWarning, match=rf"run\.sqlite: run_info\['{key}'\] is {type(value).__name__}"):
        info = RunInfo.from_json(stored, where="run.sqlite")
    assert info.extra == {key: value} and getattr(info, key) == getattr(RunInfo(), key)   # read as absent
    assert dumped(info.to_json()) == dumped(stored)                                       # written back as stored
    fixed = info.replace(**{key: GOOD[key]}).to_json()
    assert list(fixed) == ["device", key, "dtype"] and fixed[key] == GOOD[key]


def test_not_an_object_is_refused():
    with pytest.raises(TypeError, match="f.sqlite: run_info is a list, not an object"):
        RunInfo.from_json([1], where="f.sqlite")
