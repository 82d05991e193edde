"""The configs of ``batchscope compare``: ``--policies static,fcfs`` or ``--configs
"policy=static;policy=fcfs,enable_prefix_caching=1"`` turned into one argument namespace per
run, each value checked as its flag in ``app.args.CONFIG_FLAGS`` checks it (its type and choices)."""
from __future__ import annotations

import argparse
import copy
import re
from dataclasses import dataclass

from app.args import CONFIG_FLAGS, ConfigFlag, config_flag

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class RunConfig:
    """One run of a comparison: its ``label`` (what the tables call it), a file-safe ``slug`` and
    the overrides ``{dest: value}`` applied to the shared arguments."""

    label: str
    slug: str
    overrides: dict


def _value(key: str, text: str, flag: ConfigFlag):
    """``text`` as ``flag`` would parse it on the command line. Raises ``ValueError`` naming the key."""
    if flag.switch:
        if text.lower() not in TRUE + FALSE:
            raise ValueError(f"{key}={text}: a switch takes 1/0 (true/false)")
        return text.lower() in TRUE
    kind, choices = flag.kwargs.get("type"), flag.kwargs.get("choices")
    try:
        value = kind(text) if kind else text
    except (TypeError, ValueError):
        raise ValueError(f"{key}={text}: not a valid {getattr(kind, '__name__', 'value')}") from None
    if choices is not None and value not in choices:
        raise ValueError(f"{key}={text}: choose from {', '.join(map(str, choices))}")
    return value


def knob_names() -> list[str]:
    """What ``--configs`` accepts as knob names: every engine and simulator flag's destination and
    the config field of a negated flag (vLLM's ``enable_chunked_prefill``)."""
    return sorted(set(CONFIG_FLAGS) | {f.field for f in CONFIG_FLAGS.values() if f.negated})


def parse_configs(spec: str) -> list[RunConfig]:
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
            name = key.replace("-", "_")
            flag = config_flag(name)
            if flag is None:
                raise ValueError(f"unknown knob {key!r} in --configs; knobs: {', '.join(knob_names())}")
            value = _value(key, text, flag)
            overrides[flag.dest] = (not value) if flag.negated and name == flag.field else value
        configs.append(RunConfig(part, re.sub(r"[^A-Za-z0-9=._-]+", "_", part), overrides))
    if len(configs) < 2:
        raise ValueError(f"compare needs two or more configs, got {len(configs)}: {spec!r}")
    return configs


def policy_configs(spec: str) -> list[RunConfig]:
    """``--policies static,fcfs``: one config per policy, labelled by the policy."""
    configs = parse_configs(";".join(f"policy={p.strip()}" for p in spec.split(",") if p.strip()))
    return [RunConfig(c.overrides["policy"], c.overrides["policy"], c.overrides) for c in configs]


def run_args(args: argparse.Namespace, config: RunConfig, record: str) -> argparse.Namespace:
    """A copy of the shared ``args`` with ``config``'s overrides, recording to ``record``."""
    out = copy.copy(args)
    for dest, value in config.overrides.items():
        setattr(out, dest, value)
    out.record = record
    return out
