"""``batchscope check`` on a damaged recording says what still reads and how to save it;
``batchscope recover`` saves it; files that are no recording at all get a clear error."""
from __future__ import annotations
from tests.support.paths import REPO

from pathlib import Path

import pytest

ROOT = REPO

from tests.support.damaged_files import middle_leaf, overwrite_page  # noqa: E402
from tests.support.engine_driver import run_engine  # noqa: E402

from app.cli import main  # noqa: E402
from recordings.file.open_reader import open_reader


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> tuple[Path, Path]:
    """(intact recording, a copy with a steps page in the middle overwritten)."""
    folder = tmp_path_factory.mktemp("rec")
    path = folder / "run.sqlite"
    run_engine(path, seed=3, num_requests=120, fail_steps=(), max_prompt=64, max_output=48,
               arrivals_per_step=1.0, writer_kwargs={"keyframe_interval": 16})
    return path, overwrite_page(path, folder / "bad.sqlite", middle_leaf(path, "steps"))


def test_check_names_the_damage_the_readable_steps_and_the_command(damaged, capsys):
    original, bad = damaged
    assert main(["check", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert "malformed" in err                      # SQLite's own word is still there...
    assert f"{bad}: the file is damaged; what still reads:" in out        # ...but no longer alone
    assert "page damage in table steps" in out
    last = open_reader(original).latest_step()
    assert "lost or unreadable" in out and f"of {last + 1:,})" in out
    n = len(open_reader(original).request_ids())
    assert f"requests: {n:,} of {n:,} readable" in out
    assert f"batchscope recover {bad} {bad.with_name('bad.salvaged.sqlite')}" in out


def test_recover_writes_a_valid_recording_and_says_what_it_dropped(damaged, tmp_path, capsys):
    original, bad = damaged
    out_path = tmp_path / "saved.sqlite"
    assert main(["recover", str(bad), str(out_path)]) == 0
    out = capsys.readouterr().out
    saved = open_reader(out_path)
    k = saved.latest_step()
    assert f"kept steps 0..{k} " in out and f"dropped steps {k + 1}.." in out
    assert f"batchscope replay {out_path}" in out
    assert saved.state_at(k) == open_reader(original).state_at(k)
    assert main(["check", str(out_path)]) == 1      # complete but for the lost steps: said so
    assert "salvaged from a damaged recording" in capsys.readouterr().out
    assert main(["recover", str(bad), str(out_path)]) == 2          # never overwritten
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [(b"", "the file is empty"),
                                              (b"just some text\n" * 300, "not an SQLite database")])
def test_files_that_are_no_recording_get_a_clear_error(tmp_path, capsys, content, message):
    path = tmp_path / "x.sqlite"
    path.write_bytes(content)
    assert main(["check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and "damaged" not in out
    assert main(["recover", str(path), str(tmp_path / "y.sqlite")]) == 1
    assert message in capsys.readouterr().err and not (tmp_path / "y.sqlite").exists()
