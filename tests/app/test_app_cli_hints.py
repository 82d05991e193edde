"""The command line's hints for a first hour: a mistyped command names the right one, a recording
in the command's place opens it, suggested command lines are shell-quoted, counts read "1 block"."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from app.cli import main, parse_args
from app.commands.suggest import replay_command
from engine.plural import plural
from recordings.damage.report import DamageReport


def test_a_mistyped_command_names_the_closest(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["summarize", "x.sqlite"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'summarize' (did you mean 'summary'?)" in err
    assert "unrecognized arguments" not in err
    with pytest.raises(SystemExit):
        parse_args(["-v", "frobnicate"])
    assert "unknown command 'frobnicate'; commands: demo, run, replay" in capsys.readouterr().err


def test_a_recording_in_the_commands_place_opens_the_replay():
    args = parse_args(["run.sqlite", "--at", "t=3"])
    assert (args.command, args.recording, args.at) == ("replay", "run.sqlite", "t=3")
    assert parse_args(["--paused"]).command == "demo"          # flags alone still mean demo


@pytest.mark.parametrize("name", ["my run.sqlite", "it's.sqlite", "$HOME.sqlite"])
def test_suggested_command_lines_are_shell_quoted(tmp_path, name):
    path = tmp_path / name
    assert shlex.split(replay_command(path)) == ["batchscope", "replay", str(path)]
    report = DamageReport(path=Path(path), version=3, last_saved_step=5)
    words = shlex.split(report.recover_command())
    assert words[:3] == ["batchscope", "recover", str(path)] and len(words) == 4
    assert report.recover_command() in report.suggestion()


def test_recover_prints_a_quoted_replay_command(tmp_path, capsys):
    from tests.support.engine_driver import Arrival, run_workload
    from engine.config import EngineConfig
    from engine.request import SamplingParams

    src = tmp_path / "a run.sqlite"
    cfg = EngineConfig(block_size=4, num_gpu_blocks=8, max_model_len=32, max_num_seqs=2, max_num_batched_tokens=16)
    run_workload(cfg, [Arrival("r", 0, (1, 2, 3), SamplingParams(max_tokens=2))], record_to=src)
    out = tmp_path / "saved copy.sqlite"
    main(["recover", str(src), str(out)])
    printed = capsys.readouterr()
    assert replay_command(out) in printed.out + printed.err


def test_counts_are_pluralised():
    assert [plural(n, "block") for n in (0, 1, 2, 1024)] == ["0 blocks", "1 block", "2 blocks", "1,024 blocks"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(2, "entry", "entries") == "2 entries"


def test_no_message_says_1_blocks():
    """The limits' messages with a 1-block cache (the scheduler's admission error, the knob's range)."""
    from engine.config import EngineConfig
    from engine.kv.prefix_explain import STOP_ALL, PrefixMatch
    from engine.request import Request, SamplingParams
    from engine.sched.scheduler import Scheduler

    s = Scheduler(EngineConfig(block_size=4, num_gpu_blocks=1, max_model_len=32, max_num_seqs=1,
                               max_num_batched_tokens=16), 1)
    err = s.admission_error(Request("r", [1] * 8, SamplingParams(max_tokens=2)))
    assert "the whole cache has 1 block (4 tokens)" in err
    with pytest.raises(ValueError) as e:
        s.set_limits(num_usable_blocks=5)
    assert "has 1 block)" in str(e.value)
    assert "1 of 1 block hit (4 tokens)" in PrefixMatch(1, 1, 4, STOP_ALL).describe()


def test_progress_bars_leave_no_escape_codes_in_a_log(tmp_path, capfd):
    """stderr is a file here, as in a CI log: no carriage returns or ANSI escapes from tqdm."""
    trace = tmp_path / "w.jsonl"
    trace.write_text("".join(f'{{"arrival": {i * 0.1}, "prompt_tokens": 20, "output_tokens": 3}}\n'
                             for i in range(30)))
    out = tmp_path / "r.sqlite"
    assert main(["run", "--trace", str(trace), "--record", str(out), "--executor", "sim",
                 "--sim-device", "h100", "--num-gpu-blocks", "64"]) == 0
    assert main(["check", str(out)]) == 0
    captured = capfd.readouterr()
    log = captured.err + captured.out
    assert "\r" not in log and "\x1b[" not in log, log[-500:]
