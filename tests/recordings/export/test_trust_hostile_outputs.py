"""Hostile text stays data in what BatchScope writes from a recording: every ``export`` format
and the ``compare`` HTML report, from a recording whose ids, prompts, outputs, names and errors
are HTML, terminal escapes, RTL overrides, NUL bytes and invalid UTF-8 (``hostile_files``)."""
from __future__ import annotations

import csv
import json
import shutil

import pytest

from app.cli import main
from tests.support.hostile_files import make_hostile_recording, request_ids

RAW_MARKUP = ("<b>bold", "<img src=x", "<a href='file:")    # the recording's markup, unescaped


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return make_hostile_recording(tmp_path_factory.mktemp("hostile_out") / "hostile.sqlite")


def test_csv_export_keeps_every_id_as_data(hostile, tmp_path, capsys):
    out = tmp_path / "csv"
    out.mkdir()                                              # a folder: OUT/requests.csv, OUT/steps.csv
    assert main(["export", str(hostile), "--format", "csv", "-o", str(out)]) == 0
    with open(out / "requests.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    ids = [r["request_id"] for r in rows]
    assert sorted(ids) == sorted(request_ids())              # commas, quotes, CR/LF, NUL round-trip
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err and "\u202e" not in captured.out + captured.err


@pytest.mark.parametrize("fmt", ["json", "perfetto", "mooncake"])
def test_json_exports_parse_and_hold_the_text_as_strings(hostile, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    assert main(["export", str(hostile), "--format", fmt, "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    for line in (text.splitlines() if fmt == "mooncake" else [text]):
        json.loads(line)                                     # valid JSON: the text is escaped in it
    assert "\x1b" not in text and "\x00" not in text          # JSON escapes control characters
    if fmt == "perfetto":
        names = json.dumps(json.loads(text))
        assert any(json.dumps(rid)[1:-1] in names for rid in request_ids())


def test_the_compare_report_escapes_recorded_text(hostile, tmp_path, capsys):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(hostile, a)
    shutil.copy(hostile, b)
    report = tmp_path / "report.html"
    assert main(["compare", str(a), str(b), "--no-window", "--report", str(report)]) == 0
    page = report.read_text(encoding="utf-8")
    raw = [m for m in RAW_MARKUP if m in page]                # (the page's own plots are <img src="data:)
    assert not raw, raw
    assert "&lt;b&gt;bold&lt;/b&gt;" in page                  # the model name, shown escaped
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out and "\u202e" not in captured.out


@pytest.mark.parametrize("recording_mode", [0o600, 0o640])
def test_exports_are_no_more_readable_than_the_recording(hostile, tmp_path, recording_mode):
    import os
    import stat
    rec = tmp_path / "rec.sqlite"
    shutil.copy(hostile, rec)
    os.chmod(rec, recording_mode)
    old = os.umask(0o022)
    try:
        for fmt in ("csv", "json", "perfetto", "mooncake"):
            assert main(["export", str(rec), "--format", fmt, "-o", str(tmp_path / f"x-{fmt}")]) == 0
        assert os.umask(0o022) == 0o022                       # the export put the umask back
    finally:
        os.umask(old)
    made = [p for p in tmp_path.iterdir() if p.name.startswith("x-")]
    assert len(made) == 5                                     # csv writes two files
    assert {stat.S_IMODE(p.stat().st_mode) for p in made} == {recording_mode}
