"""``batchscope export REC.sqlite --format perfetto|csv|json|mooncake -o OUT``: the command line
of ``recordings.export`` (argument checks, overwrite guard, progress bar, report).

Importing this module is cheap (argparse only): the exporters are imported when the command runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

FORMATS = ("perfetto", "csv", "json", "mooncake")
HELP = ("export a recording: perfetto = Chrome/Perfetto trace JSON (open in ui.perfetto.dev); "
        "csv = per-request and per-step CSV; json = the run's summary; mooncake = the recorded "
        "workload as a Mooncake JSONL trace (replay it with 'batchscope run --trace OUT')")


def add_export_parser(sub) -> argparse.ArgumentParser:
    """Add the ``export`` subcommand to ``sub`` (the CLI's subparsers); returns its parser."""
    p = sub.add_parser("export", help=HELP, description=HELP + ". See docs/export.md.")
    p.add_argument("recording", help="a recording (.sqlite)")
    p.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the file to write; for csv a folder (OUT/requests.csv, OUT/steps.csv) or "
                        "a prefix (OUT-requests.csv, OUT-steps.csv)")
    p.add_argument("--force", action="store_true", help="overwrite output files that exist")
    p.add_argument("--us-per-step", type=float, default=1000.0, metavar="US",
                   help="perfetto, virtual-clock recordings: microseconds drawn per step "
                        "(default: %(default)g)")
    p.add_argument("--steps-per-second", type=float, default=10.0,
                   help="mooncake, virtual-clock recordings: steps per second of trace time, as "
                        "'batchscope run --steps-per-second' (default: %(default)g)")
    return p


def _outputs(args: argparse.Namespace) -> list[Path]:
    if args.format == "csv":
        from recordings.export.tables import csv_paths
        return list(csv_paths(args.output))
    return [Path(args.output)]


def _usage(message: str) -> int:
    print(f"batchscope export: {message}", file=sys.stderr)
    return 2


def run_export(args: argparse.Namespace) -> int:
    """Run ``batchscope export``. Returns 0 done, 2 bad arguments (an output that exists
    without ``--force``, the recording as output, a bad number), 1 the recording cannot be
    read or the output cannot be written."""
    if not args.us_per_step > 0:
        return _usage(f"--us-per-step must be > 0, got {args.us_per_step:g}")
    if not args.steps_per_second > 0:
        return _usage(f"--steps-per-second must be > 0, got {args.steps_per_second:g}")
    outputs = _outputs(args)
    source = Path(args.recording).resolve()
    if any(out.resolve() == source for out in outputs):
        return _usage(f"{args.output} is the recording itself; choose another -o")
    from app.usage import UsageError, check_output
    try:
        for out in outputs:     # csv into a folder: export_csv creates it
            check_output(out, " (--force overwrites)", overwrite=args.force, make_folder=args.format == "csv")
    except UsageError as e:
        return _usage(str(e))
    from app.privacy import no_wider_than
    from recordings.file.open_reader import open_reader
    from recordings.errors import RecordingError
    try:
        with open_reader(args.recording) as reader, no_wider_than(args.recording):  # prompts stay private
            lines = _export(reader, args)
    except (RecordingError, ValueError) as e:
        print(f"batchscope export: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"batchscope export: cannot write {e.filename or args.output}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def _export(reader, args: argparse.Namespace) -> list[str]:
    """Write the export; the lines of the report."""
    from tqdm import tqdm

    if args.format == "json":
        from recordings.export.summary_json import export_json
        path = export_json(reader, args.output)
        return [f"wrote {path} ({_size(path)})"]
    if args.format == "mooncake":
        from recordings.export.mooncake import export_mooncake
        (total,), = reader.execute("SELECT count(*) FROM requests")
        with tqdm(disable=None, total=total, unit="req", desc="exporting", delay=0.5, file=sys.stderr) as bar:
            res = export_mooncake(reader, args.output, steps_per_second=args.steps_per_second,
                                  progress=bar.update)
        return [f"wrote {res.path} ({res.num_rows} requests, {res.num_with_hash_ids} with hash_ids, "
                f"{_size(res.path)}); replay it with: batchscope run --trace {res.path}",
                *(f"  - {n}" for n in res.notes)]
    total = reader.latest_step() + 1
    with tqdm(disable=None, total=total, unit="step", desc="exporting", delay=0.5, file=sys.stderr) as bar:
        if args.format == "csv":
            from recordings.export.tables import export_csv
            req, n_req, steps, n_steps = export_csv(reader, args.output, progress=bar.update)
            return [f"wrote {req} ({n_req} requests, {_size(req)}) and {steps} ({n_steps} steps, "
                    f"{_size(steps)})"]
        from recordings.export.perfetto import export_perfetto
        res = export_perfetto(reader, args.output, us_per_step=args.us_per_step, progress=bar.update)
    lines = [f"wrote {res.path} ({res.num_events} events over {res.num_steps} steps, {_size(res.path)}; "
             f"ts in us, {res.timebase.description}); open it in https://ui.perfetto.dev"]
    lines += [f"  {process:<12} {ph}  {n:>8}" for (process, ph), n in res.counts.items()]
    return lines


def _size(path: Path) -> str:
    n = Path(path).stat().st_size
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"
