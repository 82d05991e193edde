"""The batched sampler (``Sampler.sample_tensors``): greedy = argmax, a seeded row's token does not
depend on its batch, temperature / top-k / top-p draw from the right distribution (chi-square on
many draws, with a deliberately wrong distribution rejected by the same statistic), top-k and top-p
never leave their sets (against straightforward per-row references), edge cases, and the
counter-based random numbers against a pure-Python reference of the hash."""
from __future__ import annotations

import math

import pytest
import torch

from engine.request import SamplingParams
import engine.runner.sampler as sampler_module
from engine.runner.sampler import Sampler, filter_thresholds, top_p_thresholds
from engine.runner.sampling_rng import counter_uniform, lowbias32
from engine.runner.sampling_tensors import SamplingTensors

pytestmark = pytest.mark.usefixtures("one_torch_thread")      # torch: tiny ops, a busy 2-core machine

CHI2_CRIT_DF7 = 24.32        # chi-square 0.999 quantile, 7 degrees of freedom (8 categories)


def randn(rows: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2


def tensors(n: int, temperature=1.0, top_k=0, top_p=1.0, seed=0, counter=None) -> SamplingTensors:
    """Every row the same parameters (scalars) or one value per row (lists)."""
    def rows(v):
        return list(v) if isinstance(v, (list, tuple, range)) else [v] * n
    return SamplingTensors.from_lists(rows(temperature), rows(top_k), rows(top_p), rows(seed),
                                      list(range(n)) if counter is None else rows(counter))


def sample(logits: torch.Tensor, st: SamplingTensors) -> list[int]:
    return Sampler.sample_tensors(logits, st).tolist()


# --- greedy ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_rows_are_the_argmax_in_a_mixed_batch(dtype):
    lg = randn(6, 300, seed=1).to(dtype)
    st = tensors(6, temperature=[0.0, 1.0, 0.0, 0.8, 0.0, 2.0], top_p=[1, 0.9, 1, 1, 0.5, 1], top_k=[0, 0, 5, 0, 0, 9])
    out = Sampler.sample_tensors(lg, st)
    assert out.dtype == torch.int64 and out.device == lg.device and out.shape == (6,)
    assert out[[0, 2, 4]].tolist() == lg.argmax(-1)[[0, 2, 4]].tolist()
    assert sample(lg, tensors(6, temperature=0.0)) == lg.argmax(-1).tolist()     # the all-greedy path
    # Without the sampled_rows index every row is drawn (torch.where keeps the greedy argmax):
    # the same tokens; top_p_rows then count among all rows.
    every = SamplingTensors(st.temperature, st.top_k, st.top_p, st.seed, st.counter, None,
                            st.sampled_rows[st.top_p_rows], st.max_top_k)
    assert Sampler.sample_tensors(lg, every).tolist() == out.tolist()


# --- batch independence ----------------------------------------------------------------------------
ROW_PARAMS = [dict(temperature=1.0), dict(temperature=0.7, top_k=20), dict(temperature=1.3, top_p=0.8),
              dict(temperature=0.9, top_k=50, top_p=0.95), dict(temperature=0.0)]


@pytest.mark.parametrize("params", ROW_PARAMS)
def test_a_seeded_row_draws_the_same_whatever_shares_its_batch(params):
    vocab, steps = 500, 40
    lg = randn(1, vocab, seed=2)
    alone = [sample(lg, tensors(1, seed=1234, counter=c, **{k: [v] for k, v in params.items()}))[0]
             for c in range(steps)]
    others = randn(7, vocab, seed=3)
    for order in ([0, 1, 2, 3, 4, 5, 6, 7], [7, 3, 0, 5, 1, 6, 2, 4]):
        # rows 0-6: every other kind of row (greedy, top-k, top-p, plain), row 7: the seeded one
        temps = [0.0, 1.0, 0.5, 1.0, 2.0, 0.0, 1.0, params.get("temperature", 1.0)]
        ks = [0, 3, 0, 0, 100, 0, 7, params.get("top_k", 0)]
        ps = [1.0, 1.0, 0.3, 0.99, 1.0, 0.5, 0.9, params.get("top_p", 1.0)]
        seeds = [5, 6, 7, 8, 9, 10, 11, 1234]
        batch = torch.cat([others, lg])[order]
        pos = order.index(7)
        got = []
        for c in range(steps):
            st = SamplingTensors.from_lists([temps[i] for i in order], [ks[i] for i in order],
                                            [ps[i] for i in order], [seeds[i] for i in order],
                                            [c + 17 * (i != 7) for i in order])
            got.append(sample(batch, st)[pos])
        assert got == alone, order
    if params["temperature"] > 0:
        assert len(set(alone)) > 1                                          # it really samples


def test_other_seeds_and_counters_give_other_draws():
    lg = torch.zeros(200, 1000)                                             # uniform over 1000 tokens
    a = sample(lg, tensors(200, seed=1))
    b = sample(lg, tensors(200, seed=2))
    assert len(set(a)) > 150 and sum(x == y for x, y in zip(a, b)) < 5


# --- distributions ---------------------------------------------------------------------------------
def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of ``counts`` against ``probs`` (categories with probability 0 must
    have no draw: then +inf)."""
    n = float(counts.sum())
    expected = probs.double() * n
    zero = expected == 0
    if bool((counts[zero] > 0).any()):
        return math.inf
    return float((((counts.double() - expected) ** 2)[~zero] / expected[~zero]).sum())


def draw_counts(logits_row: torch.Tensor, draws: int, seed: int = 99, **params) -> torch.Tensor:
    """``draws`` draws from one row (counters 0..draws-1, one batched call), counted per token."""
    st = tensors(draws, seed=seed, **params)
    toks = Sampler.sample_tensors(logits_row.expand(draws, -1), st)
    return torch.bincount(toks, minlength=logits_row.shape[-1])


LOGITS8 = torch.tensor([[1.5, 0.2, -0.3, 0.9, 2.0, -1.0, 0.0, 0.4]])


def test_temperature_sampling_matches_the_softmax_and_a_wrong_temperature_is_rejected():
    counts = draw_counts(LOGITS8, 40_000, temperature=0.7)
    assert chi2(counts, torch.softmax(LOGITS8[0] / 0.7, -1)) < CHI2_CRIT_DF7
    # The same statistic tells temperatures 0.7 and 0.6 / 1.0 apart, and a shuffled softmax.
    for wrong in (torch.softmax(LOGITS8[0] / 0.6, -1), torch.softmax(LOGITS8[0], -1),
                  torch.softmax(LOGITS8[0] / 0.7, -1).roll(1)):
        assert chi2(counts, wrong) > 5 * CHI2_CRIT_DF7
    assert chi2(draw_counts(LOGITS8, 40_000, temperature=1.0), torch.softmax(LOGITS8[0] / 0.7, -1)) > 5 * CHI2_CRIT_DF7


def renormalized(probs: torch.Tensor, keep: list[int]) -> torch.Tensor:
    out = torch.zeros_like(probs)
    out[keep] = probs[keep] / probs[keep].sum()
    return out


@pytest.mark.parametrize("chunk, candidates", [(1024, 1024), (3, 2)])
def test_top_k_and_top_p_sample_the_renormalized_distribution(chunk, candidates, monkeypatch):
    # (3, 2): the two-level draw over chunks of 3 tokens (the last one partial), the nucleus of 5
    # found by the fall-back sort past 2 candidates
    monkeypatch.setattr(sampler_module, "DRAW_CHUNK", chunk)
    monkeypatch.setattr(sampler_module, "TOP_P_CANDIDATES", candidates)
    probs = torch.softmax(LOGITS8[0] / 1.2, -1)
    order = probs.argsort(descending=True).tolist()            # 4, 0, 3, 7, 1, 6, 2, 5
    top3 = draw_counts(LOGITS8, 30_000, temperature=1.2, top_k=3)
    assert chi2(top3, renormalized(probs, order[:3])) < CHI2_CRIT_DF7
    assert chi2(top3, renormalized(probs, order[:4])) > 5 * CHI2_CRIT_DF7
    cum = probs[order].cumsum(0)
    p = float(cum[3] + cum[4]) / 2                             # the nucleus is the top 5
    nucleus = draw_counts(LOGITS8, 30_000, temperature=1.2, top_p=p)
    assert chi2(nucleus, renormalized(probs, order[:5])) < CHI2_CRIT_DF7
    assert chi2(nucleus, probs) > 5 * CHI2_CRIT_DF7


@pytest.mark.parametrize("chunk", [1, 5, 64, 1024])
def test_the_two_level_draw_picks_the_token_of_a_flat_inverse_transform(chunk):
    """The chunked draw gives the index a single float64 cumulative sum over the whole row gives,
    for many uniforms, and never a token of weight 0 (zeros in runs, at chunk ends, at the row's
    end, and u at its largest value)."""
    gen = torch.Generator().manual_seed(8)
    weights = torch.rand(16, 203, generator=gen) ** 3
    weights[weights < 0.05] = 0.0
    weights[:, -7:] = 0.0
    weights[3, :150] = 0.0
    u = torch.cat((torch.rand(16 * 200, generator=gen, dtype=torch.float64),
                   torch.full((16,), 1 - 2.0 ** -33, dtype=torch.float64)))
    w = weights.repeat(201, 1)
    got = sampler_module.inverse_transform(w, u, chunk)
    cum = w.double().cumsum(-1)
    want = torch.searchsorted(cum, (u * cum[:, -1]).unsqueeze(1), right=True).squeeze(1)
    assert bool((w.gather(1, got.unsqueeze(1)) > 0).all())
    assert (got != want).sum() <= 1                     # a target within float32 rounding of a chunk's end
    assert sampler_module.inverse_transform(torch.full((2, 9), float("nan")), u[:2], chunk).tolist() == [-1, -1]


# --- top-k and top-p sets --------------------------------------------------------------------------
def reference_nucleus(row: list[float], temperature: float, k: int, p: float) -> set[int]:
    """Per-row definition: the top-k tokens (ties at the k-th value included), then, over their
    renormalized probabilities in descending order, the shortest prefix whose mass reaches p
    (plus any token tied with its last)."""
    scaled = [x / temperature for x in row]
    order = sorted(range(len(row)), key=lambda i: -scaled[i])
    if 0 < k < len(row):
        kth = scaled[order[k - 1]]
        order = [i for i in order if scaled[i] >= kth]
    top = scaled[order[0]]
    weights = [math.exp(scaled[i] - top) for i in order]
    total, mass, last = sum(weights), 0.0, len(order) - 1
    if p < 1:
        for j, w in enumerate(weights):
            if mass >= p * total:
                last = j - 1
                break
            mass += w
    return {i for i in order if scaled[i] >= scaled[order[last]]}


@pytest.mark.parametrize("candidates", [4, 40, 1024])
def test_top_k_and_top_p_sets_match_a_per_row_reference_and_draws_stay_inside(candidates, monkeypatch):
    # candidates < vocab: the topk-first search of the nucleus, with its fall-back to a sort; a
    # small draw chunk: the two-level draw over many chunks, the last one partial
    monkeypatch.setattr(sampler_module, "TOP_P_CANDIDATES", candidates)
    monkeypatch.setattr(sampler_module, "DRAW_CHUNK", 7)
    n, vocab = 48, 300
    lg = randn(n, vocab, seed=4)
    gen = torch.Generator().manual_seed(5)
    temps = (torch.rand(n, generator=gen) * 1.5 + 0.3).tolist()
    ks = [[0, 1, 5, 40, vocab, vocab + 10][i % 6] for i in range(n)]
    ps = [[1.0, 0.9, 0.5, 0.05, 1e-6, 0.999][(i // 6) % 6] for i in range(n)]
    st = tensors(n, temperature=temps, top_k=ks, top_p=ps, seed=list(range(n)), counter=[0] * n)
    scaled = lg / torch.tensor(temps).unsqueeze(1)
    thr = filter_thresholds(scaled, st)
    for i in range(n):
        want = reference_nucleus(scaled[i].tolist(), 1.0, ks[i], ps[i])
        assert set(torch.nonzero(scaled[i] >= thr[i]).reshape(-1).tolist()) == want, (ks[i], ps[i])
    for c in range(30):
        st = tensors(n, temperature=temps, top_k=ks, top_p=ps, seed=list(range(n)), counter=[c] * n)
        for i, tok in enumerate(sample(lg, st)):
            assert tok in reference_nucleus(lg[i].tolist(), temps[i], ks[i], ps[i])


def test_the_nucleus_does_not_depend_on_how_many_candidates_were_sorted(monkeypatch):
    lg = randn(64, 2000, seed=10)
    ps = torch.tensor([1e-3, 0.2, 0.6, 0.9] * 16)
    full = top_p_thresholds(lg, ps)
    for candidates in (2, 16, 100):            # small nuclei fit; the others fall back to the sort
        monkeypatch.setattr(sampler_module, "TOP_P_CANDIDATES", candidates)
        assert torch.equal(top_p_thresholds(lg, ps), full)
        for i in range(8):                     # one row at a time: each takes its own path
            assert torch.equal(top_p_thresholds(lg[i:i + 1], ps[i:i + 1]), full[i:i + 1]), (candidates, i)


def test_ties_at_the_top_k_boundary_are_all_kept_and_nothing_below():
    lg = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.5]])
    seen = set(sample(lg.expand(2000, -1), tensors(2000, temperature=5.0, top_k=2)))
    assert seen == {0, 2, 3, 4}                                 # the 2nd largest value, 2.0, is tied


def test_filters_that_are_off_change_nothing():
    lg = randn(64, 200, seed=6)
    plain = sample(lg, tensors(64, temperature=0.9))
    assert sample(lg, tensors(64, temperature=0.9, top_k=200)) == plain       # k >= V
    assert sample(lg, tensors(64, temperature=0.9, top_k=10_000)) == plain
    assert sample(lg, tensors(64, temperature=0.9, top_p=1.0, top_k=0)) == plain
    # Rows with p = 1 inside the top-p pass (a caller may list extra rows) keep every token.
    base = tensors(64, temperature=0.9)
    extra = SamplingTensors(base.temperature, base.top_k, base.top_p, base.seed, base.counter,
                            sampled_rows=None, top_p_rows=torch.arange(64), max_top_k=0)
    assert sample(lg, extra) == plain


def test_top_k_1_and_tiny_top_p_give_the_argmax():
    lg = randn(32, 500, seed=7)
    assert sample(lg, tensors(32, temperature=3.0, top_k=1)) == lg.argmax(-1).tolist()
    assert sample(lg, tensors(32, temperature=3.0, top_p=1e-9)) == lg.argmax(-1).tolist()


def test_rows_with_no_finite_logit_get_token_0_and_leave_the_others_alone():
    lg = randn(4, 50, seed=8)
    lg[1] = float("-inf")
    lg[3, :] = float("-inf")
    lg[3, 17] = 0.0                                             # one allowed token
    for kw in (dict(), dict(top_k=5), dict(top_p=0.5), dict(top_k=3, top_p=0.9)):
        out = sample(lg, tensors(4, temperature=1.0, **kw))
        assert out[1] == 0 and out[3] == 17, kw
        assert out[0] in range(50) and out[2] in range(50)


# --- inputs ----------------------------------------------------------------------------------------
def test_bad_parameters_and_shapes_are_refused():
    with pytest.raises(ValueError, match="temperature must be finite and >= 0, got -1"):
        tensors(2, temperature=[1.0, -1.0])
    with pytest.raises(ValueError, match="top_k must be >= 0"):
        tensors(1, top_k=-3)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 0"):
        tensors(1, top_p=0.0)
    with pytest.raises(ValueError, match="2 temperatures but"):
        SamplingTensors.from_lists([1.0, 1.0], [0], [1.0, 1.0], [0, 0], [0, 0])
    with pytest.raises(ValueError, match="with N = 3 rows"):
        Sampler.sample_tensors(torch.zeros(2, 10), tensors(3))
    with pytest.raises(ValueError, match="SamplingTensors.seed must be a 1-D torch.int64"):
        st = tensors(2)
        SamplingTensors(st.temperature, st.top_k, st.top_p, st.seed.float(), st.counter, None, None, 0)


def test_seeds_of_any_size_are_taken_modulo_2_64():
    lg = torch.zeros(1, 1000)
    a = sample(lg, tensors(1, seed=2 ** 64 + 5, counter=3))
    assert a == sample(lg, tensors(1, seed=5, counter=3))
    assert sample(lg, tensors(1, seed=-1, counter=3)) == sample(lg, tensors(1, seed=2 ** 64 - 1, counter=3))


# --- counter-based random numbers ------------------------------------------------------------------
def python_lowbias32(x: int) -> int:
    m = 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x21F0AAAD) & m
    x ^= x >> 15
    x = (x * 0x735A2D97) & m
    return x ^ (x >> 15)


def test_the_hash_equals_its_definition_on_python_ints():
    xs = [0, 1, 2, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 123456789, 0xDEADBEEF]
    assert lowbias32(torch.tensor(xs)).tolist() == [python_lowbias32(x) for x in xs]
    assert python_lowbias32(1) != 1 and len({python_lowbias32(x) for x in range(1000)}) == 1000


@pytest.mark.parametrize("along", ["counter", "seed"])
def test_counter_uniforms_are_uniform_and_fixed_per_pair(along):
    n = 200_000
    fixed, walk = torch.full((n,), 42, dtype=torch.long), torch.arange(n)
    u = counter_uniform(fixed, walk) if along == "counter" else counter_uniform(walk, fixed)
    assert u.dtype == torch.float64 and bool(((u > 0) & (u < 1)).all())
    counts = torch.histc(u.float(), bins=8, min=0, max=1)
    assert chi2(counts, torch.full((8,), 1 / 8)) < CHI2_CRIT_DF7
    # Consecutive counters (or seeds) are not correlated (lag-1 serial correlation ~ N(0, 1/n)).
    x = u - u.mean()
    assert abs(float((x[1:] * x[:-1]).mean() / (x * x).mean())) < 4 / math.sqrt(n)
    pick = torch.tensor([5, 17, 99_999])                   # the same pairs alone: the same numbers
    again = counter_uniform(fixed[:3], pick) if along == "counter" else counter_uniform(pick, fixed[:3])
    assert torch.equal(again, u[pick])


# --- the SamplingParams wrapper --------------------------------------------------------------------
def test_wrapper_rows_equal_the_tensor_call_with_each_requests_seed_and_counter():
    lg = randn(3, 100, seed=9)
    s = Sampler()
    params = [SamplingParams(temperature=1.0, seed=11), SamplingParams(), SamplingParams(temperature=0.8, top_p=0.9, seed=12)]
    for step in range(3):
        got = s.sample(lg, params, [step] * 3)
        st = SamplingTensors.from_lists([1.0, 0.0, 0.8], [0, 0, 0], [1.0, 1.0, 0.9], [11, 0, 12], [step] * 3)
        assert got == sample(lg, st)


# --- devices ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_gpu_draws_the_cpus_tokens():
    """Same integers from the hash, same thresholds, same draws on both devices (the float64 sums
    may differ in their last bits, which moves a draw only when u falls within ~1e-16 of a
    boundary)."""
    n = 256
    lg = randn(n, 5000, seed=11)
    kw = dict(temperature=[[0.0, 0.8, 1.2, 0.7][i % 4] for i in range(n)],
              top_k=[[0, 0, 40, 0][i % 4] for i in range(n)], top_p=[[1.0, 1.0, 1.0, 0.9][i % 4] for i in range(n)],
              seed=list(range(n)))
    cpu = sample(lg, tensors(n, **kw))
    st = tensors(n, **kw)
    on_gpu = SamplingTensors(*(t.cuda() for t in (st.temperature, st.top_k, st.top_p, st.seed, st.counter,
                                                  st.sampled_rows, st.top_p_rows)), max_top_k=st.max_top_k)
    assert Sampler.sample_tensors(lg.cuda(), on_gpu).tolist() == cpu
    assert torch.equal(counter_uniform(st.seed.cuda(), st.counter.cuda()).cpu(), counter_uniform(st.seed, st.counter))
