"""Recordings are readable by their owner only unless asked (the -wal and -shm files too), and
``--no-text`` stores token ids and lengths but no text."""
from __future__ import annotations

import os
import stat

import pytest

from engine.request import SamplingParams
from tests.support.engine_driver import SMALL_SEED, run_engine
from recordings.file.reader import Reader
from recordings.file.open_reader import open_reader

SECRET = "my password is hunter2"


def modes(path):
    return {p.name.removeprefix(path.name) or "main": stat.S_IMODE(p.stat().st_mode)
            for p in path.parent.iterdir() if p.name.startswith(path.name)}


@pytest.mark.parametrize("file_mode", [None, 0o640])
def test_the_file_and_its_wal_and_shm_get_the_mode(tmp_path, file_mode):
    path = tmp_path / "run.sqlite"
    seen = []

    def look(run):
        if len(run.records) == 10:
            run.writer.flush()
            seen.append(modes(path))

    old = os.umask(0o022)
    try:
        run_engine(path, SMALL_SEED, between_steps=look,
                   writer_kwargs={} if file_mode is None else {"file_mode": file_mode})
    finally:
        os.umask(old)
    want = 0o600 if file_mode is None else file_mode
    assert seen == [{"main": want, "-wal": want, "-shm": want}]
    assert modes(path) == {"main": want}


def secret_run(path, **writer_kwargs):
    """A small run with one request whose prompt text and stop string are SECRET."""
    def inject(run):
        if len(run.records) == 2:
            run.engine.add_request([5, 6, 7, 8], SamplingParams(max_tokens=4, stop=[SECRET]),
                                   request_id="secret", prompt_text=SECRET)
    return run_engine(path, SMALL_SEED, between_steps=inject, writer_kwargs=writer_kwargs)


def test_no_text_stores_ids_and_lengths_but_no_text(tmp_path):
    with_text, without = tmp_path / "text.sqlite", tmp_path / "no_text.sqlite"
    secret_run(with_text)
    secret_run(without, store_text=False)
    assert SECRET.encode() in with_text.read_bytes()          # the control: text is stored by default
    assert SECRET.encode() not in without.read_bytes()
    with open_reader(with_text) as a, open_reader(without) as b:
        assert b.run_info().text_stored is False and "text_stored" not in a.run_info().to_json()
        assert b.execute("SELECT count(*) FROM requests WHERE prompt_text IS NOT NULL") == [(0,)]
        assert b.execute("SELECT count(*) FROM steps WHERE token_text_json IS NOT NULL") == [(0,)]
        assert a.execute("SELECT count(*) FROM steps WHERE token_text_json IS NOT NULL")[0][0] > 0
        # token ids, lengths and the whole replay are the same
        last = a.latest_step()
        assert b.latest_step() == last and b.state_at(last) == a.state_at(last)
        assert ([(r.step, [(t.request_id, t.token_id) for t in r.new_tokens]) for r in b.records(0, last + 1)]
                == [(r.step, [(t.request_id, t.token_id) for t in r.new_tokens]) for r in a.records(0, last + 1)])
        info = b.request_info("secret")
        assert info.prompt_text is None and info.prompt_token_ids == (5, 6, 7, 8)
        assert "stop" not in info.sampling and info.sampling["max_tokens"] == 4
        assert all(b.request_text(rid, last) == "" for rid in b.request_ids())


def test_cli_flags(tmp_path, capsys):
    from app.cli import build_parser, main
    from app.privacy import writer_privacy_kwargs
    args = build_parser().parse_args(["run", "--trace", "t.csv", "--record", "r.sqlite"])
    assert writer_privacy_kwargs(args) == {"file_mode": 0o600, "store_text": True}
    args = build_parser().parse_args(["demo", "--record-mode", "0640", "--no-text"])
    assert writer_privacy_kwargs(args) == {"file_mode": 0o640, "store_text": False}
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--trace", "t.csv", "--record", "r.sqlite", "--record-mode", "rw-r--r--"])
    assert exit_info.value.code == 2
    assert "not octal permission bits" in capsys.readouterr().err


def test_the_window_says_the_text_was_not_recorded(tmp_path, qtbot):
    from ui import MainWindow
    path = tmp_path / "no_text.sqlite"
    secret_run(path, store_text=False)
    with open_reader(path) as reader:
        w = MainWindow(reader, None, open_recording=Reader)
        qtbot.addWidget(w)
        w.timer.stop()
        assert w.jump_to("secret")
        w.refresh(force=True)
        assert w.inspector.text.toPlainText() == ""
        assert "not recorded (--no-text)" in w.inspector.text.placeholderText()
        w.close()


def test_the_summary_says_the_text_was_not_recorded(tmp_path, capsys):
    from app.cli import main
    path = tmp_path / "no_text.sqlite"
    secret_run(path, store_text=False)
    assert main(["summary", str(path)]) == 0
    assert "text: not stored (recorded with --no-text" in capsys.readouterr().out
