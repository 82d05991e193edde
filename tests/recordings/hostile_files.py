"""Edit a recording behind BatchScope's back, as an attacker or a broken disk would."""
from __future__ import annotations

import sqlite3
from typing import Callable, Mapping


def edit_file(path, *statements: str, functions: Mapping[str, Callable] = {}) -> None:
    """Run ``statements`` on the SQLite file at ``path`` (with ``functions`` registered on the
    connection, as an attacker's own SQLite could have them) and commit."""
    conn = sqlite3.connect(path)
    for name, fn in functions.items():
        conn.create_function(name, -1, fn)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def read_everything(path):
    """Every read a user's session makes of the file: open, seek, records, batches, each request's
    info, text and timeline, SQL on the views, the summary and ``batchscope check``. Returns the
    check's problems."""
    from recordings import Reader, summarize
    from recordings.file_checks import check_file

    with Reader(path) as reader:
        last = reader.latest_step()
        for k in sorted({-1, 0, last // 2, last, last + 5}):
            reader.state_at(k)
        reader.records(0, last + 1)
        reader.step_batches(0, last + 1)
        for rid in reader.request_ids():
            reader.request_info(rid)
            reader.request_text(rid, last)
            reader.request_timeline(rid)
        reader.execute("SELECT * FROM tokens")
        reader.execute("SELECT * FROM step_requests")
        reader.is_complete()
        summarize(reader)
        return check_file(reader)
