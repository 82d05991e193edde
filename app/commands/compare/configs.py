"""The configs of ``batchscope compare``: ``--policies static,fcfs`` or ``--configs
"policy=static;policy=fcfs,enable_prefix_caching=1"`` turned into one argument namespace per
run, each value checked by the argparse action of its flag (its type and choices)."""
from __future__ import annotations

import argparse
import copy
import re
from dataclasses import dataclass

# vLLM's name of a knob whose flag is its negation
NEGATED = {"enable_chunked_prefill": "no_chunked_prefill"}
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
NOT_KNOBS = {"help", "record", "trace", "limit"}       # what every run of a comparison shares


@dataclass(frozen=True)
class RunConfig:
    """One run of a comparison: its ``label`` (what the tables call it), a file-safe ``slug`` and
    the overrides ``{dest: value}`` applied to the shared arguments."""

    label: str
    slug: str
    overrides: dict


def knob_actions(parser: argparse.ArgumentParser, groups: tuple[str, ...]) -> dict[str, argparse.Action]:
    """``{dest: action}`` of the flags in the argument groups of ``parser`` whose titles start
    with one of ``groups`` (the engine knobs and the simulated executor's flags)."""
    return {a.dest: a for g in parser._action_groups if (g.title or "").startswith(groups)  # noqa: SLF001
            for a in g._group_actions if a.dest not in NOT_KNOBS}                        # noqa: SLF001


def _value(key: str, text: str, action: argparse.Action):
    """``text`` as the flag of ``key`` would parse it. Raises ``ValueError`` naming the key."""
    if action.nargs == 0:                                   # a store_true flag
        if text.lower() not in TRUE + FALSE:
            raise ValueError(f"{key}={text}: a switch takes 1/0 (true/false)")
        return text.lower() in TRUE
    try:
        value = action.type(text) if action.type else text
    except (TypeError, ValueError):
        raise ValueError(f"{key}={text}: not a valid {getattr(action.type, '__name__', 'value')}") from None
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{key}={text}: choose from {', '.join(map(str, action.choices))}")
    return value


def parse_configs(spec: str, actions: dict[str, argparse.Action]) -> list[RunConfig]:
    """``"k=v,k=v;k=v"`` (configs separated by ``;``, knobs by ``,``; knob names as the flags'
    destinations, e.g. ``policy``, ``max_num_seqs``, or vLLM's ``enable_chunked_prefill``) as
    :class:`RunConfig` s. Raises ``ValueError`` naming the bad part and the known knobs, or for
    fewer than two configs."""
    configs = []
    for part in (p.strip() for p in spec.split(";")):
        if not part:
            continue
        overrides = {}
        for item in (i.strip() for i in part.split(",") if i.strip()):
            key, eq, text = (s.strip() for s in item.partition("="))
            if not eq or not key:
                raise ValueError(f"{item!r} in --configs: write knob=value")
            dest, negate = (NEGATED[key], True) if key in NEGATED else (key.replace("-", "_"), False)
            if dest not in actions:
                raise ValueError(f"unknown knob {key!r} in --configs; knobs: "
                                 f"{', '.join(sorted(set(actions) | set(NEGATED)))}")
            value = _value(key, text, actions[dest])
            overrides[dest] = (not value) if negate else value
        configs.append(RunConfig(part, re.sub(r"[^A-Za-z0-9=._-]+", "_", part), overrides))
    if len(configs) < 2:
        raise ValueError(f"compare needs two or more configs, got {len(configs)}: {spec!r}")
    return configs


def policy_configs(spec: str, actions: dict[str, argparse.Action]) -> list[RunConfig]:
    """``--policies static,fcfs``: one config per policy, labelled by the policy."""
    configs = parse_configs(";".join(f"policy={p.strip()}" for p in spec.split(",") if p.strip()), actions)
    return [RunConfig(c.overrides["policy"], c.overrides["policy"], c.overrides) for c in configs]


def run_args(args: argparse.Namespace, config: RunConfig, record: str) -> argparse.Namespace:
    """A copy of the shared ``args`` with ``config``'s overrides, recording to ``record``."""
    out = copy.copy(args)
    for dest, value in config.overrides.items():
        setattr(out, dest, value)
    out.record = record
    return out
