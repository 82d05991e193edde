"""Checking a ``batchscope`` command line before anything slow happens (no torch, transformers or Qt
is imported here): engine knobs, workload flags, and the files the command line names."""
from __future__ import annotations

import argparse
from pathlib import Path
from engine.vocab import Clock


class UsageError(ValueError):
    """A bad command line (exit status 2): a flag value out of range, or a file named on the
    command line that is missing or must not exist yet. The message names the flag or path."""


def check_usage(args: argparse.Namespace) -> None:
    """Check the parsed arguments of any subcommand. Raises ``engine.config.ConfigError`` for an
    engine knob out of range (naming the knob and its limit) and :class:`UsageError` for the rest."""
    command = args.command
    _check_slo(args)
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be >= 1, got {threads}")
    if command in ("run", "demo"):
        _check_engine_run(args)
    elif command in ("replay", "summary", "check", "fit"):
        _need_file(args.recording, "recording")
        for path in getattr(args, "check", None) or []:
            _need_file(path, "--check recording")
        if command == "fit" and not args.force:
            _new_file(args.output, " (--force overwrites)")
        elif command == "fit":
            _writable_folder(Path(args.output))


def _check_engine_run(args: argparse.Namespace) -> None:
    from app.args import engine_config

    if args.trace is not None:                  # files first: no import needed
        _need_file(args.trace, "trace")
    if getattr(args, "sim_cost", None):
        _need_file(args.sim_cost, "--sim-cost")
    if args.record is not None:
        _new_file(args.record, "; choose a new --record path (recordings are never overwritten)")
    config = engine_config(args)                # ConfigError names the knob
    _check_device(config, args.device)
    if getattr(args, "steps_per_second", None) is not None and config.clock != Clock.VIRTUAL:
        raise UsageError(f"--steps-per-second maps trace seconds to steps on the virtual clock only; "
                         f"this run's clock is {config.clock!r}, which keeps the trace's seconds "
                         f"(add --clock virtual, or drop --steps-per-second)")
    from app.workload_setup import check_args   # imports numpy and recordings: after the cheap checks

    try:
        check_args(args)
    except ValueError as e:
        raise UsageError(str(e)) from e


def _check_device(config, device: str) -> None:
    """``--device`` before anything loads (the window would open first, then fail): the simulated
    executor has its own ``--sim-device``; CUDA must be there when asked for."""
    if getattr(config, "executor", "model") == "sim":
        if device != "auto":
            raise UsageError(f"--device {device} is for --executor model; a simulated run's device is "
                             f"--sim-device (now {config.sim_device!r})")
        return
    if device.startswith("cuda"):
        from app.factory import resolve_device
        try:
            resolve_device(device)
        except RuntimeError as e:
            raise UsageError(str(e)) from e


def _check_slo(args: argparse.Namespace) -> None:
    """``--slo-ttft`` / ``--slo-tpot`` (run, summary, compare): positive milliseconds."""
    ttft, tpot = getattr(args, "slo_ttft", None), getattr(args, "slo_tpot", None)
    if ttft is None and tpot is None:
        return
    from recordings.metrics.serving import Slo
    try:
        Slo(ttft, tpot)
    except ValueError as e:
        raise UsageError(str(e)) from e


def _new_file(path: str, hint: str) -> None:
    """An output the command must create: refused (:class:`UsageError`, ``hint`` ending the
    message) if it exists, or if its folder does not."""
    out = Path(path)
    if out.exists():
        raise UsageError(f"{out} exists{hint}")
    _writable_folder(out)


def _writable_folder(out: Path) -> None:
    if not out.parent.is_dir():
        raise UsageError(f"cannot write {out}: folder {out.parent} does not exist")


def _need_file(path: str, what: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} file not found: {p}" if not p.exists() else f"{what} {p} is not a file")
