"""The runner's host work per step does not grow with the number of layers: every tensor built
from host values and every host-to-device move happens once per step (input packing, the
attention metadata, the sampling parameters), never inside a layer. Checked by counting them
(a ``TorchFunctionMode`` plus ``torch.from_numpy``) over the same step run through models of 2
and 5 layers: decode-only on the padded static path (what the CUDA graphs replay, eager here),
decode-only eager, and a mixed step with prefill chunks after cached context. Also: a step's
inputs and sampling parameters cross to the device in ONE copy (two under a graph: its static
inputs, then the rest), counted on a packing upload on the CPU.
"""
from __future__ import annotations
from tests.support.paths import REPO

import collections
import random
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from engine.runner.cuda_graphs import DecodeGraphs
from engine.runner.model_runner import ModelRunner
from engine.outputs import NewRequestData, ScheduledRequest, SchedulerOutput
from engine.request import SamplingParams
from engine.runner.buffers import StepUpload
from engine.model.tiny_model import tiny_llama

ENGINE = REPO / "engine"

BLOCK_SIZE, NUM_BLOCKS, MAX_NUM_SEQS, MAX_MODEL_LEN = 4, 96, 8, 64
pytestmark = pytest.mark.usefixtures("one_torch_thread")

FACTORIES = {"tensor", "as_tensor", "arange", "full", "zeros", "ones", "linspace", "randperm"}


class HostWork(TorchFunctionMode):
    """Counts tensors made from host values or host-chosen shapes (``FACTORIES``; allocations
    such as ``empty`` are not counted) and moves between devices (``.to`` / ``.cuda`` with a
    device, ``.copy_``, ``.pin_memory``), by function name; ``counts`` has them all,
    ``engine_counts`` those called from the engine's own code (not transformers')."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.engine_counts: collections.Counter = collections.Counter()

    def count(self, name: str) -> None:
        self.counts[name] += 1
        if Path(sys._getframe(2).f_code.co_filename).is_relative_to(ENGINE):
            self.engine_counts[name] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in FACTORIES or name in ("copy_", "pin_memory", "cuda"):
            self.count(name)
        elif name == "to" and any(isinstance(a, (torch.device, str)) for a in (*args[1:], kwargs.get("device"))):
            self.count("to(device)")
        return func(*args, **kwargs)


def count_host_work(monkeypatch, fn) -> HostWork:
    """What ``fn()`` does on the host, as :class:`HostWork` counts, plus ``from_numpy`` calls."""
    real = torch.from_numpy
    mode = HostWork()

    def from_numpy(a):
        mode.count("from_numpy")
        return real(a)
    with monkeypatch.context() as m:
        m.setattr(torch, "from_numpy", from_numpy)
        with mode:
            fn()
    return mode


def make_runner(num_layers: int, graphs: bool, copy: bool = False, model_impl: str = "auto") -> ModelRunner:
    model = tiny_llama(0, num_hidden_layers=num_layers)
    runner = ModelRunner(model, NUM_BLOCKS, BLOCK_SIZE, max_num_seqs=MAX_NUM_SEQS, max_model_len=MAX_MODEL_LEN,
                         model_impl=model_impl)
    if copy:
        runner.upload = StepUpload("cpu", copy=True)           # packs and copies, as on a GPU
    if graphs:
        runner.graphs = DecodeGraphs(runner.forward, runner.kv_caches, BLOCK_SIZE, runner.scratch_block, MAX_NUM_SEQS,
                                     MAX_MODEL_LEN, progress=False)
    return runner


def step(query_lens: list[int], seed: int = 0, prefix: str = "r") -> SchedulerOutput:
    """One step of new requests ``<prefix>0``, ``<prefix>1``, ..., request i scheduling
    ``query_lens[i]`` tokens after ``10 + 3 i - query_lens[i]`` cached ones; odd requests sample
    (temperature, top-p, seeded), even ones are greedy."""
    rng = random.Random(seed)
    free = list(range(NUM_BLOCKS))
    rng.shuffle(free)
    new, scheduled = [], []
    for i, q in enumerate(query_lens):
        ctx = 10 + 3 * i
        table = tuple(free.pop() for _ in range(-(-ctx // BLOCK_SIZE)))
        params = (SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=4) if i % 2
                  else SamplingParams(max_tokens=4))
        rid = f"{prefix}{i}"
        new.append(NewRequestData(rid, [rng.randrange(3, 500) for _ in range(ctx)], (), params, table, ctx - q))
        scheduled.append(ScheduledRequest(rid, i, q, ctx - q, False, ()))
    return SchedulerOutput(step=0, scheduled=tuple(scheduled), scheduled_new_reqs=tuple(new))


STEPS = {"decode-only, padded static path": (True, [1] * 6),
         "decode-only, eager": (False, [1] * 6),
         "mixed: decodes and prefill chunks after cached context": (False, [1, 1, 1, 7, 4, 1])}


@pytest.mark.parametrize("model_impl", ["batchscope", "transformers"])
@pytest.mark.parametrize("name", list(STEPS))
def test_host_work_per_step_does_not_depend_on_the_number_of_layers(monkeypatch, name, model_impl):
    graphs, query_lens = STEPS[name]
    counts = {}
    for layers in (2, 5):
        runner = make_runner(layers, graphs, model_impl=model_impl)
        counts[layers] = count_host_work(monkeypatch, lambda: runner.execute(step(query_lens))).counts
    assert counts[2] == counts[5], name
    assert counts[2]["from_numpy"] > 0                    # the counter sees the step's own host work


def test_the_count_catches_host_work_inside_a_layer(monkeypatch):
    """The check above can fail: a layer that builds a tensor from host values is caught."""
    counts = {}
    for layers in (2, 5):
        runner = make_runner(layers, graphs=False, model_impl="transformers")    # hooks on its layers
        def host_tensor(*_):
            torch.tensor([0])                             # returns None: the layer's inputs stay
        for layer in runner.model.model.layers:
            layer.register_forward_pre_hook(host_tensor)
        counts[layers] = count_host_work(monkeypatch, lambda: runner.execute(step([1, 7, 1]))).counts
    assert counts[5]["tensor"] - counts[2]["tensor"] == 3


@pytest.mark.parametrize("name", list(STEPS))
def test_a_step_moves_its_inputs_and_sampling_parameters_in_one_copy(monkeypatch, name):
    graphs, query_lens = STEPS[name]
    runner = make_runner(2, graphs, copy=True)
    static = []
    if graphs:
        real = runner.graphs._upload
        monkeypatch.setattr(runner.graphs, "_upload", lambda: (static.append(1), real()))
    counts = count_host_work(monkeypatch, lambda: runner.execute(step(query_lens))).engine_counts
    assert runner.upload.sends == 1
    assert len(static) == (1 if graphs else 0)            # a graph's static inputs: one copy of their own
    assert counts["to(device)"] == 0 and counts["from_numpy"] == 0   # nothing else crossed on its own


def test_the_step_upload_carries_what_the_per_array_path_carried():
    """The same tokens whether the step's arrays are packed and copied or handed over as they are."""
    outs = []
    for copy in (False, True):
        runner = make_runner(2, graphs=False, copy=copy)
        outs.append(runner.execute(step([1, 1, 7, 4, 1, 1], seed=3)).sampled_token_ids)
    assert outs[0] == outs[1] and len(outs[0]) == 6


def test_a_step_that_fails_while_staging_leaves_the_next_step_unharmed(monkeypatch):
    from engine.runner.attention import PagedAttentionMetadata

    runner = make_runner(2, graphs=False, copy=True)
    real = PagedAttentionMetadata.stage

    def fail_once(*args):
        monkeypatch.setattr(PagedAttentionMetadata, "stage", real)
        raise RuntimeError("staging failed")
    monkeypatch.setattr(PagedAttentionMetadata, "stage", staticmethod(fail_once))
    with pytest.raises(RuntimeError, match="staging failed"):
        runner.execute(step([1, 7, 1]))          # the inputs and sampling were staged, never sent
    fresh = make_runner(2, graphs=False, copy=True)
    nxt = step([1, 4], seed=9, prefix="n")
    assert runner.execute(nxt).sampled_token_ids == fresh.execute(nxt).sampled_token_ids
