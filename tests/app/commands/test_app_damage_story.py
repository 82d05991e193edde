"""One damage story: ``check``, ``recover``, ``summary`` and the window read the same analysis of a
damaged file (``recordings.damage.analysis``), computed once per file and kept beside it."""
from __future__ import annotations

import pytest

import recordings.damage.analysis as analysis
from app.cli import main
from app.commands.recover import open_recording
from recordings.file.open_reader import open_reader
from tests.support.damaged_files import damage_base_run, middle_leaf, overwrite_page, truncated


def counted_scans(monkeypatch) -> list:
    """The files :func:`recordings.damage.analysis.damage_analysis` scans from now on (its memory
    emptied first, as in a new process)."""
    scans = []
    real = analysis.find_damage
    monkeypatch.setattr(analysis, "find_damage", lambda *a, **k: scans.append(a[0]) or real(*a, **k))
    monkeypatch.setattr(analysis, "_MEMORY", {})
    return scans


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return damage_base_run(tmp_path_factory.mktemp("orig") / "run.sqlite")


def test_every_tool_tells_the_same_story_from_one_analysis(original, tmp_path, capsys, monkeypatch):
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, "steps"))
    open_reader(damaged).close()                     # the damage is mid-file: the file opens
    scans = counted_scans(monkeypatch)
    capsys.readouterr()
    assert main(["check", str(damaged)]) == 1
    checked = capsys.readouterr().out
    report = analysis.known_damage(damaged)
    k, n = report.last_good_step, report.last_step + 1
    assert report.is_damaged and 0 <= k < n - 1
    assert f"save steps 0..{report.last_saved_step} into a new valid recording" in checked
    assert main(["summary", str(damaged)]) in (0, 1)
    said = capsys.readouterr()
    assert "WARNING: Damaged recording: page damage in table steps" in said.out
    assert f"Showing steps 0..{k} of {n:,}" in said.out
    out = tmp_path / "saved.sqlite"
    assert main(["recover", str(damaged), str(out)]) == 0
    assert report.lines()[0] in capsys.readouterr().out
    assert len(scans) == 1                          # one scan for the three commands
    assert analysis.cache_path(damaged).exists()
    monkeypatch.setattr(analysis, "_MEMORY", {})    # another process: the copy beside the file
    with open_recording(str(damaged), progress=False) as reader:   # the window's way in
        assert reader.damage == report and reader.latest_step() == k    # banner before any later step
    assert len(scans) == 1


def test_a_truncated_copy_check_summary_recover_and_the_window_name_the_same_steps(original, tmp_path, capsys,
                                                                                    monkeypatch):
    """A copy cut to 90% of its pages (its later keyframes and request rows lost): what ``check``
    says ``recover`` saves is what it keeps, though more than the damaged file replays; the
    window and ``summary`` show what replays and name the same saved steps."""
    cut = truncated(original, tmp_path / "cut.sqlite", 0.9)
    monkeypatch.setattr(analysis, "_MEMORY", {})
    capsys.readouterr()
    assert main(["check", str(cut)]) == 1
    checked = capsys.readouterr().out
    report = analysis.known_damage(cut)
    k, saved = report.last_good_step, report.last_saved_step
    assert 0 <= k < saved                       # rows read one by one past what replays here
    assert f"save steps 0..{saved} into a new valid recording" in checked
    assert f"recover keeps steps 0..{saved} (steps {k + 1}..{saved} do not replay here" in checked
    assert main(["summary", str(cut)]) in (0, 1)
    assert f"Showing steps 0..{k} of {report.last_step + 1:,}" in (said := capsys.readouterr().out)
    assert f"Save steps 0..{saved}: batchscope recover" in said
    out = tmp_path / "saved.sqlite"
    assert main(["recover", str(cut), str(out)]) == 0
    assert f"kept steps 0..{saved} (" in capsys.readouterr().out
    ref = open_reader(original)
    with open_reader(out) as copy:              # every kept step replays whole (ids aside: rebuilt)
        assert copy.latest_step() == saved
        for step in range(k, saved + 1, 5):
            assert (copy.state_at(step).block_owner == ref.state_at(step).block_owner).all()
    with open_recording(str(cut), progress=False) as reader:
        assert reader.damage == report and reader.latest_step() == k


def test_a_changed_file_is_analysed_again(original, tmp_path, monkeypatch):
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, "steps"))
    monkeypatch.setattr(analysis, "_MEMORY", {})
    first = analysis.damage_analysis(damaged)
    damaged.write_bytes(original.read_bytes())      # repaired in place (a new copy)
    again = analysis.damage_analysis(damaged)
    assert first.is_damaged and not again.is_damaged


def test_the_window_knows_the_damage_before_it_shows_a_step(original, tmp_path, monkeypatch):
    """Damage mid-file (the file opens): the window's way in analyses it first, so the last step
    it can show is the last readable one, and the banner has the report."""
    damaged = overwrite_page(original, tmp_path / "bad.sqlite", middle_leaf(original, "steps"))
    monkeypatch.setattr(analysis, "_MEMORY", {})
    assert analysis.known_damage(damaged) is None
    with open_recording(str(damaged), progress=False) as reader:
        assert reader.damage is not None and reader.damage.is_damaged
        assert reader.latest_step() == reader.damage.last_good_step < open_reader(original).latest_step()
    with open_recording(str(original), progress=False) as reader:      # an intact file: nothing
        assert reader.damage is None and not analysis.cache_path(original).exists()


def test_an_intact_file_is_scanned_once_per_version_across_processes(original, tmp_path, monkeypatch):
    """A big intact recording is not scanned at every open: its analysis waits in the cache folder
    (not beside the file), keyed by the file's version."""
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "intact.sqlite"
    copy.write_bytes(original.read_bytes())
    scans = counted_scans(monkeypatch)
    assert not analysis.damage_analysis(copy).is_damaged
    assert not analysis.cache_path(copy).exists() and analysis.clean_cache_path(copy).exists()
    monkeypatch.setattr(analysis, "_MEMORY", {})    # another process
    assert not analysis.damage_analysis(copy).is_damaged and len(scans) == 1
    with copy.open("ab") as f:                      # a new version of the file: scanned again
        f.write(b"\0" * 4096)
    monkeypatch.setattr(analysis, "_MEMORY", {})
    analysis.damage_analysis(copy)
    assert len(scans) == 2
