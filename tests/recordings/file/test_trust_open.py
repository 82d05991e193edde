"""Nothing in a recording runs code, and a copy of a crashed run without its -wal file still opens.

Crafted files: a trigger that writes, views that call a function (one shadowing the ``tokens``
view, one replacing the ``steps`` table), and a keyframe whose ``.npz`` holds a pickled object.
Reading them through every reader call must never call the function or unpickle, and must not
change the file.
"""
from __future__ import annotations
from tests.support.paths import FIXTURES, REPO

import ast
import hashlib
import io
import shutil
import sqlite3

import numpy as np
import pytest

from tests.support.hostile_files import edit_file, read_everything
from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError

CALLS: list[str] = []


def spy(*args):
    """The 'payload' a hostile file tries to run: it only records that it ran."""
    CALLS.append("spy")
    return 1


class Payload:
    """Unpickling this calls :func:`spy`."""

    def __reduce__(self):
        return (spy, ("unpickled",))


@pytest.fixture
def copy(recorded):
    """A fresh recording of a small run, to be made hostile."""
    CALLS.clear()
    return recorded.path


def craft(path, *statements):
    """Run ``statements`` on the file with a connection that knows ``spy`` (as an attacker's
    SQLite would), then close it."""
    edit_file(path, *statements, functions={"spy": spy})


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_trigger_in_the_file_never_fires_and_the_file_is_not_changed(copy):
    craft(copy, "CREATE TABLE pwned (x)",
          "CREATE TRIGGER t AFTER UPDATE ON runs BEGIN INSERT INTO pwned VALUES (spy()); END",
          "CREATE TRIGGER u AFTER INSERT ON steps BEGIN INSERT INTO pwned VALUES (spy()); END")
    before = digest(copy)
    problems = read_everything(copy)
    assert CALLS == [] and digest(copy) == before
    conn = sqlite3.connect(copy)
    assert conn.execute("SELECT count(*) FROM pwned").fetchone() == (0,)
    conn.close()
    named = [p.message for p in problems if p.invariant == "schema"]
    assert any("unknown trigger 't'" in m for m in named) and any("'pwned'" in m for m in named)


def test_the_files_own_views_are_never_run(tmp_path):
    """A schema-3 file (schema 4 has no views) whose ``tokens`` view calls a function: the
    reader's SQL on ``tokens`` runs the reader's own definition, and the rows are the real
    tokens."""
    CALLS.clear()
    copy = tmp_path / "v3.sqlite"
    shutil.copy(FIXTURES / "v3_prefix.sqlite", copy)
    with open_reader(copy) as reader:
        real = reader.execute("SELECT * FROM tokens ORDER BY step, ord")
    craft(copy, "DROP VIEW tokens",
          "CREATE VIEW tokens AS SELECT spy() AS step, 0 AS ord FROM steps",
          "CREATE VIEW evil AS SELECT spy() AS x FROM steps")
    read_everything(copy)
    with open_reader(copy) as reader:
        assert reader.execute("SELECT * FROM tokens ORDER BY step, ord") == real
        with pytest.raises(RecordingError, match="spy"):
            reader.execute("SELECT * FROM evil")
        # even a function the reader's own connection knew would not run from the file's schema
        reader._conn.create_function("spy", -1, spy)
        with pytest.raises(RecordingError, match="unsafe use of spy"):
            reader.execute("SELECT * FROM evil")
    assert CALLS == []
    # what trusted_schema = OFF prevents: a plain connection runs the view's function
    conn = sqlite3.connect(copy)
    conn.create_function("spy", -1, spy)
    conn.execute("SELECT * FROM evil").fetchall()
    conn.close()
    assert CALLS


def test_a_view_in_place_of_a_table_is_refused(copy):
    craft(copy, "ALTER TABLE steps RENAME TO real_steps",
          "CREATE VIEW steps AS SELECT *, spy() AS pwned FROM real_steps")
    with pytest.raises(RecordingError, match="spy"):
        read_everything(copy)
    assert CALLS == []


def test_a_keyframe_holding_a_pickle_is_not_unpickled(copy):
    buffer = io.BytesIO()
    np.savez(buffer, block_owner=np.array([Payload()], dtype=object))
    craft(copy, "UPDATE keyframes SET state_npz = x'" + buffer.getvalue().hex() + "'")
    assert b"spy" in buffer.getvalue()      # the pickle is really in the file
    with open_reader(copy) as reader, pytest.raises(RecordingError, match="keyframe|pickle|corrupt"):
        reader.state_at(3)
    assert CALLS == []


def unsafe_calls(source: str) -> list[str]:
    """What in ``source`` can run code from data: the builtins eval / exec / compile, imports of
    pickle, marshal, shelve or dill, ``torch.load`` / ``yaml.load``, and ``np.load`` without
    ``allow_pickle=False``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            found += [n for n in names if n.split(".")[0] in ("pickle", "marshal", "shelve", "dill")]
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("eval", "exec", "compile", "__import__"):
            found.append(f.id)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            name = f"{f.value.id}.{f.attr}"
            if name in ("torch.load", "yaml.load", "pickle.loads", "pickle.load"):
                found.append(name)
            if name in ("np.load", "numpy.load") and not any(
                    k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in node.keywords):
                found.append(f"{name} without allow_pickle=False")
    return found


def test_the_scanner_finds_what_it_looks_for():
    assert unsafe_calls("import pickle\neval('1')\nnp.load(f)\nnp.load(f, allow_pickle=True)") == [
        "pickle", "eval", "np.load without allow_pickle=False", "np.load without allow_pickle=False"]
    assert unsafe_calls("model.eval()\napp.exec()\nnp.load(f, allow_pickle=False)") == []


def test_no_pickle_eval_or_exec_in_the_code_that_reads_files():
    """recordings, app, ui and engine: nothing unpickles, evals or execs what it reads."""
    root = REPO
    for folder in ("recordings", "app", "ui", "engine"):
        for source in (root / folder).rglob("*.py"):
            assert unsafe_calls(source.read_text()) == [], source


HAS_SETCONFIG = hasattr(sqlite3.Connection, "setconfig") and hasattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE")


@pytest.mark.skipif(not HAS_SETCONFIG, reason="Connection.setconfig is Python 3.12+")
def test_readers_run_sqlite_in_defensive_mode(copy):
    """SQLite's defensive mode (no writable_schema, no shadow-table writes) on every reader's
    connection where Python exposes it; a damaged file's reader leaves it off, as it needs
    ``writable_schema`` to read a truncated file."""
    from recordings.file.opening import connect_readonly
    for damaged, defensive in ((False, True), (True, False)):
        conn = connect_readonly(copy, damaged=damaged)
        try:
            assert bool(conn.getconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE)) is defensive
        finally:
            conn.close()
