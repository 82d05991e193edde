"""``batchscope export`` and ``batchscope summary --json`` as a user runs them (in process)."""
from __future__ import annotations

import json

import pytest

from app.cli import main


def test_perfetto_export_reports_events_per_track(recorded, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["export", str(recorded.path), "--format", "perfetto", "-o", str(out)]) == 0
    report = capsys.readouterr().out
    events = json.loads(out.read_text())["traceEvents"]
    slot_slices = sum(e["ph"] == "X" and e["pid"] == 1 for e in events)
    assert f"wrote {out} ({len(events)} events over {len(recorded.records)} steps" in report
    assert "virtual clock: 1 step = 1000 us" in report
    assert f"batch slots  X  {slot_slices:>8}" in report


def test_csv_export_into_a_folder(recorded, tmp_path, capsys):
    assert main(["export", str(recorded.path), "--format", "csv", "-o", f"{tmp_path}/csv/"]) == 0
    assert (tmp_path / "csv" / "requests.csv").is_file() and (tmp_path / "csv" / "steps.csv").is_file()
    assert f"({len(recorded.records)} steps" in capsys.readouterr().out


def test_summary_json_is_the_json_export(recorded, tmp_path, capsys):
    assert main(["export", str(recorded.path), "--format", "json", "-o", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    assert main(["summary", str(recorded.path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "s.json").read_text())
    assert printed["summary"]["num_requests"] == len(recorded.prompts)


@pytest.mark.parametrize("extra, code, message", [
    (("--us-per-step", "0"), 2, "--us-per-step must be > 0, got 0"),
    (("--steps-per-second", "-1"), 2, "--steps-per-second must be > 0, got -1"),
    (("--format", "xml"), 2, "invalid choice: 'xml'"),
])
def test_bad_arguments_are_usage_errors(recorded, tmp_path, capsys, extra, code, message):
    argv = ["export", str(recorded.path), "--format", "json", "-o", str(tmp_path / "s.json"), *extra]
    assert _exit_code(argv) == code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_existing_outputs_need_force_and_the_recording_is_never_the_output(recorded, tmp_path, capsys):
    out = tmp_path / "s.json"
    out.write_text("keep")
    argv = ["export", str(recorded.path), "--format", "json", "-o", str(out)]
    assert main(argv) == 2 and f"{out} exists (--force overwrites)" in capsys.readouterr().err
    assert out.read_text() == "keep"
    assert main([*argv, "--force"]) == 0 and json.loads(out.read_text())["complete"] is True
    assert main(["export", str(recorded.path), "--format", "json", "-o", str(recorded.path)]) == 2
    assert "is the recording itself" in capsys.readouterr().err


def test_runtime_failures_exit_1(recorded, tmp_path, capsys):
    assert main(["export", str(tmp_path / "none.sqlite"), "--format", "json", "-o",
                 str(tmp_path / "s.json")]) == 1
    assert "none.sqlite" in capsys.readouterr().err
    out = tmp_path / "no" / "t.json"          # checked before reading: a usage error (app.usage)
    assert main(["export", str(recorded.path), "--format", "perfetto", "-o", str(out)]) == 2
    assert f"cannot write {out}: folder {out.parent} does not exist" in capsys.readouterr().err


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:          # argparse's own usage errors
        return e.code
