"""The transport bar's "jump to" box: parse what the user typed and find the step it names.

Three forms: a step number (``1234``, ``step 1234``, ``#1234``), a time on the engine clock
(``t=12.5``, ``t 12.5``, ``@12.5``: the step running at that time), or a request id (anything
else, ``id=42`` / ``req 42`` for an id that looks like a number: its arrival step).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.state.source import RecordingSource, StepSource
from engine.state.state import EngineState
from ui.step_summary import fetch_summaries

_STEP = re.compile(r"^(?:step\s*|#)?\s*(-?\d+)$", re.IGNORECASE)
_TIME = re.compile(r"^(?:t\s*[=:]|t\s+|@)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)\s*s?$", re.IGNORECASE)
_TIME_PREFIX = re.compile(r"^(?:t\s*[=:]|@)", re.IGNORECASE)
_ID = re.compile(r"^(?:id\s*[=:]|req(?:uest)?\s+)\s*(\S+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Jump:
    """``kind`` is ``step`` (``value`` int), ``time`` (float, engine clock) or ``request`` (str)."""

    kind: str
    value: int | float | str


def parse_jump(text: str) -> Jump:
    """The jump ``text`` asks for. Raises ``ValueError`` on an empty box and on a time that is no
    number (``t=abc``: "t= needs a number")."""
    text = text.strip()
    if not text:
        raise ValueError("type a step number, a time (t=12.5) or a request id")
    if m := _STEP.match(text):
        return Jump("step", int(m.group(1)))
    if m := _TIME.match(text):
        return Jump("time", float(m.group(1)))
    if _TIME_PREFIX.match(text):          # t=abc: a time was meant, not a request id
        raise ValueError(f"{text!r}: t= needs a number (engine time, e.g. t=12.5)")
    if m := _ID.match(text):
        return Jump("request", m.group(1))
    return Jump("request", text)


def clock_at(source: StepSource, step: int) -> float:
    """Engine clock at the start of ``step`` (its summary, else the state after it)."""
    steps = fetch_summaries(source, step, step + 1)
    return steps[0].clock if steps else source.state_at(step).clock


def step_at_time(source: StepSource, t: float) -> int:
    """The last step that started at or before engine time ``t`` (0 if none did): a binary
    search over the step clocks, O(log steps) record reads."""
    lo, hi = 0, source.latest_step()
    if hi < 0 or clock_at(source, 0) > t:
        return 0 if hi >= 0 else -1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if clock_at(source, mid) <= t:
            lo = mid
        else:
            hi = mid - 1
    return lo


def arrival_step(source: StepSource, request_id: str, state: EngineState | None) -> int:
    """The step in which ``request_id`` arrived: from ``source.request_info`` (a recording) when
    the source has one, else from the shown or the newest state. Raises ``ValueError`` if unknown."""
    info = source.request_info(request_id)
    if info is not None:
        return int(info.arrival_step)
    for st in (state, source.state_at(source.latest_step())):
        view = st.view(request_id) if st is not None else None
        if view is not None:
            return view.arrival_step
    if isinstance(source, RecordingSource):        # a recording knows every request it holds
        raise ValueError(f"no request {request_id!r} in this recording")
    raise ValueError(f"no request {request_id!r} in this run (or it finished long before the "
                     "shown step, and this source cannot look it up)")


def resolve_jump(source: StepSource, jump: Jump, state: EngineState | None = None) -> int:
    """The step to show for ``jump`` (clamped to the run). Raises ``ValueError`` if unknown."""
    latest = source.latest_step()
    if jump.kind == "step":
        step = int(jump.value)
    elif jump.kind == "time":
        step = step_at_time(source, float(jump.value))
    else:
        step = arrival_step(source, str(jump.value), state)
    return max(-1, min(step, latest))
