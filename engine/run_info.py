"""``RunInfo``: a run's provenance and config, as one frozen, typed object.

Why here, in ``engine``: the object travels through every layer. ``app`` builds it (model, device,
library versions), ``recordings`` stores it (``runs.run_info_json``) and reads it back, the UI
shows it, and ``engine.state.source.StepSource.run_info()`` declares it: the protocol lives in the
engine, the lowest layer, so the type it returns lives there too (plain Python, no torch). It
describes a run of the engine (its ``EngineConfig``, the executor that served it); nothing here
knows about files or windows.

The stored form is a JSON object. :meth:`RunInfo.from_json` reads it and :meth:`RunInfo.to_json`
writes it back with the same keys, values and key order, so a recording written before this type
existed reads unchanged and one written after reads in older versions. Keys this version does not
know (a newer writer's, or an older one's) are kept in :attr:`RunInfo.extra`; a known key holding
a value of the wrong type is kept there too, as it was stored, with a :class:`RunInfoWarning`
naming it, and its field reads as absent: a recording stays readable whatever its provenance holds.
"""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class RunInfoWarning(UserWarning):
    """A stored ``run_info`` key holds a value of the wrong type: the value is kept, as stored, in
    :attr:`RunInfo.extra` and the field reads as absent."""


@dataclass(frozen=True)
class RunInfo:
    """What a run was: config, model, device, software, workload, and what happened to its file.

    Every field but :attr:`config` and :attr:`extra` is ``None`` when the run's JSON lacks the
    key (a fake runner's run has no ``device_name``, a file written before a key existed has
    none). Nested objects are the stored JSON objects (read them, do not change them).
    Raises nothing; :meth:`from_json` checks the types of what it reads.
    """

    config: Mapping[str, Any] = field(default_factory=dict)
    """The engine's knobs, ``engine.config.EngineConfig.to_dict()`` (or ``SimConfig``'s) as it was
    when the run started: vLLM's names, each in its knob's unit (``block_size`` in tokens,
    ``num_gpu_blocks`` in blocks, ``clock``: ``virtual`` (steps), ``wall`` or ``sim`` (seconds))."""
    executor: str | None = None
    """What executed the steps when it was not a model: ``sim`` (the simulated executor) or
    ``null`` (a benchmark's null runner); absent for a model run."""
    simulated: bool | None = None
    """True for a run on the simulated executor (its step times are the cost model's)."""
    model: Mapping[str, Any] | str | None = None
    """The model: ``name``, ``path``, ``weight_file_hash`` (sha256 hex), ``architecture``,
    ``num_parameters`` (count); a plain name for test and benchmark runners."""
    device: str | None = None
    """The torch device (``cpu``, ``cuda:0``) or ``sim:<device>`` for a simulated one."""
    device_name: str | None = None
    """The device's name as its driver says it (``NVIDIA H100 80GB HBM3``), or the CPU's."""
    torch_threads: int | None = None
    """torch's CPU threads during the run (count)."""
    dtype: str | None = None
    """The weights' and KV cache's dtype (``float32``, ``bfloat16``, ``float16``)."""
    sim: Mapping[str, Any] | None = None
    """A simulated run's cost model: ``model`` (shape), ``device`` (peaks: FLOP/s, bytes/s),
    ``cost`` (efficiencies and overheads, seconds) and ``cost_file`` (path or None)."""
    versions: Mapping[str, Any] | None = None
    """Library versions by name (``torch``, ``transformers``, ``numpy``, ``python``)."""
    seed: int | None = None
    """The engine's seed."""
    trace: Mapping[str, Any] | None = None
    """The workload's provenance (``app.workload_setup``): ``name``, ``sha256``, ``num_rows``,
    scaling notes, ``prefix_sharing``; stored as null by a run with no trace."""
    started_at: str | None = None
    """When the run started: UTC, ISO 8601, to the second."""
    roofline: Mapping[str, Any] | None = None
    """The model's shape in the run's dtype and the device's measured peaks
    (``recordings.metrics.roofline.roofline_info``), or ``{"error": ...}`` when it has no shape."""
    source: str | None = None
    """The API that wrote the recording when it was not the CLI (``app.llm.LLM.generate``)."""
    bench: Mapping[str, Any] | None = None
    """``batchscope bench``'s measurements: ``peaks`` (FLOP/s, bytes/s)."""
    workload: Mapping[str, Any] | None = None
    """A benchmark's generated workload: its ``kind``, sizes (tokens) and ``seed``."""
    prompt_token_ids: str | None = None
    """Why the prompts' token ids are not stored (synthetic ids and how to draw them again)."""
    recording: str | None = None
    """The recording file a live run writes (path)."""
    text_stored: bool | None = None
    """False when the run was recorded without prompt and output text (``--no-text``)."""
    salvaged: Mapping[str, Any] | None = None
    """Set by ``batchscope recover``: ``source`` (path), ``last_step`` kept,
    ``num_steps_in_source`` (steps), ``damage`` (lines)."""
    soak: bool | None = None
    """True for the soak benchmark's runs (``bench/soak.py``)."""
    extra: Mapping[str, object] = field(default_factory=dict)
    """Keys this version does not know, and known keys whose stored value had the wrong type,
    as stored: written back by :meth:`to_json` so nothing is lost."""
    layout: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """The stored object's keys in their order (set by :meth:`from_json`): :meth:`to_json` writes
    them first, in this order, with a stored null kept as null."""

    @property
    def model_name(self) -> str | None:
        """The model's name: ``model['name']``, or ``model`` when it is a plain name."""
        if isinstance(self.model, Mapping):
            name = self.model.get("name")
            return None if name is None else str(name)
        return self.model

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "") -> "RunInfo":
        """The :class:`RunInfo` of a stored ``run_info`` object (``json.loads`` of
        ``runs.run_info_json``, or a dict of the same shape).

        A known key whose value has the wrong type is kept in :attr:`extra` as stored and a
        :class:`RunInfoWarning` names it (``where``: the file, for the messages). Raises
        ``TypeError`` when ``data`` is not a mapping."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{where}{': ' if where else ''}run_info is a {type(data).__name__}, not an object")
        known: dict[str, Any] = {}
        extra: dict[str, object] = {}
        for key, value in data.items():
            kinds = _TYPES.get(key)
            if kinds is None:
                extra[key] = value
            elif _fits(value, kinds, nullable=key != "config"):
                known[key] = value
            else:
                extra[key] = value
                warnings.warn(f"{where}{': ' if where else ''}run_info[{key!r}] is {_short(value)}, not "
                              f"{' or '.join(_NAMES[k] for k in kinds)}; kept as stored, read as absent",
                              RunInfoWarning, stacklevel=2)
        return cls(**known, extra=extra, layout=tuple(data))

    def to_json(self) -> dict[str, Any]:
        """The JSON object to store: the keys of :attr:`layout` in order, then the known fields
        set since (not ``None``; ``config`` not empty) in field order, then the rest of
        :attr:`extra`. Nested values are shared with this object, not copied."""
        out: dict[str, Any] = {}
        for key in self.layout:
            if key in _TYPES:
                value = getattr(self, key)
                # a stored value of the wrong type (in extra) until a field of that name is set
                out[key] = self.extra[key] if key in self.extra and value == _DEFAULTS[key] else value
            elif key in self.extra:
                out[key] = self.extra[key]
        for name in _TYPES:
            value = getattr(self, name)
            if name not in out and value != _DEFAULTS[name]:
                out[name] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def replace(self, **changes: Any) -> "RunInfo":
        """A copy with ``changes`` (field names; ``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


_TYPES: dict[str, tuple[type, ...]] = {
    "config": (Mapping,), "executor": (str,), "simulated": (bool,), "model": (Mapping, str),
    "device": (str,), "device_name": (str,), "torch_threads": (int,), "dtype": (str,),
    "sim": (Mapping,), "versions": (Mapping,), "seed": (int,), "trace": (Mapping,),
    "started_at": (str,), "roofline": (Mapping,), "source": (str,), "bench": (Mapping,),
    "workload": (Mapping,), "prompt_token_ids": (str,), "recording": (str,), "text_stored": (bool,),
    "salvaged": (Mapping,), "soak": (bool,)}
"""The stored keys :class:`RunInfo` knows, with the JSON types each may hold (or null)."""

_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
             for f in dataclasses.fields(RunInfo) if f.name in _TYPES}
_NAMES = {Mapping: "an object", str: "a string", bool: "a boolean", int: "an integer"}


def _fits(value: object, kinds: tuple[type, ...], *, nullable: bool) -> bool:
    """``value`` is null (where allowed) or of one of ``kinds`` (a bool is not an int)."""
    if value is None:
        return nullable
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def _short(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
