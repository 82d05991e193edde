"""Reading ``tests/data/cases/scheduler-cases.json`` (a copy of ``../shared/cases``): a case by id,
its engine config (xfail naming the feature when it needs one the engine lacks) and its workload as
harness arrivals and actions."""
from __future__ import annotations
from tests.support.paths import REPO

import dataclasses
import json
import re

import pytest

from engine.config import EngineConfig
from engine.request import SamplingParams
from tests.support.engine_driver import Action, Arrival, distinct_prompt

REPO = REPO
CASES_FILE = REPO / "tests" / "data" / "cases" / "scheduler-cases.json"     # shipped with the tests
SHARED_CASES_FILE = REPO.parent / "shared" / "cases" / "scheduler-cases.json"   # where it comes from
CASES = ({c["id"]: c for c in json.loads(CASES_FILE.read_text())["cases"]}
         if CASES_FILE.exists() else {})
ENGINE_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}
NOT_KNOBS = {"note", "same_as"}


def case(case_id: str) -> dict:
    if not CASES:
        pytest.skip(f"{CASES_FILE} not found: the scheduler cases ship in tests/data/cases")
    c = dict(CASES[case_id])
    ref = c["config"].get("same_as")
    if ref:                                   # a variant of another case: its config and requests
        base = CASES[ref]
        c["config"] = {**base["config"], **{k: v for k, v in c["config"].items() if k != "same_as"}}
        c["requests"] = base["requests"] + c["requests"]
    return c


def knobs(cfg: dict) -> dict:
    """The case's engine knobs as EngineConfig keywords."""
    return {k: v for k, v in cfg.items() if k not in NOT_KNOBS}


def engine_config(c: dict, **overrides) -> EngineConfig:
    cfg = {**c["config"], **overrides}
    k = knobs(cfg)
    assert set(k) <= ENGINE_FIELDS, set(k) - ENGINE_FIELDS
    return EngineConfig(**k)


def arrivals_and_actions(c: dict, *, with_sampling: bool = False,
                         vocab: int = 1000) -> tuple[list[Arrival], list[Action]]:
    """Requests with a numeric ``arrive_step`` and ``prompt_len`` (distinct prompts of ids below
    ``vocab``, EOS ignored). ``with_sampling``: also the case's ``sampling`` knobs (penalties,
    temperature...), which only a real model's logits feel; else greedy defaults."""
    arrivals, actions = [], []
    for i, r in enumerate(c["requests"]):
        if not isinstance(r.get("arrive_step", 0), int) or "prompt_len" not in r:
            continue
        sampling = r.get("sampling", {}) if with_sampling else {}
        params = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True,
                                priority=r.get("priority", 0), **sampling)
        arrivals.append(Arrival(r["id"], r.get("arrive_step", 0),
                                distinct_prompt(i, r["prompt_len"], vocab), params))
        for kind in ("pause", "abort"):
            if f"{kind}_step" in r:
                actions.append(Action(r[f"{kind}_step"], kind, r["id"]))
    return arrivals, actions


def case_prompts(c: dict) -> dict[str, tuple[int, ...]]:
    """Every request's prompt token ids, by id, from ``prompt_len`` or the ``prompt`` phrases the
    cases use: ``"X: 8 tokens"`` / ``"32 tokens T"`` / ``"12 distinct tokens"`` (a prompt of its
    own), ``"same_as R0"``, ``"prefix_of R0 8 tokens"`` (optionally ``"+ 5 new"``) and
    ``"R0 + 1 token"`` (new tokens are the request's own, unlike any other prompt's). Raises
    ``ValueError`` for a phrase it does not know."""
    out: dict[str, tuple[int, ...]] = {}
    for i, r in enumerate(c["requests"]):
        text = str(r.get("prompt", ""))
        if "prompt_len" in r:
            out[r["id"]] = distinct_prompt(i, r["prompt_len"])
            continue
        own = lambda n, skip=0: distinct_prompt(i, skip + n)[skip:]   # noqa: E731
        if m := re.fullmatch(r"same_as (\w+)", text):
            out[r["id"]] = out[m.group(1)]
        elif m := re.fullmatch(r"prefix_of (\w+) (\d+) tokens?(?: \+ (\d+) new)?", text):
            n, extra = int(m.group(2)), int(m.group(3) or 0)
            out[r["id"]] = out[m.group(1)][:n] + own(extra, n)
        elif m := re.fullmatch(r"(\w+) \+ (\d+) tokens?", text):
            base = out[m.group(1)]
            out[r["id"]] = base + own(int(m.group(2)), len(base))
        elif m := re.fullmatch(r"(?:\w+: )?(\d+) (?:distinct )?tokens?(?: \w+)?", text):
            out[r["id"]] = own(int(m.group(1)))
        else:
            raise ValueError(f"{c['id']}: unknown prompt phrase {text!r} of {r['id']}")
    return out
