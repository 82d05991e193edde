"""Scheduling knobs of ``batchscope run`` / ``demo`` / ``replay``: ``--policy``,
``--check-invariants``, ``--enable-prefix-caching`` (simulated executor: no model, fast)."""
from __future__ import annotations

import pytest

from app.cli import build_parser, engine_config, main
from engine.vocab import BlockEventKind
from engine.config import POLICIES
from engine.sched.scheduler import Scheduler
from recordings.file.open_reader import open_reader
from recordings.metrics.run_metrics import summarize_batching
from recordings.workloads.workload import DEMO_TRACE
from engine.vocab import NotAdmittedReason

SIM_RUN = ("run", "--trace", str(DEMO_TRACE), "--limit", "30", "--time-scale", "0.02", "--max-num-seqs", "8",
           "--num-gpu-blocks", "400", "--executor", "sim", "--sim-model", "llama-3.2-1b", "--sim-device", "a100")


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", [("run", "--trace", "t.csv", "--record", "r.sqlite"), ("demo",)])
def test_policy_and_check_invariants_reach_the_engine_config(command):
    default = engine_config(parse(*command))
    assert (default.policy, default.check_invariants, default.enable_prefix_caching) == ("fcfs", False, False)
    for policy in POLICIES:
        for extra in ((), ("--executor", "sim")):
            if command == ("demo",) and extra:
                continue
            c = engine_config(parse(*command, "--policy", policy, "--check-invariants",
                                    "--enable-prefix-caching", *extra))
            assert (c.policy, c.check_invariants, c.enable_prefix_caching) == (policy, True, True)


def test_help_explains_each_knob(capsys):
    for command in ("run", "demo"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        for text in ("--policy {fcfs,priority,static}", "fcfs = by arrival", "priority = by the request's priority",
                     "static = the baseline without continuous batching", "--check-invariants",
                     "stops the run with its step and invariant", "--enable-prefix-caching"):
            assert text in out, (command, text)
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "--check-invariants" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert "exit 0 when clean" in " ".join(capsys.readouterr().out.split())


def test_an_unknown_policy_names_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--trace", str(DEMO_TRACE), "--record", str(tmp_path / "x.sqlite"), "--policy", "lifo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--policy" in err and "'lifo'" in err and all(f"'{p}'" in err for p in POLICIES)
    assert not (tmp_path / "x.sqlite").exists()


def test_static_policy_runs_the_baseline_with_idle_slots(tmp_path, capsys):
    """Same trace, both policies: static records requests waiting for its batch to finish and
    holds fewer slots on average than fcfs; both pass the invariants checked every step."""
    occupancy = {}
    for policy in ("fcfs", "static"):
        path = tmp_path / f"{policy}.sqlite"
        assert main([*SIM_RUN, "--policy", policy, "--check-invariants", "--record", str(path)]) == 0
        with open_reader(path) as reader:
            assert reader.run_info().config["policy"] == policy
            waits = reader.execute("SELECT count(*) FROM steps WHERE waiting_reason = ?",
                                   (NotAdmittedReason.STATIC_BATCH,))[0][0]
            assert (waits > 0) == (policy == "static"), (policy, waits)
            occupancy[policy] = summarize_batching(reader).slot_occupancy
    assert occupancy["static"] < occupancy["fcfs"], occupancy
    assert "slot occupancy" in capsys.readouterr().out


def test_check_invariants_stops_the_run_at_the_violating_step(tmp_path, capsys, monkeypatch):
    """A scheduler that puts a running request in the paused list too after its 4th update: the
    run stops at that step naming G3, exits 1, and the recording keeps the steps up to it."""
    original = Scheduler.update_from_output
    calls = []

    def corrupting(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 4 and self.running:
            self.paused.append(self.running[0])
        return out

    monkeypatch.setattr(Scheduler, "update_from_output", corrupting)
    path = tmp_path / "bad.sqlite"
    assert main([*SIM_RUN, "--check-invariants", "--record", str(path)]) == 1
    err = capsys.readouterr().err
    assert "invariant violated at step 3: G3:" in err, err
    with open_reader(path) as reader:
        assert reader.latest_step() == 3 and reader.is_complete()


def test_without_check_invariants_the_same_corruption_is_not_looked_for(tmp_path, capsys, monkeypatch):
    original = Scheduler.check_invariants
    checked = []
    monkeypatch.setattr(Scheduler, "check_invariants", lambda self: checked.append(1) or original(self))
    assert main([*SIM_RUN, "--record", str(tmp_path / "plain.sqlite")]) == 0
    assert not checked
    assert main([*SIM_RUN, "--check-invariants", "--record", str(tmp_path / "checked.sqlite")]) == 0
    with open_reader(tmp_path / "checked.sqlite") as reader:
        assert len(checked) == reader.latest_step() + 1


def test_replay_check_invariants_reports_before_the_window_opens(tmp_path, capsys, monkeypatch):
    path = tmp_path / "run.sqlite"
    assert main([*SIM_RUN, "--record", str(path)]) == 0
    capsys.readouterr()
    opened = []
    monkeypatch.setattr("app.commands.window.launch", lambda args, command: opened.append((args.recording, command)) or 0)
    assert main(["replay", "--check-invariants", str(path)]) == 0
    assert opened == [(str(path), "replay")]
    assert "no invariant violated" in capsys.readouterr().err
    assert main(["replay", str(path)]) == 0
    assert capsys.readouterr().err == ""


def test_swap_flags_reach_the_config_and_a_sim_run_swaps(tmp_path, capsys):
    c = engine_config(parse("demo", "--preemption-mode", "swap", "--num-cpu-blocks", "64"))
    assert (c.preemption_mode, c.num_cpu_blocks) == ("swap", 64)
    rec = tmp_path / "swap.sqlite"
    # 40 GPU blocks for up to 8 running requests of the demo trace: the cache runs out
    argv = [*SIM_RUN, "--record", str(rec), "--preemption-mode", "swap", "--num-cpu-blocks", "200"]
    argv[argv.index("--num-gpu-blocks") + 1] = "40"
    assert main(argv) == 0
    with open_reader(rec) as reader:
        (swaps,), = reader.execute("SELECT count(*) FROM events WHERE kind = 'preempted' "
                                   "AND json_extract(detail, '$.mode') = 'swap'")
        outs = sum(1 for rec in reader.records(0, reader.latest_step() + 1) for ev in rec.block_events
                   if ev.kind == BlockEventKind.SWAPPED_OUT)
    assert swaps == outs > 0


def test_num_cpu_blocks_without_swap_names_the_knob(tmp_path, capsys):
    code = main([*SIM_RUN, "--record", str(tmp_path / "x.sqlite"), "--num-cpu-blocks", "8"])
    assert code != 0
    assert "num_cpu_blocks=8 is only used with preemption_mode='swap'" in capsys.readouterr().err
