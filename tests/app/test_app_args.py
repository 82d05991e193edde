"""The engine flags are generated from ``EngineConfig`` / ``SimConfig`` (app.args): every field has a
flag or a reason not to, ``--help`` shows the config's defaults, a value given on the command line
reaches the config, and ``compare --configs`` reads the same table."""
from __future__ import annotations

import dataclasses
import re

import pytest

from app.args import CONFIG_FLAGS, ENGINE_FLAGS, NOT_FLAGS, SIM_FLAGS, SIM_SIZED, config_flag, engine_config
from app.cli import build_parser, main
from app.commands.compare.configs import parse_configs
from engine.config import EngineConfig
from engine.sim.config import SimConfig
from engine.sim.cost_model import CostParams

RUN = ["run", "--trace", "t.csv", "--record", "r.sqlite"]
FIELDS = {f.name: f for f in dataclasses.fields(SimConfig)}
ENGINE_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}
COMMAND_DEFAULTS = {"clock"}       # run's own default (wall) differs from the config's (virtual)


def help_blocks(command: list[str], capsys) -> dict[str, str]:
    """``{--option: its help, whitespace folded}`` from ``batchscope <command> --help``, in-process."""
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    blocks = re.split(r"\n  (?=-)", text)
    return {b.split()[0].rstrip(","): " ".join(b.split()) for b in blocks[1:]}


def test_every_config_field_has_a_flag_or_a_reason_not_to():
    for name, f in FIELDS.items():
        if name in NOT_FLAGS:
            assert NOT_FLAGS[name].strip(), name
            assert config_flag(name) is None, f"{name} is listed as no flag but has one"
            continue
        flag = config_flag(name)
        assert flag is not None and flag.field == name, f"config field {name} has no flag"
        assert flag.kwargs.get("help"), f"{flag.option} has no help"
        assert (flag in SIM_FLAGS) == (name not in ENGINE_FIELDS), name
    assert set(NOT_FLAGS) <= set(FIELDS), "NOT_FLAGS names a field the configs do not have"
    assert [f for f in CONFIG_FLAGS.values() if f.field is None] == [CONFIG_FLAGS["threads"]]


def test_run_help_shows_the_config_defaults(capsys):
    blocks = help_blocks(RUN[:1], capsys)
    for flag in ENGINE_FLAGS + SIM_FLAGS:
        assert flag.option in blocks, flag.option
        if flag.field is None or flag.dest != flag.field or flag.field in COMMAND_DEFAULTS:
            continue            # --threads, --no-chunked-prefill; --clock: run's own default
        default = FIELDS[flag.field].default
        text = blocks[flag.option]
        if flag.switch:
            assert default is False and "(default" not in text, flag.option
        elif flag.field == "cuda_graphs":
            assert "(default: auto)" in text and default is None     # auto: on for a CUDA device
        elif flag.field == "executor":
            assert "(default: model)" in text        # the field is always "sim"; the flag picks it
        elif flag.field == "sim_model":
            assert "(default: --model" in text
        elif flag.field == "sim_cost":
            assert default is None and "(default: 2 ms per step" in text
        elif flag.field in SIM_SIZED:                 # the model executor's; --executor sim: vLLM's
            assert f"(default: {default}; with --executor sim" in text, (flag.option, text)
        else:
            assert f"(default: {default})" in text, (flag.option, default, text)
    assert "(default: wall)" in blocks["--clock"]


def test_demo_and_bench_keep_their_own_defaults(capsys):
    demo = help_blocks(["demo"], capsys)
    assert "(default: 112)" in demo["--num-gpu-blocks"] and "(default: wall)" in demo["--clock"]
    bench = help_blocks(["bench"], capsys)
    assert "(default: 256)" in bench["--max-num-seqs"] and "(default: 8192)" in bench["--max-num-batched-tokens"]


def _non_default(name: str, tmp_path) -> tuple[list[str], object]:
    """Command-line words that set field ``name`` to a value other than its default, and that value."""
    f = FIELDS[name]
    choices = f.metadata.get("choices")
    special = {
        "device": (["--device", "cpu"], "cpu"),
        "enable_chunked_prefill": (["--no-chunked-prefill", "--max-num-batched-tokens", "4096"], False),
        "cuda_graphs": (["--cuda-graphs", "on"], True),
        "num_cpu_blocks": (["--num-cpu-blocks", "3", "--preemption-mode", "swap"], 3),
        "preemption_mode": (["--preemption-mode", "swap", "--num-cpu-blocks", "1"], "swap"),
        "clock": (["--clock", "virtual"], "virtual"),            # run's default is wall
        "executor": (["--executor", "sim"], "sim"),
        "sim_model": (["--sim-model", "llama-3.2-1b"], "llama-3.2-1b"),
        "sim_device": (["--sim-device", "a100"], "a100"),
    }
    if name in special:
        return special[name]
    if name == "sim_cost":
        path = tmp_path / "fit.json"
        CostParams().save(path)
        return ["--sim-cost", str(path)], str(path)
    flag = config_flag(name)
    if flag.switch:
        return [flag.option], True
    if choices:
        value = next(c for c in choices if c != f.default)
    elif isinstance(f.default, int) or f.default is None:
        value = (f.default or 0) + 1
    elif isinstance(f.default, float):
        value = f.default / 2
    else:
        value = f"{f.default}-x"
    return [flag.option, str(value)], value


@pytest.mark.parametrize("name", [n for n in FIELDS if n not in NOT_FLAGS])
def test_a_knob_given_on_the_command_line_reaches_the_config(name, tmp_path):
    words, value = _non_default(name, tmp_path)
    sim = name not in ENGINE_FIELDS and name != "executor"
    config = engine_config(build_parser().parse_args([*RUN, *words, *(["--executor", "sim"] if sim else [])]))
    assert getattr(config, name) == value
    if name == "executor":
        assert isinstance(config, SimConfig)        # the field is always "sim": the flag picks the class
    elif name != "clock":
        assert value != FIELDS[name].default


def test_compare_configs_take_every_flag_of_the_table():
    for flag in CONFIG_FLAGS.values():
        text = "1" if flag.switch else "on" if flag.dest == "cuda_graphs" else None
        if text is None:
            text = next(iter(flag.kwargs.get("choices") or ["7"]))
        configs = parse_configs(f"{flag.dest}={text};policy=fcfs")
        assert flag.dest in configs[0].overrides, flag.dest
    off = parse_configs("enable_chunked_prefill=0;enable-chunked-prefill=1")
    assert off[0].overrides == {"no_chunked_prefill": True}
    assert off[1].overrides == {"no_chunked_prefill": False}
    with pytest.raises(ValueError, match="kv_cache_memory_fraction"):
        parse_configs("kv_cache_memory_fraction=0.5;policy=fcfs")
