"""A fast, deterministic stand-in for ``engine.model_runner.ModelRunner`` (no torch), and a toy
tokenizer for stop-string tests.

The fake keeps its own paged "KV cache": a grid ``num_blocks x block_size`` of token ids. Each step
it writes every scheduled token into the slots named by the request's block table, and then, for a
request whose chunk reaches the end of its known tokens, reads the whole context BACK through the
block table and returns ``next_token_fn(context, num_prompt_tokens)``. So the output is a pure
function of the request's token sequence *only if* the scheduler's block tables are right: a block
shared between two live requests, reused while still held, or a chunk computed twice or skipped
changes the context read back and therefore the tokens, which the reference comparison (G7) sees.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.request import Request

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


def script_next_token(continuation: Sequence[int]) -> NextTokenFn:
    """A "model" whose output is ``continuation`` whatever the prompt (then repeats its last id)."""
    def fn(context: Sequence[int], num_prompt_tokens: int) -> int:
        i = len(context) - num_prompt_tokens
        return continuation[min(i, len(continuation) - 1)]
    return fn


class FakeRunnerError(RuntimeError):
    """The scheduler handed the runner an inconsistent step (also listed in ``violations``)."""


class FakeRunner:
    """Implements the engine's ``Runner`` protocol: ``execute(sched, requests)`` and ``release(id)``.

    ``fail_steps``: step indices at which ``execute`` raises ``RuntimeError`` (to test the engine's
    error path). ``violations`` collects every consistency problem found in a scheduled step.
    """

    def __init__(self, num_blocks: int, block_size: int, next_token_fn: NextTokenFn = hash_next_token,
                 fail_steps: Sequence[int] = (), num_cpu_blocks: int = 0) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.cache: list[list[int | None]] = [[None] * block_size for _ in range(num_blocks)]
        # the CPU swap pool: swap-outs copy GPU rows here, swap-ins copy them back
        self.cpu_cache: list[list[int | None]] = [[None] * block_size for _ in range(num_cpu_blocks)]
        self.num_swapped_blocks = 0
        self.next_token_fn = next_token_fn
        self.fail_steps = set(fail_steps)
        self.violations: list[str] = []
        self.released: list[str] = []
        self.num_calls = 0

    def _violation(self, msg: str) -> None:
        self.violations.append(msg)
        raise FakeRunnerError(msg)

    def _slot(self, block_ids: Sequence[int], pos: int) -> tuple[int, int]:
        return block_ids[pos // self.block_size], pos % self.block_size

    def execute(self, sched: SchedulerOutput, requests: Mapping[str, Request]) -> ModelRunnerOutput:
        self.num_calls += 1
        if sched.step in self.fail_steps:
            raise RuntimeError(f"injected failure at step {sched.step}")
        bs = self.block_size
        # Like a real runner: the step's swap copies land before its forward pass.
        for gpu, cpu in sched.blocks_to_swap_out:
            self.cpu_cache[cpu] = list(self.cache[gpu])
        for cpu, gpu in sched.blocks_to_swap_in:
            self.cache[gpu] = list(self.cpu_cache[cpu])
        self.num_swapped_blocks += len(sched.blocks_to_swap_out) + len(sched.blocks_to_swap_in)
        seen: set[str] = set()
        for s in sched.scheduled:
            req = requests[s.request_id]
            end = s.num_computed_tokens + s.num_tokens
            if s.request_id in seen:
                self._violation(f"step {sched.step}: {s.request_id} scheduled twice")
            seen.add(s.request_id)
            if s.num_tokens < 1 or s.num_computed_tokens != req.num_computed_tokens or end > req.num_tokens:
                self._violation(f"step {sched.step}: {s.request_id} chunk [{s.num_computed_tokens}, {end}) "
                                f"vs computed {req.num_computed_tokens} of {req.num_tokens}")
            if len(s.block_ids) * bs < end or len(set(s.block_ids)) != len(s.block_ids):
                self._violation(f"step {sched.step}: {s.request_id} block table {s.block_ids} "
                                f"cannot hold {end} tokens")
            if any(not 0 <= b < self.num_blocks for b in s.block_ids):
                self._violation(f"step {sched.step}: {s.request_id} names a block outside the pool")
            tokens = req.all_token_ids
            for pos in range(s.num_computed_tokens, end):
                b, off = self._slot(s.block_ids, pos)
                self.cache[b][off] = tokens[pos]
        # Like a real forward pass: every write of the step lands before anything is read.
        sampled: dict[str, int] = {}
        for s in sched.scheduled:
            req = requests[s.request_id]
            end = s.num_computed_tokens + s.num_tokens
            if end != req.num_tokens:
                continue
            context = [self.cache[b][off] for b, off in (self._slot(s.block_ids, p) for p in range(end))]
            sampled[s.request_id] = self.next_token_fn(context, req.num_prompt_tokens)
        return ModelRunnerOutput(sampled_token_ids=sampled)

    def release(self, request_id: str) -> None:
        self.released.append(request_id)


class NullRunner:
    """A runner that does no model work and keeps no per-request state (scale tests, benches).

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

    def execute(self, sched: SchedulerOutput, requests: Mapping[str, Request]) -> ModelRunnerOutput:
        self.num_calls += 1
        tok = self.token_id
        sampled = {s.request_id: tok for s in sched.scheduled
                   if s.num_computed_tokens + s.num_tokens == requests[s.request_id].num_tokens}
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
