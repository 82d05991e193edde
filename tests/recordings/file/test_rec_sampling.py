"""Schema 5 stores a request's sampling without the keys at their defaults
(``codec.stored_sampling``); what is left rebuilds the same ``SamplingParams``."""
from __future__ import annotations

import dataclasses
import json

from engine.request import SamplingParams
from recordings.file import codec


def _rebuilt(params: SamplingParams) -> SamplingParams:
    stored = json.loads(codec.dumps(codec.stored_sampling(dataclasses.asdict(params))))
    stored["stop"] = tuple(stored.get("stop", ()))
    return SamplingParams(**stored)


def test_defaults_are_left_out_and_max_tokens_always_stays():
    assert codec.stored_sampling(dataclasses.asdict(SamplingParams())) == {"max_tokens": 16}
    assert codec.stored_sampling(dataclasses.asdict(SamplingParams(max_tokens=44, ignore_eos=True))) == \
        {"max_tokens": 44, "ignore_eos": True}


def test_what_is_stored_rebuilds_the_same_params():
    for params in (SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9, top_k=20, seed=3, n=2),
                   SamplingParams(stop=("\n", "END"), include_stop_str_in_output=True, priority=-2),
                   SamplingParams(max_tokens=1, repetition_penalty=1.1, frequency_penalty=0.5,
                                  presence_penalty=-0.5, ignore_eos=True)):
        assert _rebuilt(params) == params


def test_keys_it_does_not_know_are_kept():
    assert codec.stored_sampling({"max_tokens": 3, "rebuilt": ["x"], "temperature": 0.0}) == \
        {"max_tokens": 3, "rebuilt": ["x"]}
