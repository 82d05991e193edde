"""``batchscope run``: replay a trace through the engine without a window, record it, summarize."""
from __future__ import annotations

import argparse
import contextlib
import gc
import re
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from tqdm import tqdm

from app.args import engine_config
from app.factory import build_engine
from app.usage import check_usage
from app.workload_setup import add_workload, load_workload, read_trace
from app.commands.suggest import replay_command
from engine.plural import plural
from engine.run_info import RunInfo
from engine.vocab import Clock, RequestStatus


USAGE = 2      # exit status of a bad command line (a flag, a file named on it); 1 = a runtime failure


def _fail(message: str, code: int = 1) -> int:
    from recordings.safe_text import visible
    print(f"batchscope: {visible(message)}", file=sys.stderr)
    return code


def run_headless(args: argparse.Namespace) -> int:
    """Check the inputs, load the model, replay ``args.trace`` with a progress bar, write
    ``args.record`` and print the summary. Returns the exit code: 0 done, 2 bad input (flags, a
    missing or malformed trace, an existing ``--record``), 1 a runtime failure or nothing could be
    served, 130 interrupted (the recording keeps every step so far)."""
    from engine.model.files import ModelLoadError
    from engine.sim.model_shapes import get_model_shape
    from app.privacy import writer_privacy_kwargs
    from recordings.file.open_reader import open_reader
    from recordings.errors import RecordingError
    from recordings.file.writer import RecordingWriter
    from recordings.workloads.rows import EmptyWorkload
    from recordings.workloads.traces import TraceFormatError

    out = Path(args.record)
    config = engine_config(args)
    try:
        check_usage(args)                       # app.cli.main checked it already; API callers too
        trace = read_trace(args)
    except (ValueError, OSError) as e:          # UsageError, TraceFormatError are ValueErrors
        return _fail(str(e), USAGE)
    try:
        if getattr(config, "sim_device", None):
            print(f"simulating {get_model_shape(config.sim_model).name} on {config.sim_device} (no "
                  "model is loaded)…", file=sys.stderr)
        else:
            print(f"loading model {config.model!r}…", file=sys.stderr)
        built = build_engine(config, recorder_factory=None)
        wl = load_workload(args, trace, built.tokenizer, built.vocab_size)
        if config.num_gpu_blocks is None:         # no --num-gpu-blocks: size the cache for the workload
            built = fit_kv_to_workload(built, wl.requests)
        built.run_info = built.run_info.replace(trace=wl.trace_info)
        synthetic = built.tokenizer is None
        if synthetic:
            built.run_info = built.run_info.replace(prompt_token_ids=(
                f"not stored: synthetic ids drawn from numpy default_rng({args.seed}) per request "
                "(rebuilt by the same trace, seed and scaling)"))
        writer = RecordingWriter(out, built.run_info, store_prompt_token_ids=not synthetic,
                                 **writer_privacy_kwargs(args))
    except EmptyWorkload as e:                  # every row refused by this engine: bad input
        return _fail(str(e), USAGE)
    except (ModelLoadError, TraceFormatError, RecordingError, OSError, RuntimeError, ValueError) as e:
        return _fail(str(e))
    eng = built.engine
    eng.recorder = writer
    rejected: list = []
    eng.on_finished = lambda r: rejected.append(_rejection(r)) if r.status == RequestStatus.FINISHED_ERROR else None
    add_workload(eng, wl.requests, clock=built.config.clock, steps_per_second=args.steps_per_second)
    gc.freeze()        # model and workload live for the whole run: out of the full GC passes
    if wl.notes:
        print("workload:", file=sys.stderr)
        for line in wl.notes:
            print(f"  - {line}", file=sys.stderr)
    interrupted = False
    violation: InvariantViolation | None = None
    try:
        with _terminate_as_interrupt():
            _replay(eng, len(wl.requests), built.config.clock)
    except KeyboardInterrupt:
        interrupted = True
    except InvariantViolation as e:
        violation = e
    finally:
        if violation is None and eng.recorder is not None and eng.has_pending_changes:
            eng.step(run_batch=False)            # arrivals and aborts after the last step
        try:
            writer.close()
        except RecordingError as e:      # reported below through recorder_error, or here
            if not eng.recorder_error:       # the last commit failed: name what the file holds
                last = writer.last_committed_step
                held = "; the file holds no step" if last < 0 else f"; the file holds steps 0..{last}"
                eng.recorder_error = f"recording stopped: {e}{held} (the engine was at step {eng.step_index - 1})"
    from recordings.metrics.serving import Slo
    reader = open_reader(out)
    print_report(reader, Slo(args.slo_ttft, args.slo_tpot), stopped_by=eng.recorder_error)
    unfinished = len(wl.requests) - eng.scheduler.num_finished
    if eng.recorder_error:       # every number printed is the file's, not the engine's
        print(f"batchscope: {eng.recorder_error}", file=sys.stderr)
        print(f"batchscope: the run stopped there: {out} holds {held_by_file(reader)}; the "
              "summary covers those only", file=sys.stderr)
    if interrupted:
        print(f"interrupted: {unfinished} of the workload's {len(wl.requests)} requests did not finish "
              f"(those not arrived yet included); the recording keeps every step so far")
    print(f"recording: {out}  (open it with: {replay_command(out)})")
    if violation is not None:
        print(f"batchscope: the run stopped: {violation}", file=sys.stderr)
        return 1
    if interrupted:
        return 130
    if eng.recorder_error:
        return 1                         # stopped when the recording failed
    return 1 if rejected and len(rejected) == len(wl.requests) else 0


@contextlib.contextmanager
def _terminate_as_interrupt():
    """While inside: SIGTERM (``kill PID``) stops the run like Ctrl+C, so the recording is closed
    and summarised as a run cut short (only kill -9 leaves it unclosed). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def fit_kv_to_workload(built, requests: list):
    """``built`` (an ``app.factory.BuiltEngine`` sized by memory, nothing added yet) with a KV
    pool of at most the blocks ``requests`` can hold at once: its ``max_num_seqs`` largest
    requests at full length (prompt + ``max_tokens``; those over ``max_model_len`` are refused
    and hold none), so a replay does not show a cache of thousands of blocks at 2% use. The engine is rebuilt on the same
    runner, whose pool of the first blocks it uses (a smaller pool is never asked for more).
    Unchanged with prefix caching on (cached-free blocks use the rest: a smaller pool would
    change the hit rate) or when the memory-sized pool is smaller already. Prints the choice to
    stderr."""
    import dataclasses

    from engine.engine import LLMEngine

    cfg = built.config
    bs = cfg.block_size
    lengths = (r.num_prompt_tokens + r.max_tokens for r in requests)
    sizes = sorted((-(-n // bs) for n in lengths if n <= cfg.max_model_len), reverse=True)
    need = max(1, sum(sizes[:cfg.max_num_seqs]))
    if cfg.enable_prefix_caching or not requests or need >= cfg.num_gpu_blocks:
        return built
    full = cfg.max_num_seqs * -(-cfg.max_model_len // bs)
    limit = ("max_num_seqs x max_model_len" if cfg.num_gpu_blocks >= full else "free memory")
    print(f"KV cache sized for the workload: {plural(need, 'block')} of {plural(bs, 'token')} (its {cfg.max_num_seqs} "
          f"largest requests at full length; {limit} would give {cfg.num_gpu_blocks:,}; choose with "
          "--num-gpu-blocks)", file=sys.stderr)
    config = cfg.replace(num_gpu_blocks=need)
    old = built.engine
    engine = LLMEngine(config, old.runner, need, tokenizer=old.tokenizer, eos_token_id=old.eos_token_id,
                       recorder=old.recorder)
    return dataclasses.replace(built, engine=engine, config=config,
                               run_info=built.run_info.replace(config=config.to_dict()))


class InvariantViolation(Exception):
    """``--check-invariants`` found a violated invariant; the message names the step and it."""


def _checked_step(eng, checker):
    """``eng.step()``; with ``--check-invariants`` (``checker``, a ``recordings.check.invariants.StateChecker``)
    also the state-level checks that ``batchscope check`` runs on the recording. Raises
    :class:`InvariantViolation` naming the step and the invariant (the engine's own checks
    raise ``AssertionError`` with the invariant's name)."""
    if checker is None:
        return eng.step()
    before = eng.step_index
    try:
        rec = eng.step()
    except AssertionError as e:
        step = eng.step_index - 1 if eng.step_index > before else before
        raise InvariantViolation(f"invariant violated at step {step}: {e}") from e
    _stop_on(checker.check_step(eng.state(), rec))
    return rec


def _stop_on(problems: list) -> None:
    """Raise :class:`InvariantViolation` listing ``problems`` (``recordings.check.invariants.Problem``), if any."""
    if problems:
        raise InvariantViolation("invariant violated at " + "; ".join(map(str, problems)))


def held_by_file(reader) -> str:
    """What the recording open in ``reader`` holds, from its rows: ``"steps 0..K and N
    requests"`` (``"no step and N requests"``)."""
    last = reader.latest_step()
    (num_requests,), = reader.execute("SELECT count(*) FROM requests")
    steps = "no step" if last < 0 else f"steps 0..{last:,}"
    return f"{steps} and {num_requests:,} request{'s' if num_requests != 1 else ''}"


def _replay(eng, total: int, clock: str) -> None:
    """Step until every request finished, sleeping through idle gaps under the wall clock; stop
    at once when the recording fails (``eng.recorder_error``: a full disk), so nothing runs that
    the file cannot show. Raises :class:`InvariantViolation` under ``check_invariants``."""
    checker = None
    if eng.config.check_invariants:
        from recordings.check.invariants import StateChecker
        checker = StateChecker(eng.config.to_dict() | {"num_gpu_blocks": eng.num_gpu_blocks})
    with tqdm(disable=None, total=total, unit="req", desc="replaying", dynamic_ncols=True) as bar:
        done = 0
        while eng.has_unfinished:
            eng.admit_due()
            if eng.recorder_error or eng.poll_recorder():     # an arrival's write failed, or a commit
                return
            s = eng.scheduler
            if not (s.waiting or s.running) and clock == Clock.WALL and eng.next_arrival_time is not None:
                time.sleep(max(0.0, min(0.05, eng.next_arrival_time - eng.now())))
                continue
            rec = _checked_step(eng, checker)
            if rec.num_finished != done:
                bar.update(rec.num_finished - done)
                done = rec.num_finished
            bar.set_postfix(step=f"{rec.step:,}", running=rec.num_running, waiting=f"{rec.num_waiting:,}",
                            kv=f"{rec.kv_cache_usage:.0%}", refresh=False)
    if checker is not None and eng.step_index:              # G6: every request finished
        _stop_on(checker.check_drained(eng.state(), rec))


def rejection_report(rejected: list, total: int, max_kinds: int = 6) -> str:
    """Why requests were refused, one line per reason (the error with its numbers as ranges over
    the requests that got it, e.g. ``12 x prompt (2110–7436) + max_tokens (3–48) = 2113–7484 tokens
    exceeds max_model_len 2048``), most frequent first, with the first request ids, then the flags
    that help. ``rejected`` are finished ``engine.request.Request`` objects with an ``error``."""
    groups: dict[str, list] = {}
    for r in rejected:
        groups.setdefault(re.sub(_NUMBER, "N", r.error or "unknown error"), []).append(r)
    ordered = sorted(groups.values(), key=len, reverse=True)
    lines = [f"{len(rejected)} of {total} requests failed or were rejected at admission:"]
    for group in ordered[:max_kinds]:
        reason = _numbers_as_ranges([r.error or "unknown error" for r in group])
        if not re.search(r"\d", reason):        # the reason names no lengths: give them
            reason += (f" (prompts {_span([r.num_prompt_tokens for r in group])}, max_tokens "
                       f"{_span([r.sampling_params.max_tokens for r in group])} tokens)")
        ids = ", ".join(r.request_id for r in group[:3]) + (", ..." if len(group) > 3 else "")
        lines.append(f"  {len(group)} x {reason}  [{ids}]")
    if len(ordered) > max_kinds:
        rest = ordered[max_kinds:]
        lines.append(f"  ... and {sum(map(len, rest))} requests for {len(rest)} other reasons")
    if any(re.search(r"max_model_len|KV blocks|whole cache", r.error or "") for r in rejected):
        lines.append("  (shrink requests with --prompt-scale / --max-prompt-tokens / --max-output-tokens, or "
                     "raise --max-model-len / --num-gpu-blocks; --preset cpu (this CPU) or --preset sim "
                     "(a simulated GPU) size a trace to fit)")
    return "\n".join(lines)


def _rejection(req):
    """What :func:`rejection_report` reads of a finished ``engine.request.Request`` (not its tokens)."""
    from types import SimpleNamespace

    return SimpleNamespace(request_id=req.request_id, error=req.error, num_prompt_tokens=req.num_prompt_tokens,
                           sampling_params=SimpleNamespace(max_tokens=req.sampling_params.max_tokens))


def recorded_rejections(reader) -> list:
    """The requests of a recording that finished with an error (rejected at admission or failed
    in a step), as the objects :func:`rejection_report` reads, in arrival order."""
    from types import SimpleNamespace

    return [SimpleNamespace(request_id=rid, error=error, num_prompt_tokens=n,
                            sampling_params=SimpleNamespace(max_tokens=m))
            for rid, error, n, m in reader.execute(
                "SELECT request_id, error, num_prompt_tokens, max_tokens FROM requests "
                "WHERE status = 'FINISHED_ERROR' ORDER BY rowid")]


_NUMBER = r"\d+(?:\.\d+)?"      # an integer or a decimal ("predicted TTFT 2.05 s")


def _numbers_as_ranges(texts: list[str]) -> str:
    """``texts`` of one template (equal but for their numbers): the template with each number
    that differs between them written as its ``min–max`` range (as written), the others as they are."""
    parts = [re.split(f"({_NUMBER})", t) for t in texts]
    out = []
    for i, piece in enumerate(parts[0]):
        if i % 2:                                 # a number
            words = sorted({p[i] for p in parts}, key=float)
            out.append(words[0] if len(words) == 1 else f"{words[0]}–{words[-1]}")
        else:
            out.append(piece)
    return "".join(out)


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def _count(n, word: str) -> str:
    """``engine.plural.plural`` for a count a recording holds; one it lacks (None) shows as is."""
    return plural(n, word) if isinstance(n, int) else f"{n} {word}s"


def describe_run(info: RunInfo) -> list[str]:
    """Lines about a recording's provenance: model, device, trace and how it was scaled."""
    cfg = info.config
    model = info.model or {}
    if not isinstance(model, Mapping):              # a bare name (recordings written by tests, scripts)
        model = {"name": model}
    lines = [f"model: {model.get('name', '?')} on {info.device or '?'} ({info.dtype or '?'}); "
             f"max_num_seqs {cfg.get('max_num_seqs')}, max_num_batched_tokens {cfg.get('max_num_batched_tokens')}, "
             f"{_count(cfg.get('num_gpu_blocks'), 'KV block')} of {_count(cfg.get('block_size'), 'token')}, "
             f"clock {cfg.get('clock')}"]
    trace = info.trace or {}
    if trace:
        lines.append(f"trace: {trace.get('name')} ({_count(trace.get('num_rows'), 'request')}, "
                     f"{_count(trace.get('num_malformed_rows', 0), 'malformed row')} skipped)")
        lines += [f"  - {n}" for n in trace.get("scaling", [])]
        unknown = trace.get("unknown_keys") or {}
        if unknown:
            lines.append("  - unknown keys in the trace's rows, ignored: " + ", ".join(
                f"{ascii(key)} ({v.get('num_rows')} row{'' if v.get('num_rows') == 1 else 's'})"
                for key, v in unknown.items()))
        sharing = trace.get("prefix_sharing")
        if sharing:
            lines.append(f"ideal prefix-cache hit rate (infinite cache, arrival order): "
                         f"{_rate(sharing['trace_ideal_hit_rate'])} of the trace's "
                         f"{sharing['trace_block_tokens']}-token hash blocks; "
                         f"{_rate(sharing['workload_ideal_hit_rate'])} of this workload's prompt tokens "
                         f"in {sharing['block_size']}-token blocks")
    return lines


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def print_report(reader, slo=None, stopped_by: str | None = None) -> None:
    """A recording's report, section by section: whether it is complete (``stopped_by``: why the
    recording stopped, when the caller knows, e.g. a full disk), the metrics
    (``recordings.metrics.summary_lines``, with goodput under ``slo``, a
    ``recordings.metrics.serving.Slo``), then the run's provenance; recorded names and reasons
    are printed with control and bidi characters escaped (``recordings.safe_text.visible``)."""
    from recordings.file.completeness import completeness
    from recordings.safe_text import visible
    from recordings.metrics.summary_lines import summary_lines

    rejected = recorded_rejections(reader)
    (total,), = reader.execute("SELECT count(*) FROM requests")
    lines = [*completeness(reader).format_lines(stopped_by), *summary_lines(reader, slo),
             *(rejection_report(rejected, total).splitlines() if rejected else ()),
             *describe_run(reader.run_info())]
    if reader.run_info().text_stored is False:
        lines.append("text: not stored (recorded with --no-text: token ids and lengths only)")
    for line in lines:                  # no terminal escapes, no RTL tricks
        print(visible(line))


def print_summary(path: str, slo_ttft: float | None = None, slo_tpot: float | None = None,
                  as_json: bool = False) -> int:
    """``batchscope summary FILE [--slo-ttft MS] [--slo-tpot MS] [--json]``: metrics recomputed
    from a recording's rows, and its provenance (``as_json``: as JSON,
    ``recordings.export.summary_json``; the SLOs apply to the text report). A damaged file is
    said first (``WARNING: ...``, the file's one damage analysis, on stderr with ``--json``).
    Returns 2 for a bad SLO, 1 for a bad file."""
    from recordings.file.open_reader import open_reader
    from recordings.errors import RecordingError
    from recordings.metrics.serving import Slo
    try:
        slo = Slo(slo_ttft, slo_tpot)
    except ValueError as e:
        print(f"batchscope: {e}", file=sys.stderr)
        return 2
    from app.commands.recover import damage_report, open_recording
    from recordings.safe_text import visible
    try:
        damage = damage_report(path)     # the analysis check, recover and the window show
        if damage.is_damaged:            # said first; the metrics then cover what reads
            print(visible(f"WARNING: {damage.summary()}", keep_newlines=False),
                  file=sys.stderr if as_json else sys.stdout)
        reader = open_recording(path, progress=False) if damage.is_damaged else open_reader(path)
        if as_json:
            from recordings.export.summary_json import summary_json
            print(summary_json(reader))
        else:
            print_report(reader, slo)
    except RecordingError as e:
        return _fail(str(e))
    return 0
