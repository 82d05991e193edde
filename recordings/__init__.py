"""The SQLite record of a run: schema, writer, reader (a StepSource) and metrics. No Qt, no torch.

``RecordingWriter`` records a live run from a background thread; ``Reader`` replays a recording
(also one still being written) through the same ``StepSource`` interface the UI draws from;
``summarize`` recomputes a run's metrics from the rows.
"""
from recordings.errors import RecordingError
from recordings.metrics import RunSummary, summarize
from recordings.reader import Reader
from recordings.writer import RecordingWriter

__all__ = ["RecordingWriter", "Reader", "RecordingError", "RunSummary", "summarize"]
