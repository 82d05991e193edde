"""Reading and editing a schema-4 recording's block events with sqlite3 (for tests that corrupt
a recording by hand): each step's events decoded with their arrival numbers as request ids
(``"17"``; the pool's own events have ``""``), and written back re-encoded."""
from __future__ import annotations

import sqlite3
from typing import Iterator

from engine.outputs import BlockEvent
from recordings.file import compact


def block_events(db: sqlite3.Connection) -> Iterator[tuple[int, int, BlockEvent]]:
    """(step, ord, event) of every block event, in order; an event's ``request_id`` is its
    arrival number as text."""
    for step, blob in db.execute("SELECT step, data FROM block_events ORDER BY step").fetchall():
        for i, event in enumerate(compact.block_events_from_blob(blob, str)):
            yield step, i, event


def replace_block_event(db: sqlite3.Connection, step: int, ord_: int, event: BlockEvent) -> None:
    """Write ``event`` (request id = arrival number as text) as block event ``ord_`` of ``step``."""
    (blob,), = db.execute("SELECT data FROM block_events WHERE step = ?", (step,)).fetchall()
    events = list(compact.block_events_from_blob(blob, str))
    events[ord_] = event
    db.execute("UPDATE block_events SET data = ? WHERE step = ?",
               (compact.block_events_blob(events, int), step))
    db.commit()
