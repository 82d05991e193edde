"""The workload a recording holds, as a fingerprint, and the check that two recordings hold
the same one (``batchscope compare`` refuses to compare different workloads)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from recordings.file.reader import Reader


class WorkloadMismatch(ValueError):
    """Two recordings hold different workloads (the message names the first difference)."""


@dataclass(frozen=True)
class WorkloadFingerprint:
    """What a workload is, as recorded: request ids in arrival order, arrivals relative to the
    first one (float64 [n], on the run's clock), prompt lengths and requested output lengths
    (``max_tokens``; int64 [n]), and the run's clock. ``digest``: sha256 over all of it
    (arrivals rounded to 1 ms / 0.001 step)."""

    clock: str
    request_ids: tuple[str, ...]
    arrival: np.ndarray
    num_prompt_tokens: np.ndarray
    max_tokens: np.ndarray

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.clock.encode())
        h.update("\0".join(self.request_ids).encode())
        h.update(np.round(self.arrival, 3).tobytes())
        h.update(self.num_prompt_tokens.tobytes())
        h.update(self.max_tokens.tobytes())
        return h.hexdigest()[:16]


def workload_fingerprint(reader: Reader) -> WorkloadFingerprint:
    """The :class:`WorkloadFingerprint` of the requests recorded in ``reader``."""
    rows = reader.execute("SELECT request_id, arrival_time, num_prompt_tokens, max_tokens FROM requests "
                          "ORDER BY seq")
    arrival = np.array([r[1] for r in rows], np.float64)
    clock = str(reader.run_info().config.get("clock", "virtual"))
    return WorkloadFingerprint(clock, tuple(str(r[0]) for r in rows),
                               arrival - (arrival.min() if len(arrival) else 0.0),
                               np.array([r[2] for r in rows], np.int64), np.array([r[3] for r in rows], np.int64))


def check_same_workload(a: WorkloadFingerprint, b: WorkloadFingerprint, name_a: str = "A",
                        name_b: str = "B", arrival_tolerance: float = 1e-3) -> None:
    """Raise :class:`WorkloadMismatch` naming the first difference between two recordings'
    workloads: their clock, number of requests, ids, arrivals (beyond ``arrival_tolerance`` on
    the clock: seconds or steps), prompt lengths or ``max_tokens``."""
    def fail(what: str) -> None:
        raise WorkloadMismatch(f"{name_a} and {name_b} are not runs of one workload: {what}")

    if a.clock != b.clock:
        fail(f"clock {a.clock} vs {b.clock} (times on different clocks do not compare)")
    if len(a.request_ids) != len(b.request_ids):
        fail(f"{len(a.request_ids)} vs {len(b.request_ids)} requests")
    for what, x, y in (("request id", np.array(a.request_ids, object), np.array(b.request_ids, object)),
                       ("prompt length", a.num_prompt_tokens, b.num_prompt_tokens),
                       ("max_tokens", a.max_tokens, b.max_tokens)):
        bad = np.flatnonzero(x != y)
        if bad.size:
            i = int(bad[0])
            fail(f"{what} of request #{i} ({a.request_ids[i]}): {x[i]} vs {y[i]} ({bad.size} requests differ)")
    bad = np.flatnonzero(np.abs(a.arrival - b.arrival) > arrival_tolerance)
    if bad.size:
        i = int(bad[0])
        fail(f"arrival of {a.request_ids[i]}: {a.arrival[i]:.6g} vs {b.arrival[i]:.6g} after the first "
             f"request ({bad.size} requests differ by more than {arrival_tolerance:g})")
