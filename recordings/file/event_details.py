"""How an event's ``detail`` is stored in the ``events`` table: a ``prefix_cache`` /
``prefix_cache_waiting`` detail (``engine.kv.prefix_explain.PrefixMatch.to_detail``, ~85-120
bytes of JSON object, one or two per step under prefix caching) as a JSON array of its values in
field order, the ``stop`` reason as its index in :data:`STOPS`, trailing default values left out:
``[0,23,0,2,0]`` for ``{"blocks":0,"of":23,"tokens":0,"stop":"block_differs","at_token":0,
"evicted_step":-1}``. Every other detail, and one that would not come back exactly (not what
``to_detail`` writes), is stored as it is; so is everything in files written before (a JSON object
or free text, never an array), which :func:`load_detail` returns unchanged.
"""
from __future__ import annotations

import json

from engine.kv.prefix_explain import STOP_ALL, STOP_DIFFERS, STOP_EVICTED, STOP_SHORT, PrefixMatch
from engine.vocab import EventKind

STOPS = (STOP_ALL, STOP_SHORT, STOP_DIFFERS, STOP_EVICTED)     # stored index -> stop reason
PACKED_KINDS = frozenset((EventKind.PREFIX_CACHE, EventKind.PREFIX_CACHE_WAITING))
_DEFAULTS = PrefixMatch._field_defaults    # at_token -1, evicted_step -1, not_admitted ""


def store_detail(kind: str, detail: str) -> str:
    """The ``events.detail`` text of an event of ``kind`` whose detail is ``detail``:
    :func:`load_detail` gives ``detail`` back exactly."""
    if kind not in PACKED_KINDS or not detail.startswith("{"):
        return detail
    packed = _pack(detail)
    return packed if packed is not None and load_detail(kind, packed) == detail else detail


def load_detail(kind: str, stored: str) -> str:
    """The detail an event of ``kind`` had, from its stored ``events.detail`` text (an older
    file's as it is). Raises ``ValueError`` for a packed detail that does not decode."""
    if kind not in PACKED_KINDS or not stored.startswith("["):
        return stored
    values = json.loads(stored)
    if not isinstance(values, list) or not 4 <= len(values) <= len(PrefixMatch._fields):
        raise ValueError(f"packed prefix-cache detail {stored!r}: not 4 to "
                         f"{len(PrefixMatch._fields)} values")
    stop = values[3]
    if not isinstance(stop, int) or not 0 <= stop < len(STOPS):
        raise ValueError(f"packed prefix-cache detail {stored!r}: stop index {stop!r} outside "
                         f"0..{len(STOPS) - 1}")
    values[3] = STOPS[stop]
    return PrefixMatch(*values).to_detail()


def _pack(detail: str) -> str | None:
    """The array form of a ``PrefixMatch`` detail, or None when it is not one."""
    try:
        d = json.loads(detail)
        match = PrefixMatch(d["blocks"], d["of"], d["tokens"], STOPS.index(d["stop"]),
                            d.get("at_token", -1), d.get("evicted_step", -1), d.get("not_admitted", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    values = list(match)
    while len(values) > 4 and values[-1] == _DEFAULTS[PrefixMatch._fields[len(values) - 1]]:
        values.pop()
    return json.dumps(values, separators=(",", ":"))
