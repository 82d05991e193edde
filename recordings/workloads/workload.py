"""Turn trace rows (arrival time + token counts) into requests an engine can run.

A trace gives only counts, so prompts are synthesised: windows of the shipped English corpus cut
to the exact token count with the model's tokenizer, or random token ids when there is none.
Rows with Mooncake ``hash_ids`` get prompts made of shared token blocks instead (equal ids, equal
tokens; ``recordings.workloads.prefix_blocks``), so a replay shows the trace's prefix reuse.
Rows of BatchScope's JSONL workload format (``recordings.workloads.jsonl``) may give the prompt as
text or token ids, and sampling, priority and request id: those are used as written.
Lengths and times can be scaled and clipped to fit a small model on a CPU; every such change is
written down in plain words in ``Workload.scaling_notes``. No torch: the tokenizer is passed in.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from engine.plural import plural
from recordings.workloads.deferred_prompts import (CorpusWindowPrompts, HashIdPrompts, PromptMaker,
                                                   RandomIdPrompts)
from recordings.workloads.prefix_blocks import PrefixSharing, SharedPrefixPrompts
from recordings.workloads.traces import TraceRow, load_azure_csv

DATA_DIR = Path(__file__).resolve().parent / "data"
DEMO_TRACE = DATA_DIR / "azure_conv_demo.csv"
CORPUS_PATH = DATA_DIR / "corpus.txt"
RANDOM_TOKEN_RANGE = (100, 40000)  # inclusive, as random.randint draws them (the bench's choice)


class Tokenizer(Protocol):
    """What the workload needs from a tokenizer (a Hugging Face tokenizer fits)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


class WorkloadRequest:
    """One request to submit: at ``arrival_s`` seconds after the workload starts, with a prompt of
    ``num_prompt_tokens`` tokens, asking for at most ``max_tokens`` output tokens.
    ``source_line`` is the trace file line it came from. ``ignore_eos`` (trace lengths are exact),
    ``priority`` and ``sampling`` (other ``engine.request.SamplingParams`` keywords: temperature,
    top_p, top_k, seed, n) come from a JSONL workload row; traces leave the defaults.

    The prompt is either given (``prompt_token_ids``, authoritative, and ``prompt_text``, their
    decoding or None without a tokenizer) or deferred: ``maker`` (a
    ``recordings.workloads.deferred_prompts.PromptMaker``) makes it from ``recipe`` when it is
    asked for (:meth:`make_prompt`, what the engine calls when the request is admitted:
    ``engine.request.DeferredPrompt``), the same ids every time and nothing kept, so a workload
    holds a few numbers per request instead of its prompts. ``prompt_token_ids`` and
    ``prompt_text`` read the same either way (a deferred prompt is made on each read). Ids are a
    list, or a compact ``array('i')`` for synthetic ids (4 bytes per token). Raises ``ValueError``
    when neither or both of ``prompt_token_ids`` and ``maker`` are given.
    """

    __slots__ = ("request_id", "arrival_s", "max_tokens", "source_line", "ignore_eos", "priority",
                 "sampling", "num_prompt_tokens", "_ids", "_text", "_maker", "_recipe")

    def __init__(self, request_id: str, arrival_s: float, prompt_text: str | None = None,
                 prompt_token_ids: Sequence[int] | None = None, max_tokens: int = 16, source_line: int = 0,
                 ignore_eos: bool = True, priority: int = 0, sampling: dict | None = None, *,
                 maker: PromptMaker | None = None, recipe=None, num_prompt_tokens: int | None = None) -> None:
        if (prompt_token_ids is None) == (maker is None):
            raise ValueError(f"request {request_id!r}: give prompt_token_ids or a deferred prompt "
                             f"(maker and recipe), exactly one")
        if maker is not None and num_prompt_tokens is None:
            raise ValueError(f"request {request_id!r}: a deferred prompt needs its num_prompt_tokens")
        self.request_id, self.arrival_s, self.max_tokens = request_id, arrival_s, max_tokens
        self.source_line, self.ignore_eos, self.priority = source_line, ignore_eos, priority
        self.sampling = {} if sampling is None else sampling
        self._ids, self._text, self._maker, self._recipe = prompt_token_ids, prompt_text, maker, recipe
        self.num_prompt_tokens = len(prompt_token_ids) if prompt_token_ids is not None else num_prompt_tokens

    @property
    def is_deferred(self) -> bool:
        """True when the prompt is made on demand (not held)."""
        return self._maker is not None

    @property
    def ids_only(self) -> bool:
        """True when the prompt is made on demand and has no text: the engine makes its ids on
        first use, not at arrival (``engine.request.DeferredPrompt``)."""
        return self._maker is not None and not self._maker.makes_text

    def make_prompt(self) -> tuple[Sequence[int], str | None]:
        """(prompt token ids, prompt text or None): the given ones, or made now from the recipe."""
        if self._maker is None:
            return self._ids, self._text
        return self._maker.make(self._recipe)

    @property
    def prompt_token_ids(self) -> Sequence[int]:
        return self._ids if self._maker is None else self.make_prompt()[0]

    @property
    def prompt_text(self) -> str | None:
        return self._text if self._maker is None else self.make_prompt()[1]

    def _key(self) -> tuple:
        ids, text = self.make_prompt()
        return (self.request_id, self.arrival_s, self.max_tokens, self.source_line, self.ignore_eos,
                self.priority, self.sampling, list(ids), text)

    def __eq__(self, other: object) -> bool:
        """Equal requests: the same fields and the same prompt (given or made: deferred prompts
        are compared by the ids they make)."""
        if not isinstance(other, WorkloadRequest):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]   # mutable sampling dict, as the dataclass had

    def __repr__(self) -> str:
        how = "deferred" if self.is_deferred else "given"
        return (f"WorkloadRequest({self.request_id!r}, arrival_s={self.arrival_s!r}, "
                f"num_prompt_tokens={self.num_prompt_tokens}, max_tokens={self.max_tokens}, prompt {how})")


@dataclass
class Workload:
    """Requests in arrival order, plain-words notes on every scaling or clipping applied, how
    the prompts share prefixes (``None`` when no row had hash ids), and the rows that could not
    be served (``"line N: why"``)."""

    requests: list[WorkloadRequest]
    scaling_notes: list[str] = field(default_factory=list)
    prefix_sharing: PrefixSharing | None = None
    skipped_rows: list[str] = field(default_factory=list)   # "line N: why" per row not served

    @property
    def num_prompt_tokens(self) -> int:
        return sum(r.num_prompt_tokens for r in self.requests)

    @property
    def num_output_tokens(self) -> int:
        """Total of ``max_tokens`` (what a run with EOS ignored generates)."""
        return sum(r.max_tokens for r in self.requests)

    @property
    def duration_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return self.requests[-1].arrival_s - self.requests[0].arrival_s if self.requests else 0.0


def build_workload(rows: Sequence[TraceRow], tokenizer: Tokenizer | None, *,
                   time_scale: float = 1.0, max_prompt_tokens: int | None = None,
                   max_output_tokens: int | None = None, prompt_scale: float = 1.0,
                   output_scale: float = 1.0, min_prompt_tokens: int = 4,
                   min_output_tokens: int = 1, corpus: str | None = None,
                   seed: int = 0, vocab_size: int | None = None, block_size: int = 16) -> Workload:
    """Build one request per row, in row order.

    Arrival = ``row.arrival_s * time_scale`` (below 1 compresses time). Prompt length =
    ``round(num_prompt_tokens * prompt_scale)`` clamped to ``[min_prompt_tokens, max_prompt_tokens]``;
    ``max_tokens`` = ``round(num_output_tokens * output_scale)`` clamped to
    ``[min_output_tokens, max_output_tokens]`` (None: no upper bound). With a tokenizer, each prompt
    is a window of ``corpus`` (default: the shipped corpus) starting at a sentence picked by
    ``random.Random(seed)``, encoded without special tokens, cut to exactly that many ids and decoded
    back into ``prompt_text``. Without one, prompt ids are uniform draws in [100, 40000] from
    ``numpy.random.default_rng(seed)`` (capped below ``vocab_size`` when given, for small models),
    request after request, as compact ``array('i')``s.

    Synthesised prompts are deferred (:class:`WorkloadRequest`,
    ``recordings.workloads.deferred_prompts``): the workload keeps each one's recipe (a generator
    state, a corpus offset, the row's hash ids) and the ids are made when the engine admits the
    request, equal to the ids an eager build gives, so memory follows the requests in the engine,
    not the trace's length.

    Rows with ``hash_ids`` (Mooncake) are built from shared token blocks instead
    (:class:`recordings.workloads.prefix_blocks.SharedPrefixPrompts`): a 512-token hash block becomes
    ``512 * prompt_scale`` tokens rounded to a multiple of ``block_size`` (the engine's, so shared
    prefixes stay KV-block aligned), equal ids give equal tokens (corpus windows with a tokenizer,
    ids in the same range without), the row's length is scaled by that same factor and then
    clamped as above. Every hash id that gets no token is counted in the notes, with the trace's
    and the workload's ideal prefix-cache hit rates (``Workload.prefix_sharing``).
    Rows with a ``spec`` (the JSONL workload format) keep their request id, sampling, priority
    and EOS handling; a prompt they give as text or ids is used as written (:class:`_GivenPrompts`;
    rows it cannot serve are skipped and noted).
    Deterministic given its arguments. Raises ``ValueError`` for out-of-range arguments.
    """
    check_workload_arguments(time_scale, prompt_scale, output_scale, min_prompt_tokens,
                     max_prompt_tokens, min_output_tokens, max_output_tokens)
    rng = random.Random(seed)
    low, high = _id_range(vocab_size)
    prompts = None
    if tokenizer is not None:
        prompts = _CorpusPrompts(tokenizer, default_corpus() if corpus is None else corpus)
    prompt_lengths = _Clamp("prompt lengths", prompt_scale, min_prompt_tokens, max_prompt_tokens)
    output_lengths = _Clamp("output lengths (max_tokens)", output_scale, min_output_tokens,
                            max_output_tokens)
    shared = None
    if any(row.hash_ids for row in rows):
        shared = SharedPrefixPrompts(block_size, prompt_scale, seed, low, high,
                                     prompts.token_ids() if prompts is not None else None)
    width = max(4, len(str(len(rows) - 1)))
    given = _GivenPrompts(tokenizer, vocab_size, {r.spec.request_id for r in rows
                                                  if r.spec is not None and r.spec.request_id})
    random_ids = RandomIdPrompts(seed, low, high)
    windows = CorpusWindowPrompts(prompts) if prompts is not None else None
    hashed = HashIdPrompts(shared.tokens, tokenizer) if shared is not None else None
    requests = []
    for index, row in enumerate(rows):
        spec = row.spec
        if given.has_prompt(row):
            made = given.prompt(row)
            if made is None:
                continue
            prompt: dict = dict(prompt_token_ids=made[0], prompt_text=made[1])
        elif shared is not None and row.hash_ids:
            num_prompt = prompt_lengths.clamp(shared.length(row.num_prompt_tokens, row.hash_ids))
            used = shared.account(row.num_prompt_tokens, row.hash_ids, num_prompt)
            prompt = dict(maker=hashed, recipe=(row.hash_ids, used, num_prompt, index))
        elif prompts is not None:
            num_prompt = prompt_lengths(row.num_prompt_tokens)
            prompt = dict(maker=windows, recipe=(prompts.pick_start(rng), num_prompt))
        else:
            num_prompt = prompt_lengths(row.num_prompt_tokens)
            prompt = dict(maker=random_ids, recipe=random_ids.recipe(num_prompt))
        if "maker" in prompt:
            prompt["num_prompt_tokens"] = num_prompt
        extra = {} if spec is None else dict(ignore_eos=spec.ignore_eos, priority=spec.priority,
                                             sampling=spec.sampling_kwargs())
        requests.append(WorkloadRequest(
            request_id=given.request_id(spec, f"r{index:0{width}d}"),
            arrival_s=row.arrival_s * time_scale, max_tokens=output_lengths(row.num_output_tokens),
            source_line=row.line_no, **prompt, **extra))
    notes = [note for note in (_time_note(rows, time_scale), prompt_lengths.note(),
                               output_lengths.note()) if note]
    if given.num_given + len(given.skipped) < len(rows):       # some prompts were synthesised
        notes.append("prompt text: windows of the built-in English corpus (the trace has only token "
                     "counts)" if prompts is not None else
                     f"prompt tokens: random ids in [{low}, {high}] (no tokenizer)")
    notes += given.notes()
    if shared is None:
        return Workload(requests, notes, skipped_rows=given.skipped)
    return Workload(requests, notes + shared.notes(), shared.sharing(), skipped_rows=given.skipped)


def random_token_ids(rng: random.Random, n: int, vocab_size: int | None = None) -> list[int]:
    """``n`` ids drawn one by one with ``rng.randint(100, 40000)`` (as the benchmark peers do);
    for a ``vocab_size`` at or below 40000 the range shrinks to fit inside it."""
    low, high = _id_range(vocab_size)
    return [rng.randint(low, high) for _ in range(n)]


def _id_range(vocab_size: int | None) -> tuple[int, int]:
    low, high = RANDOM_TOKEN_RANGE
    if vocab_size is not None and vocab_size <= high:
        return min(low, vocab_size // 4), vocab_size - 1
    return low, high


def demo_trace_path() -> Path:
    """The shipped Azure conversation slice (header + first 400 rows; see data/ATTRIBUTION.md)."""
    return DEMO_TRACE


def default_corpus() -> str:
    """The shipped English corpus (original essays) that prompts are cut from."""
    return CORPUS_PATH.read_text(encoding="utf-8")


class _GivenPrompts:
    """Prompts a JSONL workload row gives as text or token ids: encoded (text, with the
    tokenizer's special tokens, as ``app.LLM`` encodes) or decoded (ids), used as written (no
    scaling or clipping). A row that cannot be served is skipped and noted: text without a
    tokenizer, an id outside the model's vocabulary."""

    def __init__(self, tokenizer: Tokenizer | None, vocab_size: int | None, taken: set) -> None:
        self.tokenizer, self.vocab_size, self.taken = tokenizer, vocab_size, taken
        self.num_given = 0
        self.skipped: list[str] = []

    @staticmethod
    def has_prompt(row: TraceRow) -> bool:
        return row.spec is not None and (row.spec.prompt_text is not None
                                         or row.spec.prompt_token_ids is not None)

    def prompt(self, row: TraceRow) -> tuple[list[int], str | None] | None:
        """(ids, text) of the row's prompt, or None (noted) when it cannot be served."""
        spec = row.spec
        if spec.prompt_text is not None:
            if self.tokenizer is None:
                self.skipped.append(f"line {row.line_no}: prompt is text but this engine has no "
                                    f"tokenizer (the simulated executor): give prompt_tokens")
                return None
            self.num_given += 1
            return list(self.tokenizer.encode(spec.prompt_text)), spec.prompt_text
        ids = list(spec.prompt_token_ids)
        if self.vocab_size is not None and max(ids) >= self.vocab_size:
            self.skipped.append(f"line {row.line_no}: prompt_token_ids has id {max(ids)}, over the "
                                f"model's vocabulary (ids 0..{self.vocab_size - 1})")
            return None
        self.num_given += 1
        return ids, self.tokenizer.decode(ids) if self.tokenizer is not None else None

    def request_id(self, spec, numbered: str) -> str:
        """The row's own id, else ``numbered`` (suffixed while a row's own id holds it)."""
        if spec is not None and spec.request_id:
            return spec.request_id
        rid = numbered
        while rid in self.taken:
            rid += "_"
        return rid

    def notes(self) -> list[str]:
        out = []
        if self.num_given:
            out.append(f"{self.num_given} prompts given as text or token ids in the workload file "
                       f"are used as written (no prompt scaling or clipping)")
        if self.skipped:
            out.append(f"{plural(len(self.skipped), 'row')} skipped: " + "; ".join(self.skipped[:5])
                       + ("; ..." if len(self.skipped) > 5 else ""))
        return out


class _CorpusPrompts:
    """Windows of a corpus, read as if it repeated forever, starting at sentence starts."""

    def __init__(self, tokenizer: Tokenizer, corpus: str) -> None:
        if not corpus.strip():
            raise ValueError("the prompt corpus is empty")
        self.tokenizer = tokenizer
        self.cycle = corpus.rstrip() + "\n\n"
        self.starts = [m.start() for m in re.finditer(r"(?:^|(?<=[.!?]\s))\S", self.cycle, re.M)]
        self._ids: list[int] | None = None

    def token_ids(self) -> list[int]:
        """The whole corpus (one cycle) as token ids, encoded once (hash blocks cut windows of it)."""
        if self._ids is None:
            self._ids = list(self.tokenizer.encode(self.cycle, add_special_tokens=False))
        return self._ids

    def window(self, rng: random.Random, num_tokens: int) -> list[int]:
        return self.window_at(self.pick_start(rng), num_tokens)

    def pick_start(self, rng: random.Random) -> int:
        """A window's first character: a sentence start drawn with ``rng``."""
        return rng.choice(self.starts)

    def window_at(self, start: int, num_tokens: int) -> list[int]:
        """The ``num_tokens`` ids of the window starting at character ``start``."""
        num_chars = 6 * num_tokens + 64
        while True:
            repeats = (start + num_chars) // len(self.cycle) + 1
            text = (self.cycle * repeats)[start:start + num_chars]
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if len(ids) > num_tokens:  # one to spare: the cut word at the window's end is dropped
                return list(ids[:num_tokens])
            num_chars *= 2


class _Clamp:
    """Scale then clamp lengths, counting how many were clipped, for the scaling note."""

    def __init__(self, what: str, scale: float, low: int, high: int | None) -> None:
        self.what, self.scale, self.low, self.high = what, scale, low, high
        self.num, self.raised, self.cut = 0, 0, 0

    def __call__(self, count: int) -> int:
        return self.clamp(round(count * self.scale))

    def clamp(self, value: int) -> int:
        """Clamp an already scaled length (counted like any other)."""
        self.num += 1
        if value < self.low:
            self.raised += 1
            return self.low
        if self.high is not None and value > self.high:
            self.cut += 1
            return self.high
        return value

    def note(self) -> str | None:
        parts = [_times(self.scale)] if self.scale != 1 else []
        if self.high is None and self.raised:
            unit = "token" if self.low == 1 else "tokens"
            parts.append(f"raised to at least {self.low} {unit} ({self.raised} of {self.num} raised)")
        elif self.raised or self.cut:
            parts.append(f"clipped to [{self.low}, {self.high}] tokens ({self.raised + self.cut} "
                         f"of {self.num} clipped: {self.raised} raised, {self.cut} cut)")
        return f"{self.what} {', '.join(parts)}" if parts else None


def _time_note(rows: Sequence[TraceRow], time_scale: float) -> str | None:
    if time_scale == 1:
        return None
    span = (rows[-1].arrival_s - rows[0].arrival_s) if rows else 0.0
    how = "compressed" if time_scale < 1 else "stretched"
    return (f"arrival times {_times(time_scale)} ({how}): the trace's {span:.1f} s become "
            f"{span * time_scale:.1f} s")


def _times(scale: float) -> str:
    """``x0.125``, or ``x1/12`` where the decimal would be long and the scale is 1/n."""
    if len(f"{scale:g}") > 5 and 0 < scale < 1 and abs(1 / scale - round(1 / scale)) < 1e-9:
        return f"x1/{round(1 / scale)}"
    return f"x{scale:g}"


def check_workload_arguments(time_scale, prompt_scale, output_scale, min_prompt, max_prompt,
                             min_output, max_output) -> None:
    """Raise ``ValueError`` naming the argument and its limit if a scaling argument is out of range
    (a scale must be a finite number: inf or nan would make every arrival or length infinite)."""
    for name, value in (("time_scale", time_scale), ("prompt_scale", prompt_scale),
                        ("output_scale", output_scale)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
    if time_scale < 0:
        raise ValueError(f"time_scale must be >= 0, got {time_scale}")
    if prompt_scale <= 0 or output_scale <= 0:
        raise ValueError(f"prompt_scale and output_scale must be > 0, got {prompt_scale}, "
                         f"{output_scale}")
    for name, low, high in (("prompt", min_prompt, max_prompt), ("output", min_output, max_output)):
        if low < 1:
            raise ValueError(f"min_{name}_tokens must be >= 1, got {low}")
        if high is not None and high < low:
            raise ValueError(f"max_{name}_tokens ({high}) is below min_{name}_tokens ({low}); lower "
                             f"--min-{name}-tokens too (a --preset sets it)")


# --- the built-in workloads ---------------------------------------------------------------------

DEMO_NUM_REQUESTS = 100
DEMO_TIME_SCALE = 0.1
BENCH_CPU_NUM_REQUESTS = 64


def demo_workload(tokenizer: Tokenizer | None, time_scale: float = DEMO_TIME_SCALE,
                  n: int = DEMO_NUM_REQUESTS, seed: int = 0) -> Workload:
    """The built-in demo: the first ``n`` (at most 400) requests of the shipped Azure conversation
    slice, sized for SmolLM2-135M on a 2-core CPU (about 20-60 forward steps/s, max_num_seqs 16).

    Defaults: times x0.1 (the first 100 requests arrive over 4.3 s instead of 43 s; the trace starts
    slowly, with 11 s before its 16th request, so milder compression leaves the batch half empty);
    prompt lengths x1/12 clipped to [8, 96] tokens (mean ~47, keeping the trace's spread); output
    lengths x1/4 clipped to [8, 64] (mean ~36). A step-count estimate at 20/40/60 steps/s: all 16
    slots busy after 1.4/2.1/2.6 s, a waiting queue peaking at ~50/28/13 requests that drains once
    arrivals stop, the whole run over in ~14/8/6 s. Works without ``../shared``. Raises
    ``ValueError`` if ``n`` is not in 1..400.
    """
    rows = load_azure_csv(DEMO_TRACE).rows
    if not 1 <= n <= len(rows):
        raise ValueError(f"the demo has {len(rows)} requests; n must be in 1..{len(rows)}, got {n}")
    workload = build_workload(rows[:n], tokenizer, time_scale=time_scale, prompt_scale=1 / 12,
                              min_prompt_tokens=8, max_prompt_tokens=96, output_scale=1 / 4,
                              min_output_tokens=8, max_output_tokens=64, seed=seed)
    workload.scaling_notes.insert(0, f"the first {n} requests of the Azure LLM inference trace "
                                     f"2023, conversation service (Patel et al., CC-BY-4.0)")
    return workload


def bench_cpu_workload(trace_path: str | Path | None = None) -> Workload:
    """The CPU benchmark workload of ``shared/bench/README.md``, exactly as its peers build it.

    The first 64 rows of the Azure conv trace (``trace_path``, default: the shipped slice, whose
    first 64 rows are the same bytes); prompt length ``clamp(ContextTokens // 8, 8, 256)``, output
    length ``clamp(GeneratedTokens // 4, 4, 64)``, prompt ids ``random.Random(0).randint(100,
    40000)`` drawn request by request, every request arriving at t=0 (run it with EOS ignored).
    Totals: 4,497 prompt tokens, 1,896 output tokens. Raises ``ValueError`` if the trace's first
    64 rows are not all valid.
    """
    path = Path(trace_path) if trace_path is not None else DEMO_TRACE
    load = load_azure_csv(path, limit=BENCH_CPU_NUM_REQUESTS)
    if load.errors or len(load.rows) < BENCH_CPU_NUM_REQUESTS:
        problems = "; ".join(str(e) for e in load.errors[:3]) or f"only {len(load.rows)} rows"
        raise ValueError(f"{path}: the benchmark needs its first {BENCH_CPU_NUM_REQUESTS} rows "
                         f"intact: {problems}")
    rng = random.Random(0)
    requests = []
    for index, row in enumerate(load.rows):
        num_prompt = min(256, max(8, row.num_prompt_tokens // 8))
        num_output = min(64, max(4, row.num_output_tokens // 4))
        requests.append(WorkloadRequest(
            request_id=f"bench{index:02d}", arrival_s=0.0, prompt_text=None,
            prompt_token_ids=random_token_ids(rng, num_prompt), max_tokens=num_output,
            source_line=row.line_no))
    notes = ["CPU benchmark workload (shared/bench/README.md): the first 64 Azure conv requests, "
             "all arriving at t=0; run with EOS ignored",
             "prompt lengths ContextTokens // 8, clipped to [8, 256] tokens",
             "output lengths GeneratedTokens // 4, clipped to [4, 64] tokens",
             "prompt tokens: random ids randint(100, 40000) from random.Random(0), request by "
             "request"]
    return Workload(requests, notes)
