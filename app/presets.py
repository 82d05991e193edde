"""``--preset demo|cpu|sim``: named sets of flag values for ``batchscope run`` and ``demo``.

A preset replaces the defaults of the flags it names; a flag given on the command line wins over
the preset (argparse's parser-level defaults, ``ArgumentParser.set_defaults``). Keys are argparse
destinations (``max_num_seqs`` for ``--max-num-seqs``).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    """One preset: what it is for (``--help`` text) and the flag values it sets."""

    name: str
    purpose: str
    values: dict = field(default_factory=dict)

    def describe(self) -> str:
        """'purpose: --flag value, ...' for ``--help`` (flags as the user types them)."""
        flags = ", ".join(_flag_text(k, v) for k, v in self.values.items())
        return f"{self.name}: {self.purpose} ({flags})"


_UNSET = {"limit": "all", "num_gpu_blocks": "auto"}     # what None means for a flag; else no clipping


def _flag_text(dest: str, value) -> str:
    flag = "--" + dest.replace("_", "-")
    if value is None:
        return f"{flag} {_UNSET.get(dest, 'none')}"
    return f"{flag} {value:.4g}" if isinstance(value, float) else f"{flag} {value}"


# The demo's sizing: SmolLM2-135M on 2 CPU cores fills its 16 slots within ~2 s and the 112 blocks
# (1,792 tokens) run out, so preemptions happen (see recordings/workloads/workload.py's demo workload).
DEMO_VALUES = dict(limit=200, time_scale=0.1, prompt_scale=1 / 12, min_prompt_tokens=8, max_prompt_tokens=96,
                   output_scale=0.25, min_output_tokens=8, max_output_tokens=64, max_num_seqs=16,
                   max_num_batched_tokens=256, num_gpu_blocks=112, executor="model")

# measured: `run --executor sim --sim-model llama-3.1-8b --sim-device h100 --trace
# AzureLLMInferenceTrace_code.csv --record OUT`, 35.0 s wall, 17.0 s user + 0.3 s sys, load 3.9-4.1 (README says the same)
AZURE_CODE_SIM_TIME = "about 35 s (17 s of CPU time, on a shared 2-core machine at load 4)"

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("demo", "the live demo's sizing, something to watch on a CPU: a queue builds up, the KV cache "
                   "fills and requests get preempted", DEMO_VALUES),
    Preset("cpu", "a headless replay that suits SmolLM2-135M on a few CPU cores: every request fits (no "
                  "rejections), a couple of minutes for 200 requests of an Azure trace",
           dict(limit=200, time_scale=0.1, prompt_scale=1 / 8, min_prompt_tokens=8, max_prompt_tokens=256,
                output_scale=0.25, min_output_tokens=4, max_output_tokens=64, max_num_seqs=32,
                max_num_batched_tokens=512, num_gpu_blocks=None, max_model_len=512, executor="model")),
    Preset("sim", "a production trace at full scale, no model loaded: the simulated executor (Llama-3.1-8B "
                  "on an H100, roofline step times), real lengths, the KV cache sized from the simulated "
                  "memory, arrivals at their real times; the whole Azure code trace (8,819 requests) takes "
                  f"{AZURE_CODE_SIM_TIME}, the conversation trace (19,366 requests over an hour, sparse: ~340k mostly "
                  "idle steps) about 5 minutes, or with --time-scale 0.1 (10x denser arrivals, a queue "
                  "builds) about 1 minute",
           dict(limit=None, time_scale=1.0, prompt_scale=1.0, min_prompt_tokens=4, max_prompt_tokens=None,
                output_scale=1.0, min_output_tokens=1, max_output_tokens=None, max_num_seqs=256,
                max_num_batched_tokens=8192, num_gpu_blocks=None, max_model_len=131072, executor="sim",
                sim_model="llama-3.1-8b", sim_device="h100")),
)}


def add_preset_arg(p: argparse.ArgumentParser) -> None:
    """The ``--preset`` flag, its help naming every preset's values."""
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="start from a named set of flag values; flags given on the command line win. "
                        + "; ".join(PRESETS[n].describe() for n in sorted(PRESETS)))


def preset_name(argv: list[str]) -> str | None:
    """The ``--preset NAME`` (or ``--preset=NAME``) in ``argv``, read before the real parse so the
    preset's values become the defaults (and show in ``--help``); None if absent or unknown (the
    real parser then reports a bad name)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset")
    name = pre.parse_known_args(argv)[0].preset
    return name if name in PRESETS else None


def apply_preset(p: argparse.ArgumentParser, name: str | None) -> None:
    """Make preset ``name``'s values the defaults of subcommand parser ``p`` (no-op for None);
    flags given on the command line still win."""
    if name is not None:
        p.set_defaults(**PRESETS[name].values)
