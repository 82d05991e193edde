"""The run's metrics as the text lines ``batchscope summary`` prints and the window's Run summary
shows: one two-column table of ``recordings.metrics.run_metrics`` (totals, TTFT, ITL, preemptions,
thrash per request (``thrash``), prefix hits by source (``prefix_hits``), admission control
(``admission``), batching, TPOT, paused time and wall-clock latencies of a virtual-clock run), ``recordings.metrics.serving`` (E2E latency, queue time, requests/s,
prefill / decode split, goodput) and ``recordings.metrics.roofline`` (roofline efficiency). No Qt."""
from __future__ import annotations

from recordings.file.reader import Reader
from recordings.metrics.admission import summarize_admission
from recordings.metrics.prefix_hits import summarize_prefix_hits
from recordings.metrics.roofline import summarize_roofline
from recordings.metrics.run_metrics import summarize, summarize_batching
from recordings.metrics.serving import Slo, summarize_serving
from recordings.metrics.thrash import summarize_thrash
from recordings.metrics.wall_clock import wall_clock

NAME_WIDTH = 31            # the longest name: "E2E latency p50/p90/p99 (sim s)"


def summary_lines(reader: Reader, slo: Slo | None = None) -> list[str]:
    """The metrics of ``reader``'s run as lines (goodput under ``slo`` when it sets a limit).
    Raises :class:`recordings.errors.RecordingError` for a file that cannot be read."""
    serving = summarize_serving(reader, slo)
    extra = serving.format_lines(NAME_WIDTH) if serving else [
        f"{'E2E, queue time, goodput':<{NAME_WIDTH}}  n/a: a schema-1 recording has no per-step "
        f"token times"]
    split = summarize_prefix_hits(reader)
    return [*summarize(reader).format_table(NAME_WIDTH).splitlines(),
            *summarize_thrash(reader).format_lines(NAME_WIDTH),
            *(split.format_lines(NAME_WIDTH) if split is not None else ()),
            *summarize_admission(reader).format_lines(NAME_WIDTH),
            *summarize_batching(reader).format_lines(NAME_WIDTH),
            *wall_clock(reader).format_lines(NAME_WIDTH), *extra,
            *summarize_roofline(reader).format_lines(NAME_WIDTH)]
