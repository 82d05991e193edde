"""Token sampling: repetition / frequency / presence penalties (``engine.runner.penalties``), then greedy,
temperature, top-k and top-p (nucleus; Holtzman et al., ICLR 2020), as ONE batched computation over
all rows of a step, with per-row parameters as tensors (``engine.runner.sampling_tensors``) and per-row
counter-based random numbers (``engine.runner.sampling_rng``), so a seeded request samples the same tokens
whatever shares its batch, and there is no Python work per row or per token on the hot path.

The draw is inverse-transform sampling (Devroye, "Non-Uniform Random Variate Generation", 1986,
ch. 2.1): one uniform u per row, the token is the first one whose cumulative (unnormalized)
probability, in vocabulary order, exceeds u times the row's total, found in two levels (the chunk
of :data:`DRAW_CHUNK` tokens holding it from the chunks' masses, then the token inside that chunk),
so no cumulative sum runs over the whole vocabulary. Top-k and top-p only set a
per-row logit threshold (tokens below it get probability 0), so the draw itself is the same
computation, in the same order, whether or not a batch has filtered rows: a row's token depends
on its own logits, parameters, seed and counter only.
"""
from __future__ import annotations

from typing import Sequence

import torch

from engine.runner.penalties import apply_penalties, token_ids_tensor
from engine.request import SamplingParams
from engine.runner.sampling_rng import counter_uniform
from engine.runner.sampling_tensors import SamplingTensors, derived_seed

_NEG_INF = float("-inf")


TOP_P_CANDIDATES = 1024         # top-p first looks for its nucleus in the top 1,024 logits (a topk, no sort)
DRAW_CHUNK = 1024               # tokens per chunk of the two-level inverse-transform draw


def filter_thresholds(scaled: torch.Tensor, st: SamplingTensors) -> torch.Tensor | None:
    """Per-row logit threshold of top-k then top-p: ``float32 [N]`` (``-inf`` = keep all), or None
    when no row filters. ``scaled``: ``float32 [N, V]``, the logits divided by the temperature.

    Top-k keeps every token whose logit is >= the k-th largest (ties at the k-th value are all
    kept, as in vLLM; ``k`` 0 or >= V is off); one ``topk(max_top_k)`` over the batch. Top-p is
    taken over the top-k-filtered, renormalized distribution (vLLM's order), on the rows in
    ``st.top_p_rows`` only: see :func:`top_p_thresholds`.
    """
    n, vocab = scaled.shape
    thr = None
    k_max = min(st.max_top_k, vocab)
    if k_max > 0:
        vals = torch.topk(scaled, k_max, dim=-1).values                          # [N, k_max], descending
        kth = vals.gather(1, (st.top_k.clamp(1, k_max) - 1).unsqueeze(1)).squeeze(1)
        thr = torch.where((st.top_k > 0) & (st.top_k < vocab), kth, _NEG_INF)
    if st.top_p_rows is None:
        return thr
    if thr is None:
        thr = torch.full((n,), _NEG_INF, dtype=torch.float32, device=scaled.device)
    rows = st.top_p_rows
    masked = scaled[rows]
    masked.masked_fill_(masked < thr[rows].unsqueeze(1), _NEG_INF)
    thr_p = top_p_thresholds(masked, st.top_p[rows])
    return thr.index_put((rows,), torch.maximum(thr[rows], thr_p))


def top_p_thresholds(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """The logit threshold of each row's nucleus (Holtzman et al., 2020): ``float32 [M]``.

    ``logits``: ``float32 [M, V]`` (already temperature-scaled and top-k-masked); ``top_p``:
    ``float32 [M]`` in (0, 1] (1: ``-inf``, keep all). The nucleus is the shortest prefix of the
    tokens sorted by probability whose mass reaches ``p`` of the row's total (the most likely
    token always stays), extended to every token tied with its last one.

    All in float32: the row total is a sum (a reduction, no cumulative sum over the vocabulary),
    the prefix masses cumulative sums over the sorted candidates. The nucleus is searched in the
    top ``TOP_P_CANDIDATES`` (a ``topk``, far cheaper than sorting the vocabulary); only the rows
    whose nucleus is longer (a flat distribution: more than that many tokens to reach ``p``) are
    sorted in full. Whether any row is longer is read back to the host: one device-to-host sync
    per call on a GPU. The prefix sums are the same whichever path a row takes, so the result
    does not depend on the candidate count.
    """
    vocab = logits.shape[1]
    top = logits.amax(dim=-1, keepdim=True)
    bound = top_p.unsqueeze(1) * (logits - top).exp_().sum(dim=-1, keepdim=True)
    vals = torch.topk(logits, min(vocab, TOP_P_CANDIDATES), dim=-1).values       # [M, k], descending
    thr, longer = _nucleus_threshold(vals, top, bound)
    if vals.shape[1] < vocab and bool(longer.any()):                              # the one host sync
        rows = longer.nonzero().squeeze(1)
        full = torch.sort(logits[rows], dim=-1, descending=True).values
        thr = thr.index_put((rows,), _nucleus_threshold(full, top[rows], bound[rows])[0])
    return torch.where(top_p < 1, thr, _NEG_INF)


def _nucleus_threshold(vals: torch.Tensor, top: torch.Tensor, bound: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The nucleus threshold of each row from its descending logits ``vals`` ``[M, k]`` (the top
    ``k``), the row maximum ``top`` and mass ``bound`` ``[M, 1]`` (p times the unnormalized total):
    the last value whose strictly-higher mass is below the bound; and whether the nucleus may go on
    past the ``k`` values (``bool [M]``)."""
    e = (vals - top).exp_()
    inside = e.cumsum(dim=-1) - e < bound                                        # mass strictly above < p
    last = (inside.sum(-1) - 1).clamp(min=0)                                     # >= 0: the top stays
    return vals.gather(1, last.unsqueeze(1)).squeeze(1), inside[:, -1]


def draw(logits: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
    """Sample one token per row: ``int64 [N]``, or -1 for a row with no finite logit (rows with
    temperature 0 are drawn at temperature 1; the caller keeps their argmax). ``logits``:
    ``[N, V]`` any float dtype (not modified); ``st``: the same N rows (``st.sampled_rows`` None).

    ``softmax(logits / temperature)``, cut by :func:`filter_thresholds`, then inverse-transform
    sampling with ``u = counter_uniform(seed, counter)``: the first token whose cumulative
    unnormalized probability, in vocabulary order, exceeds ``u * total``, found in two levels
    (:func:`inverse_transform`).
    """
    temp = st.temperature
    scaled = logits.float() / torch.where(temp > 0, temp, 1.0).unsqueeze(1)    # a new [N, V] tensor
    thr = filter_thresholds(scaled, st)
    if thr is not None:
        scaled.masked_fill_(scaled < thr.unsqueeze(1), _NEG_INF)
    scaled -= scaled.amax(dim=-1, keepdim=True)
    return inverse_transform(scaled.exp_(), counter_uniform(st.seed, st.counter), DRAW_CHUNK)


def inverse_transform(weights: torch.Tensor, u: torch.Tensor, chunk: int = DRAW_CHUNK) -> torch.Tensor:
    """The first index of each row whose cumulative ``weights`` (float32 ``[N, V]``, unnormalized
    probabilities >= 0, in vocabulary order) exceeds ``u`` (float64 ``[N]`` in [0, 1)) times the
    row's total: ``int64 [N]``, -1 for a row whose total is not > 0 (NaN: no finite logit).

    In two levels, so nothing cumulates over ``V`` values: the masses of ``chunk``-token chunks
    (float32 sums), their cumulative sum (float64, ``V / chunk`` values) picks the chunk holding
    the target, then the cumulative sum of that chunk's weights (float64, ``chunk`` values) the
    token inside it. The token drawn always has a nonzero weight."""
    n, vocab = weights.shape
    nfull = vocab // chunk
    mass = weights[:, :nfull * chunk].reshape(n, nfull, chunk).sum(-1)          # [N, V // chunk] float32
    if vocab % chunk:
        mass = torch.cat((mass, weights[:, nfull * chunk:].sum(-1, keepdim=True)), dim=1)
    cum = mass.double().cumsum(dim=-1)                                          # [N, chunks]
    total = cum[:, -1]
    # u <= 1 - 2**-33, so target < total: the first chunk whose cumulative mass exceeds it has a
    # nonzero mass
    target = u * total
    c = torch.searchsorted(cum, target.unsqueeze(1), right=True).clamp_(max=mass.shape[1] - 1)
    before = torch.nn.functional.pad(cum, (1, 0)).gather(1, c)                   # mass of the chunks before c
    rest = target.unsqueeze(1) - before                                          # >= 0, inside chunk c
    cols = c * chunk + torch.arange(chunk, device=weights.device)               # [N, chunk]
    inside = weights.gather(1, cols.clamp(max=vocab - 1)).masked_fill_(cols >= vocab, 0.0)
    j = torch.searchsorted(inside.double().cumsum(dim=-1), rest, right=True)
    # float32 chunk masses vs the float64 sum inside: a target at the chunk's very end may pass
    # its last weight; it then takes the chunk's last token of nonzero weight
    last_nonzero = torch.where(inside > 0, torch.arange(chunk, device=weights.device), -1).amax(-1, keepdim=True)
    drawn = c * chunk + torch.minimum(j, last_nonzero)
    return torch.where(total > 0, drawn.squeeze(1), -1)


class Sampler:
    """Samples one token per row of a logits matrix. Holds no per-request state: a request's
    random stream is its (seed, counter) pairs, which the caller keeps (the model runner in its
    ``InputBatch``: the seed set once when the request is added, the counter its number of
    output tokens so far).

    :meth:`sample_tensors` is the batched call (parameters as :class:`SamplingTensors`, result a
    device tensor). :meth:`sample` wraps it for callers that hold ``SamplingParams`` objects.
    ``base_seed`` derives the seeds of unseeded requests (:func:`derived_seed`).
    """

    def __init__(self, base_seed: int = 0) -> None:
        self.base_seed = base_seed

    def sample(self, logits: torch.Tensor, params: Sequence[SamplingParams],
               counters: Sequence[int] | None = None,
               prompt_token_ids: Sequence[Sequence[int]] | None = None,
               output_token_ids: Sequence[Sequence[int]] | None = None) -> list[int]:
        """``logits`` ``[N, vocab]`` (any float dtype) -> one token id per row (Python ints).

        Row i draws from seed ``params[i].seed``, or :func:`derived_seed` ``(base_seed, i + 1)``
        when unseeded, at counter ``counters[i]`` (default: the length of
        ``output_token_ids[i]`` when given, else 0): the same arguments give the same tokens.
        ``prompt_token_ids[i]`` / ``output_token_ids[i]`` are row i's prompt and output so far;
        they are read only for rows whose params have penalties (then they are required: raises
        ``ValueError`` without them). A thin wrapper: penalties, then :meth:`sample_tensors`."""
        logits = self.penalized(logits, params, prompt_token_ids, output_token_ids)
        if all(p.is_greedy for p in params):       # what sample_tensors does then, minus the build
            return logits.argmax(dim=-1).tolist()
        if counters is None:
            counters = [len(o) for o in output_token_ids] if output_token_ids is not None else [0] * len(params)
        seeds = [derived_seed(self.base_seed, i + 1) if p.seed is None else p.seed for i, p in enumerate(params)]
        st = SamplingTensors.from_lists([p.temperature for p in params], [p.top_k for p in params],
                                        [p.top_p for p in params], seeds, counters, logits.device)
        return self.sample_tensors(logits, st).tolist()

    @staticmethod
    def sample_tensors(logits: torch.Tensor, st: SamplingTensors) -> torch.Tensor:
        """One token per row, as one batched computation: ``int64 [N]`` on ``logits``' device.

        ``logits``: ``[N, V]``, any float dtype (penalties, if any, already applied; not
        modified). Every row's argmax is taken; the rows with temperature > 0 (all, or those
        gathered by ``st.sampled_rows``) are drawn by :func:`draw` and put in place with
        ``torch.where`` / one ``index_put``. A row whose logits are all ``-inf`` gets token 0
        (argmax's first index), never an error or NaN. Reads nothing back to the host (but on
        the CPU, see :func:`top_p_thresholds`). Raises ``ValueError`` if ``logits`` is not 2-D or
        its row count differs from ``st``'s.
        """
        if logits.dim() != 2 or logits.shape[0] != st.num_rows:
            raise ValueError(f"sample_tensors: logits must be [N, vocab] with N = {st.num_rows} rows "
                             f"(the SamplingTensors), got shape {tuple(logits.shape)}")
        greedy = logits.argmax(dim=-1)
        if st.all_greedy:
            return greedy
        rows = st.sampled_rows
        sub = st.sampled()
        drawn = draw(logits if rows is None else logits[rows], sub)
        if rows is None:
            return torch.where((st.temperature > 0) & (drawn >= 0), drawn, greedy)
        return greedy.index_put((rows,), torch.where(drawn >= 0, drawn, greedy[rows]))

    @staticmethod
    def penalized(logits: torch.Tensor, params: Sequence[SamplingParams],
                  prompts: Sequence[Sequence[int]] | None,
                  outputs: Sequence[Sequence[int]] | None) -> torch.Tensor:
        """``logits`` ``[N, vocab]`` with the penalties of the rows that have any applied (see
        :func:`penalize_rows`); ``logits`` itself when no row has penalties. ``prompts`` /
        ``outputs``: each row's prompt and output token ids (required when a row has penalties:
        ``ValueError`` otherwise)."""
        rows = [i for i, p in enumerate(params) if p.has_penalties]
        if not rows:
            return logits
        if prompts is None or outputs is None:
            raise ValueError("sampling penalties need each request's prompt and output token ids")
        ps = [params[i] for i in rows]
        return penalize_rows(logits, rows, lambda sub, inplace: apply_penalties(
            sub, [token_ids_tensor(prompts[i]) for i in rows], [token_ids_tensor(outputs[i]) for i in rows],
            [p.repetition_penalty for p in ps], [p.frequency_penalty for p in ps],
            [p.presence_penalty for p in ps], inplace=inplace))


def penalize_rows(logits: torch.Tensor, rows: Sequence[int], apply) -> torch.Tensor:
    """``logits`` ``[N, vocab]`` with ``apply`` run on the selected ``rows`` (a list or an int
    array, in increasing order): ``apply(sub, inplace)`` gets ``sub``, the ``[len(rows), vocab]``
    rows to penalize, and returns them penalized (an ``engine.runner.penalties`` call with that
    ``inplace``: True for a float32 copy of the selected rows, False when every row is selected
    and ``sub`` is ``logits`` itself). Returns a float32 tensor; the caller's ``logits`` is never modified. One copy of
    what is penalized, plus one of the whole matrix when only some rows are."""
    if len(rows) == logits.shape[0]:
        return apply(logits, False)
    idx = torch.as_tensor(rows, dtype=torch.long).to(logits.device)
    penalized = apply(logits[idx].float(), True)
    logits = logits.to(torch.float32, copy=True)     # the caller's tensor stays as it was
    logits[idx] = penalized
    return logits
