"""The window on a damaged recording replays what still reads, up to the last readable step, and
says in its banner and on the check button what is damaged and which command saves the rest
(not just "check failed")."""
from __future__ import annotations

from pathlib import Path

import pytest


from tests.support.damaged_files import middle_leaf, overwrite_page, truncated  # noqa: E402
from tests.support.engine_driver import run_engine  # noqa: E402
from tests.support.fakes import shown_window  # noqa: E402

from app.commands.recover import open_recording  # noqa: E402
from recordings.file.open_reader import open_reader
from recordings.damage.report import find_damage  # noqa: E402


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "run.sqlite"
    run_engine(path, seed=3, num_requests=120, fail_steps=(), max_prompt=64, max_output=48,
               arrivals_per_step=1.0, writer_kwargs={"keyframe_interval": 16})
    return path


def not_blank(widget) -> bool:
    image = widget.grab().toImage()
    colours = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 37)}
    return len(colours) > 10


def test_a_damage_found_by_the_check_limits_the_replay_and_names_the_fix(qtbot, original, tmp_path):
    bad = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, "steps"))
    reader = open_reader(bad)                       # the damage is past what opening touches
    last = reader.latest_step()
    w = shown_window(qtbot, reader)
    qtbot.waitUntil(lambda: w.damage_text is not None, timeout=60_000)
    k = find_damage(bad).last_good_step
    assert 0 <= k < last
    assert w.check_btn.text() == f"damaged: steps 0..{k} of {last + 1:,} readable"
    assert "check failed" not in w.check_btn.text()
    w.refresh(force=True)
    assert w.banner.isVisible() and w.banner.text.startswith("Damaged recording: page damage in table steps")
    assert f"batchscope recover {bad} " in w.banner.text
    assert reader.latest_step() == k
    w.show_step(last)                          # scrubbing past the damage stops at the last readable step
    assert w.state.step == k and w.state == open_reader(original).state_at(k)
    assert w._source_error is None
    dialog = w.show_problems()
    qtbot.addWidget(dialog)
    assert any("batchscope recover" in f.message for f in dialog.findings)
    w.grab().save(str(tmp_path / "damaged-window.png"))
    assert not_blank(w)


def test_a_file_the_reader_refuses_opens_as_damaged(qtbot, original, tmp_path):
    cut = truncated(original, tmp_path / "cut.sqlite", 0.97)
    report = find_damage(cut)
    source = open_recording(str(cut), progress=False)
    assert source.damage == report and source.latest_step() == report.last_good_step
    w = shown_window(qtbot, source)
    assert w.check is None                     # already known: no check to run
    w.refresh(force=True)
    assert w.banner.isVisible() and "truncated file" in w.banner.text
    assert w.check_btn.text().startswith("damaged: steps 0..")
    assert w.state.step == report.last_good_step
    assert not_blank(w)


def test_files_that_are_no_recording_are_refused_with_the_reason(tmp_path):
    from recordings.errors import RecordingError

    (tmp_path / "empty.sqlite").write_bytes(b"")
    (tmp_path / "text.sqlite").write_text("not a database\n" * 100)
    with pytest.raises(RecordingError, match="empty"):
        open_recording(str(tmp_path / "empty.sqlite"), progress=False)
    with pytest.raises(RecordingError, match="not an SQLite database"):
        open_recording(str(tmp_path / "text.sqlite"), progress=False)
