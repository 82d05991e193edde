"""``--cuda-graphs auto|on|off``: auto by default (on for a CUDA device, as --help says), reaches the
engine config of run and bench, and ``bench --cuda-graphs on`` on a CPU runs its decode steps on the
padded static path (no graphs off CUDA) with the same schedule as without."""
from __future__ import annotations

import json

import pytest

from app.cli import build_parser, engine_config, main

TINY_RUN = ["bench", "--small", "--device", "cpu", "--limit", "3", "--no-record"]


@pytest.mark.parametrize("command", [("run", "--trace", "t.csv", "--record", "r.sqlite"), ("bench",)])
def test_the_flag_reaches_the_engine_config_and_is_auto_by_default(command):
    parse = build_parser().parse_args
    assert engine_config(parse([*command])).cuda_graphs is None         # decided by the device
    assert engine_config(parse([*command, "--cuda-graphs", "on"])).cuda_graphs is True
    assert engine_config(parse([*command, "--cuda-graphs", "off"])).cuda_graphs is False


def test_the_simulated_executor_refuses_it():
    from engine.config import ConfigError

    sim_run = ["run", "--record", "r.sqlite", "--executor", "sim", "--cuda-graphs"]
    with pytest.raises(ConfigError, match="--cuda-graphs on needs --executor model"):
        engine_config(build_parser().parse_args([*sim_run, "on"]))
    assert engine_config(build_parser().parse_args([*sim_run, "off"])).executor == "sim"


def test_a_bad_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--cuda-graphs", "yes"])
    assert e.value.code == 2
    assert "--cuda-graphs: invalid choice: 'yes'" in capsys.readouterr().err


def test_help_says_what_it_does_and_that_auto_means_on_for_cuda(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--cuda-graphs {auto,on,off}" in out
    assert "replay CUDA graphs captured at start-up" in out and "auto: on for a CUDA device, off elsewhere" in out


def test_auto_gives_graphs_to_a_cuda_runner_only():
    from types import SimpleNamespace

    import torch

    from engine.config import EngineConfig
    from engine.runner.cuda_graphs import enable_cuda_graphs

    runner = SimpleNamespace(device=torch.device("cpu"), graphs=None)
    enable_cuda_graphs(runner, EngineConfig(cuda_graphs=None))
    assert runner.graphs is None                                         # auto on a CPU: off


def test_bench_with_cuda_graphs_on_a_cpu_schedules_the_same_steps(tmp_path, monkeypatch):
    from engine.runner.cuda_graphs import DecodeGraphs

    batches = []
    run = DecodeGraphs.run
    monkeypatch.setattr(DecodeGraphs, "run", lambda self, ids, *a: (batches.append(len(ids)), run(self, ids, *a))[1])
    outs = {}
    for flag in ("off", "on"):
        out = tmp_path / f"{flag}.json"
        assert main([*TINY_RUN, "--cuda-graphs", flag, "--json", str(out)]) == 0
        outs[flag] = json.loads(out.read_text())
        if flag == "off":
            assert batches == []
    on, off = outs["on"], outs["off"]
    assert on["config"]["cuda_graphs"] is True and off["config"]["cuda_graphs"] is False
    for key in ("num_steps", "num_output_tokens", "num_finished"):
        assert on["figures"][key] == off["figures"][key], key
    assert len(batches) > 100 and set(batches) <= {1, 2, 3}   # the decode steps of 3 requests
