"""Waiting queues of the scheduler, one per policy: FCFS (a deque) and priority (a heap).

Both answer the same few questions the scheduler asks every step (who is first, add, take the
first, put a preempted request back, remove one) in O(1) or O(log n), so a step's cost does not
grow with the queue (a production trace keeps tens of thousands of requests waiting). The split
follows vLLM v1's ``vllm/v1/core/sched/request_queue.py``; the code is ours.

Order: FCFS serves by arrival; a preempted request goes back to the front (it was admitted before
anything still waiting). Priority serves by ``(priority, arrival number)``: a lower ``priority``
value first, ties by arrival, and a preempted request simply rejoins at its key.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Iterator

from engine.request import Request
from engine.vocab import Policy


class FCFSQueue:
    """Waiting requests in arrival order (``deque``); preempted ones re-enter at the front."""

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[Request]:
        """Requests in the order they would be served."""
        return iter(self._q)

    def __contains__(self, req: Request) -> bool:
        return req in self._q

    def peek(self) -> Request:
        """The request served next. Raises ``IndexError`` when empty."""
        return self._q[0]

    def add(self, req: Request) -> None:
        """A new arrival: served after everyone already waiting."""
        self._q.append(req)

    def pop(self) -> Request:
        """Take the request served next. Raises ``IndexError`` when empty."""
        return self._q.popleft()

    def prepend(self, req: Request) -> None:
        """A preempted (or resumed) request: served before everyone waiting."""
        self._q.appendleft(req)

    def remove(self, req: Request) -> None:
        """Take ``req`` out (pause, abort). O(n). Raises ``ValueError`` if absent."""
        self._q.remove(req)

    def reorder(self, req: Request) -> None:
        """``req``'s priority changed: FCFS ignores priorities (no-op)."""


class PriorityQueue:
    """Waiting requests by ``(request.priority, arrival number)``: lower priority value first.

    A binary heap with lazy deletion: :meth:`remove` and :meth:`reorder` mark the old entry dead
    (O(log n) amortised). The arrival number is ``Request.seq`` (set by the scheduler).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Request]] = []
        self._entry: dict[int, tuple[int, int, int, Request]] = {}   # id(req) -> live entry
        self._tiebreak = itertools.count()

    def __len__(self) -> int:
        return len(self._entry)

    def __bool__(self) -> bool:
        return bool(self._entry)

    def __contains__(self, req: Request) -> bool:
        return id(req) in self._entry

    def __iter__(self) -> Iterator[Request]:
        """Requests in the order they would be served (O(n log n): for views and tests)."""
        return iter([e[3] for e in sorted(self._entry.values(), key=lambda e: e[:3])])

    def _push(self, req: Request) -> None:
        entry = (*priority_key(req), next(self._tiebreak), req)
        self._entry[id(req)] = entry
        heapq.heappush(self._heap, entry)

    def _clean(self) -> None:
        heap, live = self._heap, self._entry
        while heap and live.get(id(heap[0][3])) is not heap[0]:
            heapq.heappop(heap)

    def peek(self) -> Request:
        """The request served next. Raises ``IndexError`` when empty."""
        self._clean()
        return self._heap[0][3]

    def add(self, req: Request) -> None:
        """Queue ``req`` at its ``(priority, arrival)`` key."""
        self._push(req)

    prepend = add   # a preempted request rejoins at its key

    def pop(self) -> Request:
        """Take the request served next. Raises ``IndexError`` when empty."""
        self._clean()
        req = heapq.heappop(self._heap)[3]
        del self._entry[id(req)]
        return req

    def remove(self, req: Request) -> None:
        """Take ``req`` out. Raises ``ValueError`` if absent."""
        if self._entry.pop(id(req), None) is None:
            raise ValueError(f"{req.request_id} is not waiting")
        if len(self._heap) > 2 * len(self._entry) + 64:     # dead entries dominate: rebuild
            self._heap = sorted(self._entry.values(), key=lambda e: e[:3])

    def reorder(self, req: Request) -> None:
        """Re-key ``req`` after its ``priority`` changed (it keeps its arrival order)."""
        if id(req) in self._entry:
            self._push(req)


def priority_key(req: Request) -> tuple[int, int]:
    """The order of the priority policy: (priority, arrival number), lower first."""
    return (req.priority, req.seq)


def make_queue(policy: str) -> FCFSQueue | PriorityQueue:
    """The waiting queue of ``policy`` (``fcfs`` and ``static`` serve by arrival)."""
    return PriorityQueue() if policy == Policy.PRIORITY else FCFSQueue()
