"""Reading ``../shared/cases/scheduler-cases.json``: a case by id, its engine config (xfail naming the
feature when it needs one the engine lacks) and its workload as harness arrivals and actions."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine.config import ConfigError, EngineConfig
from engine.request import SamplingParams
from engine_harness import Action, Arrival, distinct_prompt

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CASES_FILE = SHARED / "cases" / "scheduler-cases.json"
CASES = ({c["id"]: c for c in json.loads(CASES_FILE.read_text())["cases"]}
         if CASES_FILE.exists() else {})
ENGINE_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}
NOT_KNOBS = {"note", "same_as"}


def case(case_id: str) -> dict:
    if not CASES:
        pytest.skip(f"{CASES_FILE} not found (the cases live in ../shared next to the repo; CI has it)")
    c = dict(CASES[case_id])
    ref = c["config"].get("same_as")
    if ref:                                   # a variant of another case: its config and requests
        base = CASES[ref]
        c["config"] = {**base["config"], **{k: v for k, v in c["config"].items() if k != "same_as"}}
        c["requests"] = base["requests"] + c["requests"]
    return c


def missing_features(cfg: dict) -> list[str]:
    """Features a case's config asks for that the engine does not implement."""
    out = []
    if cfg.get("policy", "fcfs") != "fcfs":
        out.append(f"{cfg['policy']} scheduling policy")
    if cfg.get("preemption_mode", "recompute") != "recompute" or "num_cpu_blocks" in cfg:
        out.append("swap preemption (CPU swap pool)")
    return out


def knobs(cfg: dict) -> dict:
    """The case's engine knobs as EngineConfig keywords."""
    return {k: v for k, v in cfg.items() if k not in NOT_KNOBS}


def xfail_missing(case_id: str, cfg: dict) -> None:
    """Report a case (variant) we cannot run: the engine must refuse its knobs, then xfail."""
    missing = missing_features(cfg)
    assert missing, f"{case_id} needs no missing feature: it must get a real test"
    with pytest.raises((ConfigError, TypeError)):
        EngineConfig(**knobs(cfg))
    pytest.xfail(f"{case_id}: needs {', '.join(missing)}, which the engine does not implement")


def engine_config(c: dict, **overrides) -> EngineConfig:
    cfg = {**c["config"], **overrides}
    if missing_features(cfg):
        xfail_missing(c["id"], cfg)
    k = knobs(cfg)
    assert set(k) <= ENGINE_FIELDS, set(k) - ENGINE_FIELDS
    return EngineConfig(**k)


def arrivals_and_actions(c: dict) -> tuple[list[Arrival], list[Action]]:
    """Requests with a numeric ``arrive_step`` and ``prompt_len`` (distinct prompts, EOS ignored)."""
    arrivals, actions = [], []
    for i, r in enumerate(c["requests"]):
        if not isinstance(r.get("arrive_step", 0), int) or "prompt_len" not in r:
            continue
        params = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True)
        arrivals.append(Arrival(r["id"], r.get("arrive_step", 0), distinct_prompt(i, r["prompt_len"]), params))
        for kind in ("pause", "abort"):
            if f"{kind}_step" in r:
                actions.append(Action(r[f"{kind}_step"], kind, r["id"]))
    return arrivals, actions
