"""Request lifecycles as nestable async slices: the request from arrival to its end, and inside
it one phase at a time: ``queued`` -> ``prefill`` -> ``decode``, with ``preempted`` (waiting to
recompute or swapped out) and ``paused`` (held by the user) gaps, and ``queued`` again after a
resume.

Trace Event Format: ``ph`` ``b`` / ``e`` (nestable async begin / end) with the request id as
``id``, category ``request``; slices of one id nest (the phase inside the request). Every
begin gets its end: a request the recording leaves unfinished is closed at the end of the last
step with ``args.unfinished`` true. Timestamps of one id never go backwards.
"""
from __future__ import annotations

from typing import Any, Callable

from recordings.export.timebase import TimeBase

CATEGORY = "request"
PHASES = ("queued", "prefill", "decode", "preempted", "paused")


class Lifecycles:
    """Async slices of the live requests, written through ``emit(event)`` as they happen, in
    process ``pid``. Holds one entry per live request (its phase and last timestamp)."""

    def __init__(self, emit: Callable[[dict], None], timebase: TimeBase, pid: int) -> None:
        self.emit, self.tb, self.pid = emit, timebase, pid
        self._live: dict[str, list] = {}        # request id -> [phase or None, last us]

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._live

    def _event(self, ph: str, name: str, request_id: str, us: float, args: dict | None) -> None:
        ev: dict[str, Any] = {"ph": ph, "cat": CATEGORY, "name": name, "id": request_id,
                              "pid": self.pid, "tid": 0, "ts": us}
        if args:
            ev["args"] = args
        self.emit(ev)

    def arrive(self, request_id: str, t: float, args: dict | None = None) -> None:
        """Begin the request's slice and its ``queued`` phase at engine time ``t``."""
        us = self.tb.us(t)
        self._live[request_id] = [None, us]
        self._event("b", request_id, request_id, us, args)
        self.phase(request_id, "queued", t)

    def phase(self, request_id: str, name: str, t: float, args: dict | None = None) -> None:
        """End the current phase and begin ``name`` at ``t`` (nothing if it is already in
        ``name`` and no ``args`` are given). A request not seen arriving arrives at ``t``."""
        if request_id not in self._live:
            self.arrive(request_id, t, {"arrival": "not recorded"})
        live = self._live[request_id]
        if live[0] == name and not args:
            return
        us = max(self.tb.us(t), live[1])
        if live[0] is not None:
            self._event("e", live[0], request_id, us, None)
        self._event("b", name, request_id, us, args)
        live[0], live[1] = name, us

    def finish(self, request_id: str, t: float, args: dict | None = None) -> None:
        """End the current phase and the request at ``t``; ``args`` go on the request's end."""
        if request_id not in self._live:
            self.arrive(request_id, t, {"arrival": "not recorded"})
        phase, last = self._live.pop(request_id)
        us = max(self.tb.us(t), last)
        if phase is not None:
            self._event("e", phase, request_id, us, None)
        self._event("e", request_id, request_id, us, args)

    def close(self, t: float) -> None:
        """End every request still live at ``t`` (the recording stops before they finished)."""
        for request_id in list(self._live):
            self.finish(request_id, t, {"unfinished": True})
