"""The command line before any work: presets, usage errors (exit 2) found without importing torch,
transformers or Qt, ``batchscope [demo flags]``, and where live recordings go."""
from __future__ import annotations
from tests.support.paths import REPO

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser, parse_args
from app.presets import PRESETS

ROOT = REPO
DEMO_TRACE = ROOT / "recordings" / "workloads" / "data" / "azure_conv_demo.csv"
HEAVY = ("torch", "transformers", "PySide6", "pyqtgraph", "tqdm")


@pytest.mark.parametrize("command", ["run", "demo", "compare"])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_sets_its_values_and_a_given_flag_wins(command, name):
    base = [command, "--trace", "t.csv", *(("--record", "r.sqlite") if command != "compare" else ())]
    plain = vars(parse_args(base))
    args = vars(parse_args([*base, "--preset", name]))
    values = PRESETS[name].values
    assert set(values) <= set(plain), f"preset {name} names unknown flags: {set(values) - set(plain)}"
    assert {k: args[k] for k in values} == values
    given = parse_args([*base, "--preset", name, "--max-num-seqs", "3", "--time-scale", "0.5"])
    assert given.max_num_seqs == 3 and given.time_scale == 0.5
    assert given.prompt_scale == values["prompt_scale"]


def test_the_cpu_preset_fits_every_request_of_the_code_trace():
    """What `--preset cpu` promises in --help: prompts and outputs clipped under max_model_len."""
    v = PRESETS["cpu"].values
    assert v["max_prompt_tokens"] + v["max_output_tokens"] <= v["max_model_len"]
    assert v["time_scale"] < 1 and v["limit"] is not None


def test_help_says_what_suits_the_cpu(capsys):
    with pytest.raises(SystemExit):
        parse_args(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--preset cpu" in out and "--preset sim" in out
    for name in PRESETS:
        assert f"{name}: " in out
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    top = capsys.readouterr().out
    assert "demo --time-scale 0.1 " not in top         # the demo's default: an example that changes nothing
    assert "--preset cpu" in top


def test_no_command_means_demo_with_its_flags():
    args = parse_args(["--paused", "--max-num-seqs", "4"])
    assert args.command == "demo" and args.paused and args.max_num_seqs == 4
    assert parse_args(["-v"]).command == "demo"
    assert parse_args([]).command == "demo"
    assert build_parser().parse_args(["demo"]).num_gpu_blocks == PRESETS["demo"].values["num_gpu_blocks"]


USAGE_ERRORS = {
    "missing trace": ["run", "--trace", "missing.csv", "--record", "{tmp}/x.sqlite"],
    "bad knob": ["run", "--trace", str(DEMO_TRACE), "--record", "{tmp}/x.sqlite", "--max-num-seqs", "0"],
    "bad workload flag": ["run", "--trace", str(DEMO_TRACE), "--record", "{tmp}/x.sqlite", "--time-scale", "-1"],
    "record folder": ["run", "--trace", str(DEMO_TRACE), "--record", "{tmp}/no/x.sqlite"],
    "sim model": ["run", "--trace", str(DEMO_TRACE), "--record", "{tmp}/x.sqlite", "--executor", "sim",
                  "--sim-model", "gpt-9"],
    "demo knob": ["--max-num-batched-tokens", "0"],
    "demo trace": ["demo", "--trace", "missing.csv"],
    "summary file": ["summary", "{tmp}/none.sqlite"],
    "replay file": ["replay", "{tmp}/none.sqlite"],
    "check file": ["check", "{tmp}/none.sqlite"],
    "fit file": ["fit", "{tmp}/none.sqlite", "-o", "{tmp}/fit.json"],
}


def test_usage_errors_exit_2_before_torch_or_qt_is_imported(tmp_path):
    """Each bad command line, in a fresh interpreter: exit status 2, a one-line message, and none
    of the heavy modules imported (what makes an error take seconds)."""
    cases = {k: [a.replace("{tmp}", str(tmp_path)) for a in v] for k, v in USAGE_ERRORS.items()}
    code = f"""
import contextlib, io, json, sys
from app.cli import main
out = {{}}
for name, argv in {json.dumps(cases)}.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    out[name] = [rc, err.getvalue()]
out["heavy"] = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out.pop("heavy") == []
    for name, (rc, err) in out.items():
        assert rc == 2, (name, err)
        assert err.startswith("batchscope: ") and err.count("\n") == 1 and "Traceback" not in err, (name, err)


def test_an_argparse_error_exits_2_before_heavy_imports(tmp_path):
    code = ("import sys\nfrom app.cli import main\ntry:\n    main(['run', '--bogus'])\nexcept SystemExit as e:\n"
            f"    print(e.code, sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "2 []", done.stderr[-2000:]


@pytest.mark.parametrize("env, expected", [
    ({"BATCHSCOPE_CACHE": "{tmp}/bs", "XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/bs/runs"),
    ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/batchscope/runs"),
    ({}, "{home}/.cache/batchscope/runs"),
])
def test_live_recordings_and_models_share_one_cache_root(env, expected, tmp_path, monkeypatch):
    from app.commands.window import default_recording_path
    from engine.model.gguf_convert import default_cache_folder

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for key in ("BATCHSCOPE_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(tmp=tmp_path))
    runs = Path(expected.format(tmp=tmp_path, home=home))
    assert default_recording_path().parent == runs
    assert default_cache_folder("ab" * 32).parent == runs.parent / "models"


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    """`batchscope summary run.sqlite | head -1`: no BrokenPipeError traceback."""
    import os

    rec = tmp_path / "r.sqlite"
    from tests.support.engine_driver import run_engine

    run_engine(rec, seed=2, num_requests=6, fail_steps=())
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "summary", str(rec)], cwd=ROOT, stdout=write,
                            stderr=subprocess.PIPE, text=True)
    os.close(write)
    os.close(read)                            # the reader is gone before anything is written
    err = proc.communicate(timeout=120)[1]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == 1


@pytest.mark.parametrize("device", ["mps", "xpu", "cuda0", "gpu"])
def test_a_device_the_engine_cannot_run_on_is_refused_before_loading(device, tmp_path, capsys):
    from app.cli import main

    assert main(["run", "--preset", "cpu", "--device", device, "--record", str(tmp_path / "r.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "device must be auto, cpu, cuda or cuda:N" in err and repr(device) in err
    assert not (tmp_path / "r.sqlite").exists()


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1"])
def test_the_devices_the_engine_runs_on_are_accepted(device):
    from engine.config import EngineConfig

    assert EngineConfig(device=device).device == device


def test_threads_must_be_positive(tmp_path, capsys):
    from app.cli import main

    assert main(["run", "--preset", "cpu", "--threads", "0", "--record", str(tmp_path / "r.sqlite")]) == 2
    assert "--threads must be >= 1, got 0" in capsys.readouterr().err


def test_a_simulated_run_refuses_a_model_device(tmp_path, capsys):
    from app.cli import main

    assert main(["run", "--preset", "sim", "--device", "cpu", "--record", str(tmp_path / "r.sqlite")]) == 2
    assert "--device cpu is for --executor model; a simulated run's device is --sim-device" in capsys.readouterr().err


def test_cuda_without_a_gpu_is_refused_before_the_window_opens(capsys, monkeypatch):
    import torch

    from app.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["demo", "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize("clock", [None, "wall", "sim"])
def test_steps_per_second_off_the_virtual_clock_is_refused(tmp_path, capsys, clock):
    """The flag maps trace seconds to steps on the virtual clock; elsewhere it would be ignored."""
    from app.cli import main

    argv = ["run", "--preset", "sim", "--steps-per-second", "50", "--record", str(tmp_path / "r.sqlite")]
    assert main(argv + (["--clock", clock] if clock else [])) == 2
    err = capsys.readouterr().err
    assert "--steps-per-second maps trace seconds to steps on the virtual clock only" in err
    assert f"this run's clock is '{'sim' if clock in (None, 'wall') else clock}'" in err
    assert not (tmp_path / "r.sqlite").exists()


def test_steps_per_second_spaces_virtual_clock_arrivals(tmp_path):
    """Arrival steps are the trace's seconds times --steps-per-second (default 10), rounded up."""
    import sqlite3

    from app.cli import main

    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,20,3\n2023-11-16 18:15:47.6805900,20,3\n"
                     "2023-11-16 18:15:49.1805900,20,3\n")
    steps = {}
    for sps in (None, 3):
        rec = tmp_path / f"r{sps}.sqlite"
        argv = ["run", "--trace", str(trace), "--executor", "sim", "--sim-model", "llama-3.2-1b",
                "--sim-device", "h200", "--clock", "virtual", "--record", str(rec)]
        assert main(argv + (["--steps-per-second", str(sps)] if sps else [])) == 0
        with sqlite3.connect(rec) as db:
            steps[sps] = [r[0] for r in db.execute("SELECT arrival_step FROM requests ORDER BY arrival_step")]
    assert steps == {None: [0, 10, 25], 3: [0, 3, 8]}


@pytest.mark.parametrize("flag,value,message", [
    ("--steps-per-second", "inf", "--steps-per-second must be a finite number > 0, got inf"),
    ("--steps-per-second", "nan", "--steps-per-second must be a finite number > 0, got nan"),
    ("--time-scale", "nan", "time_scale must be a finite number, got nan"),
    ("--time-scale", "inf", "time_scale must be a finite number, got inf"),
    ("--prompt-scale", "nan", "prompt_scale must be a finite number, got nan"),
    ("--output-scale", "inf", "output_scale must be a finite number, got inf"),
])
def test_non_finite_numbers_are_refused_before_anything_runs(tmp_path, capsys, flag, value, message):
    """inf / nan scales made arrivals or lengths infinite: a traceback, or a run that never ended."""
    from app.cli import main

    rec, trace = tmp_path / "r.sqlite", tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,20,3\n")
    assert main(["run", "--preset", "sim", "--clock", "virtual", "--trace", str(trace), flag, value,
                 "--record", str(rec)]) == 2
    assert message in capsys.readouterr().err
    assert not rec.exists()
