"""Whether a recording holds a whole run: closed by its writer, every request with an outcome.

The one definition of "complete": ``batchscope summary`` and ``check`` print its INCOMPLETE lines,
the JSON and Perfetto exports carry its ``complete`` (``Reader.is_complete`` says only whether
the writer closed the file).

A run is cut short in two ways, and metrics of either describe only what was recorded:

- the writer never closed the file (``runs.closed_at`` is NULL): the process was killed (kill -9,
  a crash, a power cut) or is still writing; the file holds the steps committed until then;
- the writer closed it but requests never finished (``requests.status`` NULL, i.e. no outcome):
  the window was closed, or ``batchscope run`` was interrupted, while requests were waiting or
  running.
"""
from __future__ import annotations

from dataclasses import dataclass

NUM_IDS_SHOWN = 8


@dataclass(frozen=True)
class Completeness:
    """How complete a recording is.

    ``closed_cleanly``: the writer closed the file; ``num_requests``: recorded requests;
    ``num_unfinished``: those without an outcome (status not ``FINISHED_*``);
    ``first_unfinished``: the first :data:`NUM_IDS_SHOWN` of them in arrival order;
    ``num_steps``: recorded steps.
    """

    closed_cleanly: bool
    num_requests: int
    num_unfinished: int
    first_unfinished: tuple[str, ...]
    num_steps: int

    @property
    def is_complete(self) -> bool:
        """Closed by the writer with every request finished."""
        return self.closed_cleanly and self.num_unfinished == 0

    def to_json(self) -> dict:
        """The fields exports carry (JSON summary, Perfetto metadata): ``complete`` (the one
        definition: :attr:`is_complete`), ``closed_cleanly``, ``num_requests``,
        ``num_unfinished``, ``num_steps``."""
        return {"complete": self.is_complete, "closed_cleanly": self.closed_cleanly,
                "num_requests": self.num_requests, "num_unfinished": self.num_unfinished,
                "num_steps": self.num_steps}

    def format_lines(self, cause: str | None = None) -> list[str]:
        """Nothing for a complete run; else 'INCOMPLETE ...' lines saying how it was cut short and
        which requests did not finish (count and first ids). ``cause``: why the writer stopped,
        when the caller knows (a full disk), instead of the guess from the file alone."""
        if self.is_complete:
            return []
        if cause and not self.closed_cleanly:
            why = cause
        elif not self.closed_cleanly:
            why = ("the file was not closed by its writer: the run was killed or crashed (or is still "
                   f"being recorded); it holds the {self.num_steps} steps committed until then")
        else:
            why = f"the run was stopped after {self.num_steps} steps, before every request finished"
        lines = [f"INCOMPLETE recording: {why}; the metrics cover only the recorded part."]
        if self.num_unfinished:
            more = ", ..." if self.num_unfinished > len(self.first_unfinished) else ""
            lines.append(f"unfinished requests: {self.num_unfinished} of {self.num_requests} "
                         f"({', '.join(self.first_unfinished)}{more})")
        return lines


def completeness(reader) -> Completeness:
    """:class:`Completeness` of the recording ``reader`` (a :class:`recordings.file.reader.Reader`, schema 1
    to the latest). Raises :class:`recordings.errors.RecordingError` if the file cannot be read."""
    (num_requests, num_unfinished), = reader.execute(
        "SELECT count(*), coalesce(sum(coalesce(status, '') NOT LIKE 'FINISHED%'), 0) FROM requests")
    first = [r for (r,) in reader.execute(
        "SELECT request_id FROM requests WHERE coalesce(status, '') NOT LIKE 'FINISHED%' "
        "ORDER BY arrival_step, arrival_time, request_id LIMIT ?", (NUM_IDS_SHOWN,))]
    (num_steps,), = reader.execute("SELECT count(*) FROM steps")
    return Completeness(closed_cleanly=reader.is_complete(), num_requests=int(num_requests),
                        num_unfinished=int(num_unfinished), first_unfinished=tuple(first),
                        num_steps=int(num_steps))
