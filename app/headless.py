"""``batchscope run``: replay a trace through the engine without a window, record it, summarize."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

from app.cli import engine_config
from app.factory import build_engine
from app.workload_setup import add_workload, load_workload


def run_headless(args: argparse.Namespace) -> int:
    """Load the model, replay ``args.trace`` with a progress bar, write ``args.record``, print the
    summary. Returns the process exit code (1 when the model or trace cannot be loaded)."""
    from engine.model_loader import ModelLoadError
    from recordings import Reader, RecordingWriter, summarize
    from recordings.traces import TraceFormatError

    out = Path(args.record)
    if out.exists():
        print(f"batchscope: {out} exists; choose a new --record path (recordings are never overwritten)",
              file=sys.stderr)
        return 1
    config = engine_config(args)
    try:
        print(f"loading model {config.model!r}…", file=sys.stderr)
        built = build_engine(config, recorder_factory=None)
        wl = load_workload(args, built.tokenizer, built.vocab_size)
    except (ModelLoadError, TraceFormatError, OSError, RuntimeError) as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 1
    built.run_info["trace"] = wl.trace_info
    writer = RecordingWriter(out, built.run_info)
    eng = built.engine
    eng.recorder = writer
    add_workload(eng, wl.requests, clock=built.config.clock, steps_per_second=args.steps_per_second)
    for line in wl.notes:
        print(f"  {line}", file=sys.stderr)
    total = len(wl.requests)
    try:
        with tqdm(total=total, unit="req", desc="replaying", dynamic_ncols=True) as bar:
            done = 0
            while eng.has_unfinished:
                eng.admit_due()
                s = eng.scheduler
                if not (s.waiting or s.running) and built.config.clock == "wall" and eng.next_arrival_time:
                    time.sleep(max(0.0, min(0.05, eng.next_arrival_time - eng.now())))
                    continue
                rec = eng.step()
                if rec.num_finished != done:
                    bar.update(rec.num_finished - done)
                    done = rec.num_finished
                bar.set_postfix(step=rec.step, running=rec.num_running, waiting=rec.num_waiting,
                                kv=f"{rec.kv_cache_usage:.0%}", refresh=False)
    except KeyboardInterrupt:
        print("\ninterrupted: the recording keeps every step so far", file=sys.stderr)
    finally:
        writer.close()
    print(summarize(Reader(out)).format_table())
    if wl.notes:
        print("scaled to fit this machine:")
        for line in wl.notes:
            print(f"  - {line}")
    print(f"recording: {out}  (open it with: batchscope replay {out})")
    return 0


def print_summary(path: str) -> int:
    """``batchscope summary FILE``: metrics recomputed from a recording's rows."""
    from recordings import Reader, RecordingError, summarize
    try:
        print(summarize(Reader(path)).format_table())
    except RecordingError as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 1
    return 0
