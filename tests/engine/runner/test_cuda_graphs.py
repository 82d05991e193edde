"""Decode-only steps on the padded static path of ``engine.runner.cuda_graphs`` (what the CUDA graphs
replay) against the eager runner: the capture-size ladder, the same logits and tokens for decode
batches of every size, pad rows that never write a real block, no host sync in the captured body,
the capture loop (with a stand-in for ``torch.cuda``'s graph API), a whole engine run equal to
``generate()``; on a GPU, real graphs captured and replayed against eager.

The model is a tiny random-weight Llama on one thread (fp32): the static path attends over every
block-table entry under a mask where the eager one attends over each request's own context, so
logits agree to float rounding, not bit for bit.
"""
from __future__ import annotations

import contextlib
import copy
import random

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from engine.config import EngineConfig
from engine.runner.attention.triton_attention import triton_available
from engine.runner.cuda_graphs import (CAPTURE_DESC, DecodeGraphs, capture_sizes, decode_backend, enable_cuda_graphs,
                                padded_size)
from engine.runner.model_runner import ModelRunner
from engine.outputs import NewRequestData, ScheduledRequest, SchedulerOutput
from engine.request import Request, SamplingParams
from engine.vocab import RequestStatus
from engine.model.tiny_model import tiny_llama

BLOCK_SIZE, MAX_MODEL_LEN, MAX_NUM_SEQS = 4, 64, 12
NUM_BLOCKS = MAX_NUM_SEQS * MAX_MODEL_LEN // BLOCK_SIZE + 8
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fresh_model():
    """The test's random Llama, a new copy (a runner switches its model's attention to paged)."""
    return tiny_llama(0, vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=2)


@pytest.fixture(scope="module")
def model():
    return fresh_model()


def runner_pair(model, device="cpu", **graph_args):
    """An eager runner and a runner with decode graphs over the same model, their caches filled
    with the same noise (a wrong slot or an unmasked position shows in the outputs)."""
    eager = ModelRunner(model, NUM_BLOCKS, BLOCK_SIZE)
    graphs = ModelRunner(model, NUM_BLOCKS, BLOCK_SIZE)
    gen = torch.Generator().manual_seed(1)
    for (k0, v0), (k1, v1) in zip(eager.kv_caches, graphs.kv_caches):
        for a, b in ((k0, k1), (v0, v1)):
            a.copy_(torch.randn(a.shape, generator=gen))
            b.copy_(a)
    graphs.graphs = DecodeGraphs(graphs.forward, graphs.kv_caches, BLOCK_SIZE, graphs.scratch_block, MAX_NUM_SEQS,
                                 MAX_MODEL_LEN, progress=False, **graph_args)
    return eager, graphs


def decode_step(n: int, seed: int):
    """``n`` requests each decoding one token at a random position, over disjoint random block
    tables; returns (SchedulerOutput, requests by id, the (block, offset) slots the step writes)."""
    rng = random.Random(seed)
    free = list(range(NUM_BLOCKS))
    rng.shuffle(free)
    scheduled, requests, written, tables = [], {}, set(), []
    for i in range(n):
        pos = rng.randrange(MAX_MODEL_LEN)
        table = tuple(free.pop() for _ in range(pos // BLOCK_SIZE + 1))
        req = Request(f"r{i}", [rng.randrange(3, 512) for _ in range(pos + 1)], GREEDY)
        req.num_computed_tokens = pos
        requests[req.request_id] = req
        scheduled.append(ScheduledRequest(req.request_id, i, 1, pos, False, ()))
        tables.append(table)
        written.add((table[-1], pos % BLOCK_SIZE))
    new = tuple(NewRequestData(r.request_id, r.prompt_token_ids, (), r.sampling_params, table,
                               s.num_computed_tokens) for r, s, table in zip(requests.values(), scheduled, tables))
    return SchedulerOutput(step=0, scheduled=tuple(scheduled), scheduled_new_reqs=new), requests, written


def run_with_logits(runner, sched, requests):
    """``runner.execute`` and the logits it sampled from."""
    seen = []
    sample = runner._sample

    def keep(logits, *args):
        seen.append(logits.float().clone())
        return sample(logits, *args)
    runner._sample = keep
    try:
        out = runner.execute(sched)
    finally:
        del runner._sample
    return out.sampled_token_ids, seen[0]


def test_ladder_is_vllms_and_pads_to_the_smallest_size_that_holds_the_batch():
    assert capture_sizes(16) == [1, 2, 4, 8, 16]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert capture_sizes(300) == [1, 2, 4] + list(range(8, 256, 8)) + [256, 272, 288, 300]
    assert capture_sizes(4096)[-3:] == [480, 496, 512]
    sizes = capture_sizes(300)
    for n in range(1, 301):
        b = padded_size(n, sizes)
        assert b in sizes and b >= n
        assert all(s < n for s in sizes if s < b), n
    for bad in (0, 301):
        with pytest.raises(ValueError, match="1 to 300 requests"):
            padded_size(bad, sizes)


def test_graphs_decode_with_the_triton_kernel_on_cuda_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("BATCHSCOPE_ATTENTION", raising=False)
    assert decode_backend(torch.device("cpu")) == "reference"
    assert decode_backend(torch.device("cuda")) == ("triton" if triton_available() else "reference")
    monkeypatch.setenv("BATCHSCOPE_ATTENTION", "reference")
    assert decode_backend(torch.device("cuda")) == "reference"
    monkeypatch.setenv("BATCHSCOPE_ATTENTION", "triton")
    assert decode_backend(torch.device("cpu")) == "reference"       # no compiled kernels off CUDA


def test_padded_static_decode_equals_the_eager_runner_for_every_batch_size(model):
    eager, graphs = runner_pair(model)
    before = [(k.clone(), v.clone()) for k, v in graphs.kv_caches]
    for n in range(1, MAX_NUM_SEQS + 1):
        sched, requests, written = decode_step(n, seed=n)
        toks_e, logits_e = run_with_logits(eager, sched, requests)
        toks_g, logits_g = run_with_logits(graphs, sched, requests)
        assert graphs.graphs.padded_size(n) >= n
        torch.testing.assert_close(logits_g, logits_e, rtol=1e-5, atol=1e-5)
        assert toks_g == toks_e and len(toks_g) == n
        for (ke, ve), (kg, vg), (k0, v0) in zip(eager.kv_caches, graphs.kv_caches, before):
            real = slice(0, NUM_BLOCKS)              # every block but the scratch block
            torch.testing.assert_close(kg[real], ke[real], rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(vg[real], ve[real], rtol=1e-6, atol=1e-6)
            changed = {(int(b), int(o)) for b, o in
                       ((kg[real] != k0[real]).any(-1).any(-1) | (vg[real] != v0[real]).any(-1).any(-1)).nonzero()}
            assert changed == written, n
            k0.copy_(kg)
            v0.copy_(vg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the kernels run compiled on CUDA tensors there: "
                    "test_cuda_graph_replay_equals_eager[triton-*] checks them")
def test_triton_decode_kernel_on_the_static_path_equals_the_eager_runner(model):
    """The GPU's attention (our Triton decode kernel and K/V store, here under the Triton
    interpreter) over the static padded buffers, against the eager runner (the torch reference)."""
    pytest.importorskip("triton")
    eager, graphs = runner_pair(model, backend="triton", capture=False)
    assert graphs.graphs.metas[8].decode_plan[:, :2].tolist() == [[i, i] for i in range(8)]
    for n in (1, 3, 8, MAX_NUM_SEQS):
        sched, requests, _ = decode_step(n, seed=50 + n)
        toks_e, logits_e = run_with_logits(eager, sched, requests)
        toks_g, logits_g = run_with_logits(graphs, sched, requests)
        torch.testing.assert_close(logits_g, logits_e, rtol=1e-4, atol=1e-4)
        assert toks_g == toks_e
        for (ke, ve), (kg, vg) in zip(eager.kv_caches, graphs.kv_caches):      # layer 1's K/V carry
            torch.testing.assert_close(kg[:NUM_BLOCKS], ke[:NUM_BLOCKS], rtol=1e-4, atol=1e-4)   # rounding
            torch.testing.assert_close(vg[:NUM_BLOCKS], ve[:NUM_BLOCKS], rtol=1e-4, atol=1e-4)


def test_pad_rows_write_only_the_scratch_block(model):
    _, graphs = runner_pair(model)
    dg = graphs.graphs
    sched, requests, written = decode_step(5, seed=3)          # 5 requests padded to 8 rows
    assert dg.padded_size(5) == 8
    before = [k.clone() for k, _ in graphs.kv_caches]
    graphs.execute(sched)
    for (k, _), k0 in zip(graphs.kv_caches, before):
        assert not torch.equal(k[graphs.scratch_block], k0[graphs.scratch_block])     # the pads wrote there
        changed = {(int(b), int(o)) for b, o in (k[:NUM_BLOCKS] != k0[:NUM_BLOCKS]).any(-1).any(-1).nonzero()}
        assert changed == written
    # the staged rows: the batch, then pads at position 0 over the scratch block
    assert dg.positions[5:8].tolist() == [0, 0, 0]
    assert (dg.block_tables[5:8] == graphs.scratch_block).all()
    assert dg.metas[8].slot_mapping[5:].tolist() == [graphs.scratch_block * BLOCK_SIZE] * 3
    assert dg.metas[8].context_lens[5:].tolist() == [1, 1, 1]


def test_mixed_steps_and_big_batches_stay_eager(model):
    _, graphs = runner_pair(model)
    dg = graphs.graphs
    assert dg.handles(MAX_NUM_SEQS, MAX_NUM_SEQS) and dg.handles(1, 1)
    assert not dg.handles(3, 4)                                  # a prefill chunk in the step
    assert not dg.handles(MAX_NUM_SEQS + 1, MAX_NUM_SEQS + 1)    # above the largest capture size
    assert not dg.handles(0, 0)
    with pytest.raises(ValueError, match="longer than max_model_len"):
        dg.stage([1], [0], [list(range(MAX_MODEL_LEN // BLOCK_SIZE + 1))])


def test_a_dense_block_table_stages_like_lists(model):
    _, graphs = runner_pair(model)
    dg = graphs.graphs
    tables = [[7, 3, 9], [4], [11, 12]]
    dense = torch.tensor([[7, 3, 9], [4, 0, 0], [11, 12, 0]])     # an input batch's table, 0-padded
    assert dg.stage([5, 6, 7], [9, 2, 5], tables) == 4
    from_lists = dg.block_tables[:4].clone()
    assert dg.stage([5, 6, 7], [9, 2, 5], dense) == 4
    assert dg.block_tables[:3, :3].tolist() == dense.tolist()
    assert torch.equal(dg.block_tables[:, 3:][:4], from_lists[:, 3:])       # the rest: scratch, as before
    assert dg.block_tables[3].tolist() == from_lists[3].tolist()            # the pad row
    dg._forward(4)
    assert dg.metas[4].slot_mapping.tolist() == [9 * BLOCK_SIZE + 1, 4 * BLOCK_SIZE + 2, 12 * BLOCK_SIZE + 1,
                                                 graphs.scratch_block * BLOCK_SIZE]


class HostSyncError(AssertionError):
    pass


class _ForbidSyncOps(TorchDispatchMode):
    """Ops that read device data on the host or whose output shape depends on it."""

    FORBIDDEN = {"_local_scalar_dense", "nonzero", "masked_select", "equal", "is_nonzero", "unique",
                 "_unique2", "unique_consecutive", "repeat_interleave"}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.FORBIDDEN:
            raise HostSyncError(f"host sync in the captured body: {func}")
        return func(*args, **(kwargs or {}))


class _ForbidSyncMethods(TorchFunctionMode):
    """Tensor methods that hand device data to Python (on a CPU ``.tolist()`` and friends read
    memory directly, below the dispatcher)."""

    FORBIDDEN = {"tolist", "numpy", "item", "cpu", "__bool__", "__int__", "__float__", "__index__"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in self.FORBIDDEN:
            raise HostSyncError(f"host sync in the captured body: Tensor.{func.__name__}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def forbid_host_sync():
    """Raise :class:`HostSyncError` on anything a CUDA graph cannot capture: a read of device data
    on the host (``.item()``, ``.tolist()``, ``bool()`` of a tensor) or a data-dependent shape."""
    with _ForbidSyncMethods(), _ForbidSyncOps():
        yield


def test_the_captured_body_never_syncs_with_the_host(model):
    eager, graphs = runner_pair(model)
    dg = graphs.graphs
    sched, requests, _ = decode_step(7, seed=5)
    ids = [requests[s.request_id].token_ids(s.num_computed_tokens, s.num_computed_tokens + 1)[0]
           for s in sched.scheduled]
    b = dg.stage(ids, [s.num_computed_tokens for s in sched.scheduled], [n.block_ids for n in sched.scheduled_new_reqs])
    with torch.inference_mode(), forbid_host_sync():
        dg._forward(b)
    # the check can fail: the eager runner's forward does sync (transformers' packed-sequence check),
    # and so does a .tolist() on a CPU tensor
    with torch.inference_mode(), forbid_host_sync(), pytest.raises(HostSyncError, match="__bool__|_local_scalar_dense"):
        eager.model.model(input_ids=dg.input_ids[:b].unsqueeze(0), position_ids=dg.positions[:b].unsqueeze(0),
                          use_cache=False, paged_meta=dg.metas[b])
    with forbid_host_sync(), pytest.raises(HostSyncError, match="tolist"):
        dg.positions.tolist()


class FakeGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` on a CPU: records captures and replays."""
    log: list = []

    def __init__(self):
        self.size = None

    def replay(self):
        FakeGraph.log.append(("replay", self.size))


def test_capture_warms_up_then_captures_each_size_largest_first_into_one_pool(model, monkeypatch, capsys):
    _, graphs = runner_pair(model, capture=False)
    dg = graphs.graphs
    forwards = []
    real_forward = dg._forward
    monkeypatch.setattr(dg, "_forward", lambda b: (forwards.append(b), real_forward(b)))
    capturing = []

    class FakeCapture:
        def __init__(self, graph, pool):
            self.graph, self.pool = graph, pool

        def __enter__(self):
            capturing.append(self.pool)
            self.graph.size = forwards[-1]          # the warm-up just ran at this size

        def __exit__(self, *exc):
            FakeGraph.log.append(("captured", forwards[-1]))

    FakeGraph.log = []
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "pool")
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", FakeCapture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    dg.use_graphs = True
    dg.capture(progress=True)
    assert CAPTURE_DESC in capsys.readouterr().err
    sizes = capture_sizes(MAX_NUM_SEQS)
    assert forwards == [b for b in sizes[::-1] for _ in range(2)]      # warm-up, then the capture
    assert FakeGraph.log == [("captured", b) for b in sizes[::-1]]
    assert capturing == ["pool"] * len(sizes) and sorted(dg.graphs) == sizes
    # a warm-up batch is all padding: every row over the scratch block
    assert (dg.block_tables[:sizes[-1]] == graphs.scratch_block).all()
    FakeGraph.log = []
    forwards.clear()
    for n in (1, 3, 5, 9, 12):
        sched, requests, _ = decode_step(n, seed=n)
        graphs.execute(sched)
    assert FakeGraph.log == [("replay", b) for b in (1, 4, 8, 12, 12)]
    assert forwards == []                                   # replays only, no eager forward


def test_capture_needs_cuda(model):
    runner = ModelRunner(model, NUM_BLOCKS, BLOCK_SIZE)
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ValueError, match="need a CUDA device"):
        DecodeGraphs(runner.forward, runner.kv_caches, BLOCK_SIZE, runner.scratch_block, 4, MAX_MODEL_LEN, capture=True)


def test_engine_with_cuda_graphs_on_equals_generate():
    """Greedy outputs with chunked prefill and preemption, decode steps on the padded path, equal
    generate() on each request alone."""
    from tests.support.engine_driver import Arrival, run_workload

    rng = random.Random(0)
    arrivals = [Arrival(f"r{i}", rng.choice([0, 0, 1, 3]),
                        tuple(rng.randrange(3, 512) for _ in range(rng.randint(3, 40))),
                        SamplingParams(max_tokens=rng.randint(4, 16), ignore_eos=True)) for i in range(10)]
    refs, model = {}, fresh_model()
    for a in arrivals:
        ids = torch.tensor([list(a.prompt)])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=-1,
                                 pad_token_id=0, max_new_tokens=a.params.max_tokens)
        refs[a.request_id] = out[0, ids.shape[1]:].tolist()
    config = EngineConfig(block_size=BLOCK_SIZE, num_gpu_blocks=24, max_model_len=MAX_MODEL_LEN, max_num_seqs=6,
                          max_num_batched_tokens=32, cuda_graphs=True)
    runner = ModelRunner(fresh_model(), config.num_gpu_blocks, config.block_size)
    enable_cuda_graphs(runner, config)
    calls = []
    run = runner.graphs.run
    runner.graphs.run = lambda *a: (calls.append(len(a[0])), run(*a))[1]
    result = run_workload(config, arrivals, runner=runner)
    for a in arrivals:
        req = result.requests[a.request_id]
        assert req.status is RequestStatus.FINISHED_LENGTH, (a.request_id, req.error)
        assert req.output_token_ids == refs[a.request_id], a.request_id
    assert result.num_preemptions > 0 and len(set(calls)) > 2     # decode batches of several sizes


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_seeded_parallel_sampling_and_preemption_are_unchanged_with_graphs_on(mode):
    """Seeded sampling (per-request generators), parallel sampling's copy-on-write and a group
    preempted under a tight cache (recompute or swap): the same outputs with graphs on as off."""
    from tests.support.engine_driver import Arrival, distinct_prompt, run_workload

    swap = {"preemption_mode": "swap", "num_cpu_blocks": 16} if mode == "swap" else {}
    config = EngineConfig(block_size=4, num_gpu_blocks=16, max_num_seqs=4, max_num_batched_tokens=32, **swap)
    arrivals = [Arrival("s", 0, distinct_prompt(1, 9, 500), SamplingParams(max_tokens=12, ignore_eos=True)),
                Arrival("g", 1, distinct_prompt(0, 13, 500),
                        SamplingParams(max_tokens=12, n=3, temperature=1.0, seed=7, ignore_eos=True))]
    results = {}
    for graphs in (False, True):
        cfg = config.replace(cuda_graphs=graphs)
        runner = ModelRunner(fresh_model(), cfg.num_gpu_blocks, cfg.block_size, num_cpu_blocks=cfg.num_cpu_blocks)
        enable_cuda_graphs(runner, cfg)
        assert (runner.graphs is not None) == graphs
        results[graphs] = run_workload(cfg, arrivals, runner=runner)
    assert results[True].outputs() == results[False].outputs()
    assert len({tuple(results[True].outputs()[f"g#{k}"]) for k in range(3)}) == 3
    assert results[True].num_preemptions > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: captures and replays real graphs")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_cuda_graph_replay_equals_eager(model, dtype, backend):
    if backend == "triton":
        pytest.importorskip("triton")
    gpu_model = copy.deepcopy(model).to("cuda", dtype)
    replayed = ModelRunner(gpu_model, NUM_BLOCKS, BLOCK_SIZE)
    eager = ModelRunner(gpu_model, NUM_BLOCKS, BLOCK_SIZE)
    for (k0, v0), (k1, v1) in zip(eager.kv_caches, replayed.kv_caches):
        k0.normal_(), v0.normal_()
        k1.copy_(k0), v1.copy_(v0)
    replayed.graphs = DecodeGraphs(replayed.forward, replayed.kv_caches, BLOCK_SIZE, replayed.scratch_block,
                                   MAX_NUM_SEQS, MAX_MODEL_LEN, backend=backend, progress=False)
    assert replayed.graphs.use_graphs and sorted(replayed.graphs.graphs) == capture_sizes(MAX_NUM_SEQS)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for n in range(1, MAX_NUM_SEQS + 1):
        sched, requests, _ = decode_step(n, seed=100 + n)
        _, logits_e = run_with_logits(eager, sched, requests)
        _, logits_g = run_with_logits(replayed, sched, requests)
        torch.testing.assert_close(logits_g, logits_e, rtol=tol, atol=tol)
        for (ke, _), (kg, _) in zip(eager.kv_caches, replayed.kv_caches):
            torch.testing.assert_close(kg[:NUM_BLOCKS], ke[:NUM_BLOCKS], rtol=tol, atol=tol)
