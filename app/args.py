"""The engine, simulator, workload and SLO flags shared by ``batchscope`` subcommands, and the
:class:`EngineConfig` built from them. A leaf of ``app``: the commands import it, never ``app.cli``.

The engine and simulated-executor flags are generated from the fields of ``EngineConfig`` and
``SimConfig`` (their help, choices and defaults live in each field's metadata, see
``engine.config.knob``; vLLM's ``EngineArgs.add_cli_args`` does the same). :data:`CONFIG_FLAGS` is the
one table of those flags: ``engine_config`` reads a parsed namespace through it and ``compare
--configs`` parses its ``knob=value`` overrides with it."""
from __future__ import annotations

import argparse
import dataclasses
import enum
import operator
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable

from engine.config import ConfigError, EngineConfig
from engine.sim.config import SIM_MAX_NUM_BATCHED_TOKENS, SIM_MAX_NUM_SEQS, SimConfig, sim_default_knobs
from engine.vocab import Clock, Executor

DEMO_NUM_GPU_BLOCKS = 112   # tight enough that the demo shows the cache filling and a few preemptions

ENGINE_GROUP = "engine (vLLM's knob names)"
SIM_GROUP = ("simulated executor (no model is loaded; each step's duration comes from a roofline cost model, "
             "sampled tokens are synthetic; see docs/sim.md)")

# Fields of the configs that have no flag, and why.
NOT_FLAGS = {
    "kv_cache_memory_fraction": "a bound of the automatic KV sizing, for the Python API (LLM(...)) and tests; "
                                "on the command line --num-gpu-blocks sizes the cache",
}


@dataclass(frozen=True)
class ConfigFlag:
    """One flag of the engine or simulated-executor group: its argparse destination ``dest``, the
    config ``field`` it sets (None for a flag that is no config knob, e.g. ``--threads``), the
    ``add_argument`` keywords ``kwargs`` (type, choices, default, help, ...), ``to_field`` (the
    field's value from the parsed flag value) and ``negated`` (a switch that turns its field off,
    ``--no-chunked-prefill``)."""

    dest: str
    field: str | None
    kwargs: dict
    to_field: Callable[[Any], Any] = lambda v: v
    negated: bool = False

    @property
    def option(self) -> str:
        """The flag as typed: ``--max-num-seqs``."""
        return "--" + self.dest.replace("_", "-")

    @property
    def switch(self) -> bool:
        """True for an on/off flag that takes no value (``store_true``)."""
        return self.kwargs.get("action") == "store_true"

    def add_to(self, group, default=dataclasses.MISSING) -> None:
        """Add this flag to an argparse ``group``; ``default`` replaces the table's default."""
        kwargs = self.kwargs if default is dataclasses.MISSING else {**self.kwargs, "default": default}
        group.add_argument(self.option, dest=self.dest, **kwargs)


def _help(text: str, default_text: str | None = "%(default)s") -> str:
    """A field's plain help as argparse help: ``%`` escaped, the default appended unless the text
    says it already (``default_text`` None: a switch, which shows none)."""
    text = text.replace("%", "%%")
    return text if default_text is None or "(default" in text else f"{text} (default: {default_text})"


def _value_type(annotation) -> type:
    """``int`` of ``int | None``; ``str`` stays ``str``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(t for t in typing.get_args(annotation) if t is not type(None))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return str          # parsed as text: choices name the words, the config makes them members
    return annotation


def _generated(f: dataclasses.Field, annotation, sim_only: bool) -> ConfigFlag:
    """The flag of config field ``f``: a switch for a bool that is off by default, else a flag of
    the field's type with its choices and metavar. A simulator flag (``sim_only``) defaults to None,
    meaning not given (it needs ``--executor sim``); its help shows the field's default."""
    meta = f.metadata
    kind = _value_type(annotation)
    if kind is bool:
        if f.default is not False:
            raise TypeError(f"config field {f.name} is on by default: give it a negated flag in "
                            f"app.args._explicit")
        return ConfigFlag(f.name, f.name, dict(action="store_true", help=_help(meta.get("help", ""), None)))
    default_text = str(f.default) if sim_only else "%(default)s"
    kwargs = dict(default=None if sim_only else f.default, help=_help(meta.get("help", ""), default_text))
    if kind is not str:
        kwargs["type"] = kind
    for key in ("choices", "metavar"):
        if meta.get(key) is not None:
            kwargs[key] = meta[key]
    return ConfigFlag(f.name, f.name, kwargs)


def _explicit(fields: dict[str, dataclasses.Field]) -> dict[str, ConfigFlag]:
    """The flags whose command line differs from their field, by field name."""
    def help_of(name: str) -> str:
        return fields[name].metadata["help"]

    return {
        "enable_chunked_prefill": ConfigFlag("no_chunked_prefill", "enable_chunked_prefill",
                                             dict(action="store_true", help="admit only whole prompts"),
                                             operator.not_, negated=True),
        "cuda_graphs": ConfigFlag("cuda_graphs", "cuda_graphs",
                                  dict(choices=["auto", "on", "off"], default="auto",
                                       help=_help("on: " + help_of("cuda_graphs"))),
                                  lambda v: {"on": True, "off": False}.get(v)),
        # the field is always "sim" (it marks a SimConfig); the flag picks the executor
        "executor": ConfigFlag("executor", "executor", dict(choices=list(fields["executor"].metadata["choices"]),
                                                            default=Executor.MODEL.value, help=_help(help_of("executor")))),
        "sim_model": ConfigFlag("sim_model", "sim_model", dict(
            metavar="NAME", help=_help(help_of("sim_model"), "--model, i.e. the embedded SmolLM2-135M"))),
        # None = not given: the executor's default (engine_config, sized_knobs)
        **{name: ConfigFlag(name, name, dict(type=int, default=None,
                                             help=_help(help_of(name), f"{fields[name].default}; {sim_text}")))
           for name, sim_text in SIM_SIZED.items()},
    }


# The knobs --executor sim sizes as vLLM would when no flag or preset sets them (sized_knobs).
SIM_SIZED = {"max_num_seqs": f"with --executor sim vLLM's {SIM_MAX_NUM_SEQS}",
             "max_num_batched_tokens": f"with --executor sim vLLM's {SIM_MAX_NUM_BATCHED_TOKENS}, or "
                                       f"--max-model-len without chunked prefill",
             "max_model_len": "with --executor sim the simulated model's own, from its config.json"}


# Flags of the engine group that set no config field, after the field they follow in --help.
THREADS = ConfigFlag("threads", None, dict(
    type=int, metavar="N",
    help="torch's CPU threads for the forward pass (torch.set_num_threads; default: the cores other "
         "processes leave free, from the load average at start and re-checked while running, shown in the "
         "status bar; app.threads)"))


def _config_flags() -> tuple[list[ConfigFlag], list[ConfigFlag]]:
    """(engine group, simulated-executor group) flags, in the configs' field order."""
    fields = {f.name: f for f in dataclasses.fields(SimConfig)}
    explicit = _explicit(fields)
    engine_names = {f.name for f in dataclasses.fields(EngineConfig)}
    hints = typing.get_type_hints(SimConfig)
    groups: tuple[list, list] = ([], [])
    for f in fields.values():
        if f.name in NOT_FLAGS:
            continue
        sim_only = f.name not in engine_names
        flag = explicit.get(f.name) or _generated(f, hints[f.name], sim_only)
        groups[sim_only].append(flag)
        if f.name == "device":
            groups[0].append(THREADS)
    return groups


ENGINE_FLAGS, SIM_FLAGS = _config_flags()
CONFIG_FLAGS: dict[str, ConfigFlag] = {f.dest: f for f in ENGINE_FLAGS + SIM_FLAGS}


def config_flag(name: str) -> ConfigFlag | None:
    """The flag of ``name``: a destination (``max_num_seqs``, ``no_chunked_prefill``, ``threads``) or
    a config field (``enable_chunked_prefill``); None if neither."""
    return CONFIG_FLAGS.get(name) or next((f for f in CONFIG_FLAGS.values() if f.field == name), None)


def add_engine_args(p: argparse.ArgumentParser, *, num_gpu_blocks: int | None, clock: str) -> None:
    """The engine and simulated-executor flag groups, generated from :data:`CONFIG_FLAGS`;
    ``num_gpu_blocks`` and ``clock`` are this command's defaults (the demo's differ from the config's)."""
    g = p.add_argument_group(ENGINE_GROUP)
    command_defaults = {"num_gpu_blocks": num_gpu_blocks, "clock": clock}
    for flag in ENGINE_FLAGS:
        flag.add_to(g, command_defaults.get(flag.dest, dataclasses.MISSING))
    add_sim_args(p)


def add_sim_args(p: argparse.ArgumentParser) -> None:
    """The simulated executor's flags (``--executor``, ``--sim-*``)."""
    g = p.add_argument_group(SIM_GROUP)
    for flag in SIM_FLAGS:
        flag.add_to(g)


def add_workload_args(p: argparse.ArgumentParser, *, time_scale: float, prompt_scale: float = 1.0,
                   output_scale: float = 1.0, min_prompt: int = 4, max_prompt: int | None = None,
                   min_output: int = 1, max_output: int | None = None) -> None:
    g = p.add_argument_group("workload scaling (make a production trace fit this machine)")
    g.add_argument("--time-scale", type=float, default=time_scale,
                   help="multiply trace arrival times (0.1 = 10x faster arrivals) (default: %(default)s)")
    g.add_argument("--prompt-scale", type=float, default=prompt_scale,
                   help="multiply prompt lengths (default: %(default).4g)")
    g.add_argument("--output-scale", type=float, default=output_scale,
                   help="multiply output lengths (default: %(default).4g)")
    g.add_argument("--min-prompt-tokens", type=int, default=min_prompt, help="clip prompt lengths below (default: %(default)s)")
    g.add_argument("--max-prompt-tokens", type=int, default=max_prompt, help="clip prompt lengths above (default: %(default)s)")
    g.add_argument("--min-output-tokens", type=int, default=min_output, help="clip output lengths below (default: %(default)s)")
    g.add_argument("--max-output-tokens", type=int, default=max_output, help="clip output lengths above (default: %(default)s)")
    g.add_argument("--steps-per-second", type=float, default=None,
                   help="--clock virtual only: trace seconds -> steps (default: 10); refused on the "
                        "wall and sim clocks, which keep the trace's seconds")
    g = p.add_argument_group("workload source (see docs/workloads.md)")
    g.add_argument("--request-rate", type=float, metavar="R",
                   help="Poisson arrivals at R requests/s (exponential gaps seeded by --seed) instead of "
                        "the trace's timestamps; lengths (and Mooncake hash_ids) still come from the "
                        "trace; inf = every request at t=0; --time-scale is then not applied "
                        "(default: the trace's own times)")
    g.add_argument("--lengths", choices=["sharegpt"],
                   help="no trace: draw prompt/output lengths from the shipped ShareGPT length table "
                        "(30,731 conversations) with arrivals from --request-rate (default inf)")
    g.add_argument("--num-requests", type=int, metavar="N",
                   help="requests drawn with --lengths (default: 1000)")
    g.add_argument("--strict", action="store_true",
                   help="refuse a Mooncake trace whose rows carry keys the format does not define (a "
                        "misspelt output_lenght); without it such rows are kept and every unknown key is "
                        "reported with its lines (BatchScope's JSONL format always refuses such a line)")


def add_slo_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("goodput: completed requests meeting both SLOs, per second")
    g.add_argument("--slo-ttft", type=float, metavar="MS", help="time-to-first-token SLO in milliseconds")
    g.add_argument("--slo-tpot", type=float, metavar="MS", help="time-per-output-token SLO in milliseconds")


def sized_knobs(a: argparse.Namespace) -> dict[str, int]:
    """``max_num_seqs``, ``max_num_batched_tokens`` and ``max_model_len`` of a run: each as a flag or
    a preset set it, else (None) the executor's default: the config's on the model executor (a
    small CPU run), vLLM's for the simulated model with ``--executor sim``
    (``engine.sim.config.sim_default_knobs``: 256 slots, 8,192 tokens per step, the length its
    config.json allows). Raises ConfigError for an unknown simulated model."""
    given = {k: getattr(a, k, None) for k in SIM_SIZED}
    if all(v is not None for v in given.values()):
        return given
    if getattr(a, "executor", Executor.MODEL) != Executor.SIM:
        defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig) if f.name in SIM_SIZED}
    else:
        try:
            defaults = sim_default_knobs(getattr(a, "sim_model", None) or a.model,
                                         enable_chunked_prefill=not a.no_chunked_prefill,
                                         max_model_len=given["max_model_len"])
        except ValueError as e:
            raise ConfigError(str(e)) from e
    return {k: defaults[k] if v is None else v for k, v in given.items()}


def engine_config(a: argparse.Namespace) -> EngineConfig:
    """EngineConfig from parsed arguments (a ``SimConfig`` with ``--executor sim``), read through
    :data:`CONFIG_FLAGS`; knobs no flag or preset set take the executor's defaults
    (:func:`sized_knobs`). Raises ConfigError with the knob and its limit, or the known names of a
    simulated model or device."""
    sim = getattr(a, "executor", Executor.MODEL) == Executor.SIM
    clock = Clock.SIM if sim and a.clock == Clock.WALL else a.clock   # real seconds mean nothing to a simulation
    knobs = {f.field: f.to_field(getattr(a, f.dest)) for f in ENGINE_FLAGS if f.field}
    knobs["clock"] = clock
    knobs.update(sized_knobs(a))
    sim_flags = {f.field: getattr(a, f.dest, None) for f in SIM_FLAGS if f.field != "executor"}
    if not sim:
        given = [CONFIG_FLAGS[k].option for k, v in sim_flags.items() if v is not None]
        if given or clock == "sim":
            raise ConfigError(f"{', '.join(given) or '--clock sim'} needs --executor sim")
        return EngineConfig(**knobs)
    if knobs["cuda_graphs"]:
        raise ConfigError("--cuda-graphs on needs --executor model (the simulated executor runs no forward pass)")
    given = {k: v for k, v in sim_flags.items() if v is not None}
    return SimConfig(**knobs, **{**given, "sim_model": given.get("sim_model") or a.model})
