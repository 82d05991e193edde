"""Sample statistics shared by the metrics modules: percentiles, and the TTFT / ITL samples of a
recording streamed from its steps' token arrays (schema >= 2)."""
from __future__ import annotations

import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    from recordings.file.reader import Reader


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 of a sample set (``None`` each when there are no samples)."""

    p50: float | None
    p90: float | None
    p99: float | None
    num_samples: int

    @classmethod
    def of(cls, samples: Sequence[float], *, consume: bool = False) -> "Percentiles":
        """Percentiles by numpy's default (linear) interpolation. ``consume``: ``samples`` (an
        ``array('d')``, e.g. from :func:`latencies`) is used in place, without a copy, and left
        reordered: the ITL samples of a long run are tens of MB, and a copy plus numpy's own
        partition copy tripled the summary's memory."""
        if not len(samples):
            return cls(None, None, None, 0)
        if consume and isinstance(samples, array.array) and samples.typecode == "d":
            values = np.frombuffer(samples, dtype=float)
            qs = np.percentile(values, [50, 90, 99], overwrite_input=True)
        else:
            qs = np.percentile(np.asarray(samples, float), [50, 90, 99])
        p50, p90, p99 = (float(v) for v in qs)
        return cls(p50, p90, p99, len(samples))


STEPS_PER_QUERY = 2048   # steps decoded per query: memory stays flat on a 100k-step file


def token_times(reader: Reader, token_time: str = "token_time") -> Iterator[tuple[float, int]]:
    """``(time, seq)`` for every generated token of a schema >= 2 recording, in step order (a
    request's tokens in their order), streamed over the steps' aligned token arrays
    ``STEPS_PER_QUERY`` steps a query; placeholders (negative token ids) are skipped.
    ``token_time`` is the SQL expression over ``steps`` for a token's time (default: the engine
    clock's ``token_time``)."""
    (top,), = reader.execute("SELECT max(step) FROM steps")
    for lo in range(0, (top if top is not None else -1) + 1, STEPS_PER_QUERY):
        for (t,), batch in reader.batches(lo, lo + STEPS_PER_QUERY, (token_time,)):
            for seq in batch.seq[batch.token_id >= 0].tolist():
                yield t, seq


def latencies(reader: Reader, token_time: str = "token_time",
               arrival: dict[int, float] | None = None) -> tuple[array.array, array.array]:
    """TTFT samples (one per request with a token) and ITL samples (gaps between consecutive
    tokens of a request), from :func:`token_times`; samples are kept as float64 arrays (8 bytes
    each), never as rows. ``token_time`` is the SQL expression over ``steps`` for a token's time
    and ``arrival`` the arrival times by request ``seq`` (default: the engine clock's
    ``token_time`` and ``requests.arrival_time``)."""
    if arrival is None:
        arrival = dict(reader.execute("SELECT seq, arrival_time FROM requests"))
    last: dict[int, float] = {}
    ttft, itl = array.array("d"), array.array("d")
    for t, seq in token_times(reader, token_time):
        prev = last.get(seq)
        if prev is None:
            if arrival.get(seq) is not None:
                ttft.append(t - arrival[seq])
        else:
            itl.append(t - prev)
        last[seq] = t
    return ttft, itl
