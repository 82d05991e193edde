"""Damaged copies of a real recording for the damage / salvage tests: a page overwritten in the
middle of a table's b-tree (found with SQLite's ``dbstat`` where the build has it, else the
file's middle page), a truncated file, and the brute-force truth of which steps still replay."""
from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from recordings.file.reader import Reader

from recordings.file.open_reader import open_reader
from recordings.errors import RecordingError


def damage_base_run(path: Path) -> Path:
    """A closed recording of ~300 steps of the real engine (fake runner) over ~110 pages of 4 kB
    (SQLite's default, smaller than the writer's: a damaged page then loses a few steps, not
    most of them), to damage in tests; returns ``path``."""
    from tests.support.engine_driver import run_engine

    run_engine(path, seed=3, num_requests=120, fail_steps=(), max_prompt=64, max_output=48,
               arrivals_per_step=1.0, writer_kwargs={"keyframe_interval": 16, "page_size": 4096})
    return path


def page_size(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("PRAGMA page_size").fetchone()[0]


def middle_leaf(path: Path, table: str) -> int:
    """The page number (1-based) of the middle leaf page of ``table``'s b-tree (``dbstat``),
    or the file's middle page when this SQLite has no ``dbstat``."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        pages = [p for (p,) in db.execute("SELECT pageno FROM dbstat WHERE name = ? AND "
                                          "pagetype = 'leaf' ORDER BY pageno", (table,))]
        return pages[len(pages) // 2]
    except sqlite3.OperationalError:          # no dbstat in this build
        return db.execute("PRAGMA page_count").fetchone()[0] // 2
    finally:
        db.close()


def root_page(path: Path, name: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]


def overwrite_page(src: Path, dst: Path, page: int, *, size: int | None = None, seed: int = 0) -> Path:
    """A copy of ``src`` at ``dst`` with ``size`` bytes (default: the whole page) of page
    ``page`` (1-based) overwritten with random bytes."""
    data = bytearray(src.read_bytes())
    n = page_size(src) if size is None else size
    at = (page - 1) * page_size(src)
    data[at:at + n] = random.Random(seed).randbytes(n)
    dst.write_bytes(bytes(data))
    return dst


def truncated(src: Path, dst: Path, fraction: float) -> Path:
    """A copy of ``src`` cut to ``fraction`` of its pages."""
    data = src.read_bytes()
    ps = page_size(src)
    dst.write_bytes(data[:int(len(data) // ps * fraction) * ps])
    return dst


def replayable_steps(damaged: Path, original: Reader) -> set[int]:
    """The steps ``k`` whose cold ``state_at(k)`` on ``damaged`` (a fresh reader each) succeeds
    and equals the original's: the truth a damage report is checked against."""
    out = set()
    for k in range(original.latest_step() + 1):
        try:
            with open_reader(damaged, damaged=True) as reader:
                if reader.state_at(k) == original.state_at(k):
                    out.add(k)
        except RecordingError:
            pass
    return out


def steps_of(ranges) -> set[int]:
    return {k for a, b in ranges for k in range(a, b + 1)}


def prefix_end(steps: set[int]) -> int:
    """The last step of the run 0, 1, ... in ``steps`` (-1 when 0 is not in it)."""
    k = -1
    while k + 1 in steps:
        k += 1
    return k
