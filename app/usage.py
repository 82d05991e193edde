"""Checking a ``batchscope`` command line before anything slow happens (no torch, transformers or Qt
is imported here): engine knobs, workload flags, and the files the command line names."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
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
        if command == "fit":
            check_output(args.output, " (--force overwrites)", overwrite=args.force)


def _check_engine_run(args: argparse.Namespace) -> None:
    from app.args import engine_config

    if args.trace is not None:                  # files first: no import needed
        _need_file(args.trace, "trace")
    if getattr(args, "sim_cost", None):
        _need_file(args.sim_cost, "--sim-cost")
    if args.record is not None:
        check_output(args.record, RECORD_EXISTS, recording=True)
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


MIN_FREE_BYTES = 64 * 2**20    # a rough floor for any output: a short recording, an export
RECORD_EXISTS = "; choose a new --record path (recordings are never overwritten)"


def check_output(path: str | os.PathLike, hint: str = "", *, overwrite: bool = False,
                 make_folder: bool = False, min_free_bytes: int = MIN_FREE_BYTES,
                 recording: bool = False) -> None:
    """Check an output file before anything heavy runs, with the same messages for every command
    (``run --record``, ``recover``, ``export``, ``fit``, the live window's recording,
    ``compare --report`` / ``--out``). Raises :class:`UsageError` when ``path`` exists (unless
    ``overwrite``; ``hint`` ends that message) or is a folder, when its folder does not exist
    (``make_folder``: the nearest existing folder above it is checked instead, as the command
    creates the rest), when no file can be created there (tried: a folder that is read-only, on
    a read-only disk, or not ours), or when that disk has less than ``min_free_bytes`` free
    (a rough check: the output may still outgrow it; the recorder then stops cleanly).
    ``recording``: ``path`` is an SQLite recording, and its write-ahead log ``PATH-wal``, left
    by an earlier run, counts as the file existing (the recorder refuses to start over it)."""
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"cannot write {out}: it is a folder")
    if out.exists() and not overwrite:
        raise UsageError(f"{out} exists{hint}")
    wal = Path(f"{out}-wal")
    if recording and wal.exists() and not overwrite:
        raise UsageError(f"{wal} exists: the write-ahead log of an earlier recording at {out.name} (left "
                         f"by a run that was killed, or whose {out.name} was deleted){hint}; if that "
                         f"recording is not wanted, delete {wal.name} and {out.name}-shm")
    if out.exists() and not os.access(out, os.W_OK):
        raise UsageError(f"cannot write {out}: the file is read-only")
    _check_folder(out, out.parent, make_folder, min_free_bytes)


def check_output_folder(path: str | os.PathLike, min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """An output folder the command creates or fills (``compare --out``): :func:`check_output`'s
    checks and messages for the folder (or, while it does not exist, the nearest one above)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"cannot write {out}: it is a file, not a folder")
    _check_folder(out, out, True, min_free_bytes)


def _check_folder(out: Path, folder: Path, make_folder: bool, min_free_bytes: int) -> None:
    """``out`` goes in ``folder``: it exists (``make_folder``: its nearest existing ancestor is
    checked instead), a file can be created in it, its disk has ``min_free_bytes`` free."""
    if make_folder:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"cannot write {out}: folder {folder} does not exist")
    problem = _cannot_create_in(folder)
    if problem:
        raise UsageError(f"cannot write {out}: {problem}")
    free = shutil.disk_usage(folder).free
    if free < min_free_bytes:
        raise UsageError(f"cannot write {out}: only {free / 2**20:,.1f} MiB free on the disk of {folder} "
                         f"(at least {min_free_bytes / 2**20:,.0f} MiB needed)")


def _cannot_create_in(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (None when one can): tried with a temporary file,
    removed at once (permission bits alone do not tell: root, read-only mounts, ACLs)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".batchscope-probe-", dir=folder)
    except OSError as e:
        return f"folder {folder} is not writable ({e.strerror or e})"
    os.close(fd)
    os.unlink(probe)
    return None


def _need_file(path: str, what: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} file not found: {p}" if not p.exists() else f"{what} {p} is not a file")
