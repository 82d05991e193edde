"""Whether a replayed recording ran to its end: a run cut short (the process killed, the window
closed while requests were still queued or running) leaves requests without an outcome
(``requests.status`` NULL) and, after a crash, no ``runs.closed_at``. The window marks such a
recording incomplete and lists its unfinished requests (``ui.dialogs.check``)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.outputs import RequestView
from engine.state.source import RecordingSource


@dataclass(frozen=True)
class RunEnd:
    """How a recorded run ended. ``last_step``: its last recorded step (-1: none);
    ``unfinished``: the views, at that step, of the requests that never finished (arrival
    order); ``closed``: whether the writer closed the file (False after a crash, or while it is
    still being written)."""

    last_step: int
    unfinished: tuple[RequestView, ...]
    closed: bool

    @property
    def is_complete(self) -> bool:
        return self.closed and not self.unfinished

    def summary(self) -> str:
        """One line for the title and status bar ('' for a complete run)."""
        if self.is_complete:
            return ""
        n = len(self.unfinished)
        text = f"incomplete: run stopped at step {self.last_step}, {n:,} request{'s' * (n != 1)} unfinished"
        return text if self.closed else f"{text} (file not closed: crashed or still being written)"

    def short(self) -> str:
        """:meth:`summary` in fewer words, for the status bar ('' for a complete run)."""
        if self.is_complete:
            return ""
        return f"incomplete: {len(self.unfinished):,} unfinished"      # the step: in the tooltip


def run_end(source) -> RunEnd | None:
    """How the recording ``source`` (a ``RecordingSource``) ended; None for a source that is
    no recording (a live engine) or cannot say. The unfinished requests are those still live in
    the state after the last step (they are exactly the recorded requests without an outcome)."""
    if not isinstance(source, RecordingSource):
        return None
    try:
        closed = bool(source.is_complete())
        last = source.latest_step()
        state = source.state_at(last)
    except Exception:                 # an unreadable file: the window's error banner says so
        return None
    return RunEnd(last, tuple(state.views()), closed)
