"""Exporters: a recording (``recordings.file.reader.Reader``) to the files other tools read. No Qt, no torch.

One module per format, each streaming through the reader in step or request ranges (memory
follows one chunk of steps and the live requests, never the whole recording):

- :mod:`recordings.export.perfetto`: Chrome / Perfetto trace-event JSON (slot tracks, request
  lifecycles, counters, preemption instants);
- :mod:`recordings.export.tables`: per-request and per-step CSV;
- :mod:`recordings.export.summary_json`: the run's summary as JSON;
- :mod:`recordings.export.mooncake`: the recorded workload as a Mooncake JSONL trace.

``batchscope export`` (``app/commands/export.py``) is the command line; docs/export.md the user's guide.
"""



