"""The simulated executor: the engine's ``Runner`` with no model (after Vidur, Agrawal et al.,
MLSys 2024). The real scheduler and KV manager run; each step returns synthetic tokens and the
cost model's predicted duration in ``ModelRunnerOutput.step_duration_s``, by which the engine's
``sim`` clock advances. Deterministic: same steps in, same tokens and durations out
(:func:`synthetic_token`: a few tokens keyed by the request, then a constant filler).
"""
from __future__ import annotations

import hashlib
from engine.outputs import ModelRunnerOutput, SchedulerOutput
from engine.runner.lengths import RunnerLengths
from engine.sim.cost_model import CostModel


_M64 = (1 << 64) - 1


def request_key(seed: int, request_id: str) -> int:
    """64-bit key of one request's synthetic tokens: blake2b of (seed, id), stable across processes."""
    digest = hashlib.blake2b(f"{seed}\x00{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def num_key_tokens(vocab_size: int) -> int:
    """How many of a request's first output tokens carry its 64-bit :func:`request_key`: enough
    ``log2(vocab_size)``-bit tokens for 64 bits (4 for a 128,256-token vocabulary). Raises
    ``ValueError`` for a vocabulary of fewer than 2 tokens."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    return -(-64 // (vocab_size.bit_length() - 1))


def synthetic_token(seed: int, request_id: str, index: int, vocab_size: int, eos_token_id: int | None = None,
                    key: int | None = None) -> int:
    """Token ``index`` of ``request_id``'s output. The first :func:`num_key_tokens` are
    splitmix64 of its :func:`request_key` (pass ``key`` to skip recomputing it) and ``index``, mod
    ``vocab_size``: they tell two requests' outputs apart, so equal prompts never share an output
    block's prefix hash (no prefix-cache hit between different requests that random tokens would
    not give too). Every later token is the filler id 0: a decode step's tokens are then all equal
    and its recorded batch compresses to a few bytes (random ids cost ~2 bytes each). Never
    ``eos_token_id`` (the next id instead), so output lengths follow the trace."""
    if index >= num_key_tokens(vocab_size):
        token = 0
    else:
        z = ((request_key(seed, request_id) if key is None else key) + (index + 1) * 0x9E3779B97F4A7C15) & _M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        token = (z ^ (z >> 31)) % vocab_size
    if token == eos_token_id:
        token = (token + 1) % vocab_size
    return token


class SimExecutor:
    """Implements ``engine.engine.Runner``: ``execute(sched)`` and ``release(id)``.

    It keeps each request's token counts from the scheduler's diffs (``engine.runner.lengths``;
    no ``Request`` objects). A request whose scheduled chunk reaches the end of its known tokens
    (``num_computed_tokens + num_tokens == num_tokens``) gets a synthetic token; the step's
    duration is ``cost_model.step_time`` of the scheduled chunks with that many sampled rows, plus
    the host-link time of the step's swap copies (``block_size`` tokens of KV per block) and the
    device-memory time of its copy-on-write block copies (parallel sampling). The sequences a
    step forks (``parallel_samples``) get their synthetic first token too.
    ``total_time_s`` and ``num_steps`` sum what it predicted (for reports).
    """

    def __init__(self, cost_model: CostModel, *, seed: int = 0, block_size: int = 16) -> None:
        self.cost_model = cost_model
        self.block_size = block_size
        self.seed = seed
        self.vocab_size = cost_model.shape.vocab_size
        self.total_time_s = 0.0
        self.num_steps = 0
        self._keys: dict[str, int] = {}
        self.lengths = RunnerLengths()      # its own per-request state, from the scheduler's diffs

    def execute(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self.lengths.update(sched)
        sampled: dict[str, int] = {}
        keys = self._keys
        for rid, index in self.lengths.sampling(sched):
            key = keys.get(rid)
            if key is None:
                key = keys[rid] = request_key(self.seed, rid)
            sampled[rid] = synthetic_token(self.seed, rid, index, self.vocab_size, key=key)
        duration = self.cost_model.step_time(sched.scheduled, len(sampled))
        num_swapped = len(sched.blocks_to_swap_out) + len(sched.blocks_to_swap_in)
        if num_swapped:                       # swap preemption's copies over the host link
            duration += self.cost_model.swap_time_s(num_swapped, self.block_size)
        if sched.blocks_to_copy:               # copy-on-write within device memory
            duration += self.cost_model.copy_time_s(len(sched.blocks_to_copy), self.block_size)
        self.total_time_s += duration
        self.num_steps += 1
        return ModelRunnerOutput(sampled_token_ids=sampled, step_duration_s=duration)

    def release(self, request_id: str) -> None:
        """Forget the request's cached key (it is recomputed identically if the id comes back)."""
        self._keys.pop(request_id, None)
