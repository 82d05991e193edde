"""A recording's summary as JSON: what ``batchscope summary`` prints, as one object.

``summary_dict`` gathers :func:`recordings.metrics.run_metrics.summarize` (``RunSummary``) and
:func:`recordings.metrics.run_metrics.summarize_batching` (``BatchingSummary``) as plain dicts (every field,
so fields added to those classes appear here too; percentiles as ``{p50, p90, p99,
num_samples}``), their derived rates, the roofline efficiency (``recordings.metrics.roofline``: the run's
and its per-step percentiles, with the basis or why there is none), the sections ``summary``
prints for admission control (``recordings.metrics.admission``: the rules and the rejections by
reason), thrash (``recordings.metrics.thrash``: preemptions and recomputed tokens per request, the
most preempted, the share of computed tokens recomputed) and prefix-cache hits by source
(``recordings.metrics.prefix_hits``; None when prefix caching was off), whether the recording is
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
    from recordings.metrics.admission import summarize_admission
    from recordings.metrics.prefix_hits import summarize_prefix_hits
    from recordings.metrics.thrash import summarize_thrash
    from recordings.file.completeness import completeness

    run = summarize(reader)
    admission, thrash, hits = summarize_admission(reader), summarize_thrash(reader), summarize_prefix_hits(reader)
    roof = summarize_roofline(reader)
    info = reader.run_info().to_json()       # the stored keys, as stored
    out = {
        "recording": str(reader.path),
        **completeness(reader).to_json(),
        "summary": dataclasses.asdict(run) | {"num_finished": run.num_finished,
                                              "prefix_cache_hit_rate": run.prefix_cache_hit_rate},
        "batching": dataclasses.asdict(summarize_batching(reader)),
        "admission": dataclasses.asdict(admission) | {"is_on": admission.is_on,
                                                       "total_rejected": admission.total_rejected},
        "thrash": dataclasses.asdict(thrash) | {
            "recomputed_share": thrash.recomputed_share,
            "top": [{"request_id": rid, "num_preemptions": n, "num_recomputed_tokens": tokens}
                    for rid, n, tokens in thrash.top]},
        "prefix_hits": None if hits is None else dataclasses.asdict(hits) | {
            "num_shared_hit_tokens": hits.num_shared_hit_tokens, "shared_rate": hits.shared_rate,
            "readmission_rate": hits.readmission_rate},
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
