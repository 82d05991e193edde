"""The SQLite record of a run, and what is computed from it. No Qt, no torch.

Sub-packages: ``file`` (schema, writer, reader), ``damage`` (what is still readable, salvage),
``check`` (invariants on every state, ``batchscope check``), ``metrics`` (recomputed from rows),
``compare`` (runs of one workload), ``export`` (Perfetto, CSV, JSON, Mooncake) and ``workloads``
(trace importers and request building). Nothing is imported eagerly: import the module you need,
e.g. ``from recordings.file.reader import Reader``.
"""
