"""A recording's summary as JSON: what ``batchscope summary`` prints, as one object.

``summary_dict`` gathers :func:`recordings.metrics.run_metrics.summarize` (``RunSummary``) and
:func:`recordings.metrics.run_metrics.summarize_batching` (``BatchingSummary``) as plain dicts (every field,
so fields added to those classes appear here too; percentiles as ``{p50, p90, p99,
num_samples}``), their derived rates, the roofline efficiency (``recordings.metrics.roofline``: the run's
and its per-step percentiles, with the basis or why there is none), whether the recording is
complete (``recordings.file.completeness``: ``complete`` is true only for a run closed by its
writer with every request finished), and the run's provenance (model, device, clock and engine config, trace and its scaling).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any


def summary_dict(reader) -> dict[str, Any]:
    """The summary of the recording open in ``reader`` as JSON-ready data (NaN and infinities
    become None). Raises ``RecordingError`` for an unreadable recording."""
    from recordings.metrics.run_metrics import summarize
    from recordings.metrics.run_metrics import summarize_batching
    from recordings.metrics.roofline import summarize_roofline
    from recordings.file.completeness import completeness

    run = summarize(reader)
    roof = summarize_roofline(reader)
    info = reader.run_info().to_json()       # the stored keys, as stored
    out = {
        "recording": str(reader.path),
        **completeness(reader).to_json(),
        "summary": dataclasses.asdict(run) | {"num_finished": run.num_finished,
                                              "prefix_cache_hit_rate": run.prefix_cache_hit_rate},
        "batching": dataclasses.asdict(summarize_batching(reader)),
        "roofline": {"efficiency": roof.efficiency, "floor_s": roof.floor_s, "step_s": roof.step_s,
                     "run_s": roof.run_s, "per_step": dataclasses.asdict(roof.per_step),
                     "num_above_peak": roof.num_above_peak,
                     "simulated": roof.roofline.simulated, "basis": roof.roofline.note},
        "run": {k: info.get(k) for k in ("model", "device", "dtype", "executor", "simulated", "seed",
                                         "started_at", "config", "trace") if k in info},
    }
    return _finite(out)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def summary_json(reader) -> str:
    """:func:`summary_dict` as indented JSON text."""
    return json.dumps(summary_dict(reader), indent=2, allow_nan=False)


def export_json(reader, path: str | Path) -> Path:
    """Write :func:`summary_json` of the recording to ``path``. Raises ``RecordingError`` for
    an unreadable recording, ``OSError`` if the file cannot be written."""
    text = summary_json(reader)
    path = Path(path)
    path.write_text(text + "\n", encoding="utf-8")
    return path
