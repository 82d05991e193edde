"""A fast, deterministic stand-in for ``engine.runner.model_runner.ModelRunner`` (no torch), and a toy
tokenizer for stop-string tests.

The fake keeps its own paged "KV cache": a grid ``num_blocks x block_size`` of token ids. Each step
it writes every scheduled token into the slots named by the request's block table, and then, for a
request whose chunk reaches the end of its known tokens, reads the whole context BACK through the
block table and returns ``next_token_fn(context, num_prompt_tokens)``. So the output is a pure
function of the request's token sequence *only if* the scheduler's block tables are right: a block
shared between two live requests, reused while still held, or a chunk computed twice or skipped
changes the context read back and therefore the tokens, which the reference comparison (G7) sees.
A seeded request that is not greedy gets ``next_token_fn`` of its context followed by a marker of
its seed, so the sequences of a parallel-sampling group (seeds ``seed + k``) differ from each
other and each equals a run of its own with its seed.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from engine.runner.input_batch import InputBatch
from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.request import SamplingParams
from engine.runner.lengths import RunnerLengths
from engine.sequence_group import parallel_sample_rows

VOCAB_SIZE = 1000
_MOD = (1 << 61) - 1

NextTokenFn = Callable[[Sequence[int], int], int]


def hash_next_token(context: Sequence[int], num_prompt_tokens: int = 0, vocab_size: int = VOCAB_SIZE) -> int:
    """The default "model": a polynomial hash of the whole context, mod ``vocab_size``."""
    h = len(context)
    for t in context:
        h = (h * 1_000_003 + t + 7) % _MOD
    return h % vocab_size


def reference_output(prompt: Sequence[int], max_tokens: int, fn: NextTokenFn = hash_next_token) -> list[int]:
    """What a correct engine must generate for ``prompt`` (greedy, EOS ignored): the fake model run
    token by token with no scheduler and no cache."""
    seq = list(prompt)
    for _ in range(max_tokens):
        seq.append(fn(seq, len(prompt)))
    return seq[len(prompt):]


def seeded_context(context: Sequence[int], params: SamplingParams) -> Sequence[int]:
    """What the fake "model" reads for a request sampling with ``params``: its context, plus a
    marker of its seed when it samples (not greedy) with a seed."""
    return context if params.is_greedy or params.seed is None else [*context, -1 - params.seed]


def script_next_token(continuation: Sequence[int]) -> NextTokenFn:
    """A "model" whose output is ``continuation`` whatever the prompt (then repeats its last id)."""
    def fn(context: Sequence[int], num_prompt_tokens: int) -> int:
        i = len(context) - num_prompt_tokens
        return continuation[min(i, len(continuation) - 1)]
    return fn


class FakeRunnerError(RuntimeError):
    """The scheduler handed the runner an inconsistent step (also listed in ``violations``)."""


class FakeRunner:
    """Implements the engine's ``Runner`` protocol: ``execute(sched)`` and ``release(id)``.

    Like the real runner it keeps its own per-request state in an
    :class:`engine.runner.input_batch.InputBatch` fed by the scheduler's diffs alone (no ``Request``
    objects): the tokens it writes and the block tables it writes them through are the batch's,
    so a wrong diff changes the tokens read back. It also checks the diff against its state
    every step: a held request's ``num_computed_tokens`` must be what the runner computed, and
    every scheduled request's block table must equal the scheduler's.

    ``fail_steps``: step indices at which ``execute`` raises ``RuntimeError`` (to test the engine's
    error path). ``violations`` collects every consistency problem found in a scheduled step.
    ``during_execute(sched)`` (optional) is called in the middle of each ``execute``, after the
    step's KV writes and before the context is read back: a step in flight, where a test makes
    control calls (abort, pause...) on the engine.
    """

    def __init__(self, num_blocks: int, block_size: int, next_token_fn: NextTokenFn = hash_next_token,
                 fail_steps: Sequence[int] = (), num_cpu_blocks: int = 0) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.cache: list[list[int | None]] = [[None] * block_size for _ in range(num_blocks)]
        # the CPU swap pool: swap-outs copy GPU rows here, swap-ins copy them back
        self.cpu_cache: list[list[int | None]] = [[None] * block_size for _ in range(num_cpu_blocks)]
        self.num_swapped_blocks = 0
        self.num_copied_blocks = 0
        self.next_token_fn = next_token_fn
        self.fail_steps = set(fail_steps)
        self.violations: list[str] = []
        self.released: list[str] = []
        self.num_calls = 0
        self.input_batch = InputBatch(4, 64, 4, block_size)        # grows as needed
        self.num_state_checks = 0       # held requests compared with the scheduler (the harness)
        self.during_execute: Callable[[SchedulerOutput], None] | None = None

    def _violation(self, msg: str) -> None:
        self.violations.append(msg)
        raise FakeRunnerError(msg)

    def _slot(self, block_ids: Sequence[int], pos: int) -> tuple[int, int]:
        return block_ids[pos // self.block_size], pos % self.block_size

    def _check_diff(self, sched: SchedulerOutput) -> None:
        """The held requests' progress in the diff must be the runner's own."""
        batch, cached = self.input_batch, sched.scheduled_cached_reqs
        gone = set(sched.finished_req_ids)
        for rid, computed in zip(cached.req_ids, cached.num_computed_tokens):
            row = batch.req_id_to_index.get(rid)
            if row is None or rid in gone:
                self._violation(f"step {sched.step}: cached request {rid} is not held by the runner")
            if int(batch.num_computed_tokens[row]) != computed:
                self._violation(f"step {sched.step}: {rid} computed {computed} per the scheduler but "
                                f"{int(batch.num_computed_tokens[row])} per the runner")

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self.num_calls += 1
        bs, batch = self.block_size, self.input_batch
        self._check_diff(sched)
        batch.update(sched)
        # Like a real runner: the step's copy-on-write and swap copies land before its forward
        # pass (which may fail), in that order.
        for src, dst in sched.blocks_to_copy:
            self.cache[dst] = list(self.cache[src])
        self.num_copied_blocks += len(sched.blocks_to_copy)
        for gpu, cpu in sched.blocks_to_swap_out:
            self.cpu_cache[cpu] = list(self.cache[gpu])
        for cpu, gpu in sched.blocks_to_swap_in:
            self.cache[gpu] = list(self.cpu_cache[cpu])
        self.num_swapped_blocks += len(sched.blocks_to_swap_out) + len(sched.blocks_to_swap_in)
        if sched.step in self.fail_steps:
            raise RuntimeError(f"injected failure at step {sched.step}")
        seen: set[str] = set()
        for s in sched.scheduled:
            row = batch.req_id_to_index.get(s.request_id)
            if row is None:
                self._violation(f"step {sched.step}: {s.request_id} scheduled but never sent to the runner")
            end = s.num_computed_tokens + s.num_tokens
            if s.request_id in seen:
                self._violation(f"step {sched.step}: {s.request_id} scheduled twice")
            seen.add(s.request_id)
            known = int(batch.num_tokens[row])
            if s.num_tokens < 1 or s.num_computed_tokens != batch.num_computed_tokens[row] or end > known:
                self._violation(f"step {sched.step}: {s.request_id} chunk [{s.num_computed_tokens}, {end}) "
                                f"vs computed {int(batch.num_computed_tokens[row])} of {known}")
            # Its own table, kept from the diffs (the harness compares it with the scheduler's
            # after every step): it must hold the chunk, name no block twice, stay in the pool.
            table = batch.block_ids(row).tolist()
            if len(table) * bs < end or len(set(table)) != len(table):
                self._violation(f"step {sched.step}: {s.request_id} block table {table} "
                                f"cannot hold {end} tokens")
            if any(not 0 <= b < self.num_blocks for b in table):
                self._violation(f"step {sched.step}: {s.request_id} names a block outside the pool")
            tokens = batch.token_ids[row]
            for pos in range(s.num_computed_tokens, end):
                b, off = self._slot(table, pos)
                self.cache[b][off] = int(tokens[pos])
        if self.during_execute is not None:
            self.during_execute(sched)
        if sched.is_empty:
            return ModelRunnerOutput()
        inp = batch.prepare(sched.scheduled)
        # Like a real forward pass: every write of the step lands before anything is read.
        rows = inp.rows[inp.sample_idx].tolist()
        ids = [batch.req_ids[r] for r in rows]
        contexts = [[self.cache[b][off] for b, off in (self._slot(batch.block_ids(r), p)
                                                       for p in range(int(batch.num_tokens[r])))]
                    for r in rows]
        # parallel sampling: further sequences sample from their head's context (its last row)
        extra = parallel_sample_rows(sched.parallel_samples, ids)
        pairs = [*enumerate(ids), *extra]
        sampled: dict[str, int] = {}
        for row, rid in pairs:
            r = batch.req_id_to_index[rid]
            sampled[rid] = self.next_token_fn(seeded_context(contexts[row], batch.sampling_params[r]),
                                              int(batch.num_prompt_tokens[r]))
        batch.append_tokens(np.array([batch.req_id_to_index[rid] for _, rid in pairs], dtype=np.int64),
                            np.array([sampled[rid] for _, rid in pairs], dtype=np.int64))
        return ModelRunnerOutput(sampled_token_ids=sampled)

    def release(self, request_id: str) -> None:
        self.released.append(request_id)


class NullRunner:
    """A runner that does no model work and keeps only each request's token counts (scale tests,
    benches; ``engine.runner.lengths``).

    Returns ``token_id`` for each request whose scheduled chunk reaches the end of its known
    tokens (like :class:`FakeRunner`, without the cache bookkeeping) and, when ``step_duration``
    is given, ``step_duration(sched)`` seconds as the step's ``step_duration_s`` (a stand-in for
    a simulated executor's cost model, for the engine's ``sim`` clock).
    """

    def __init__(self, token_id: int = 7,
                 step_duration: Callable[[SchedulerOutput], float] | None = None) -> None:
        self.token_id = token_id
        self.step_duration = step_duration
        self.num_calls = 0
        self.lengths = RunnerLengths()

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self.num_calls += 1
        self.lengths.update(sched)
        tok = self.token_id
        sampled = {rid: tok for rid, _ in self.lengths.sampling(sched)}
        duration = None if self.step_duration is None else self.step_duration(sched)
        return ModelRunnerOutput(sampled_token_ids=sampled, step_duration_s=duration)

    def release(self, request_id: str) -> None:
        pass


class ToyTokenizer:
    """``decode`` joins fixed strings per token id (ids not in ``pieces`` decode to ``<id>``)."""

    def __init__(self, pieces: Mapping[int, str]) -> None:
        self.pieces = dict(pieces)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.pieces.get(i, f"<{i}>") for i in ids)
