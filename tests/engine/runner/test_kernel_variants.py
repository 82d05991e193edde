"""No Triton compile after warm-up: every kernel variant the engine's steps launch is one that
``warm_up_kernels`` (run when the runner is built) already launched.

Triton compiles a kernel once per distinct specialization key: its constexprs, each pointer's
dtype and 16-byte alignment, and for each integer argument (unless listed in ``do_not_specialize``)
whether it is 1 and whether it is divisible by 16, plus ``num_warps``. Off a GPU nothing compiles,
so the launches are recorded (kernels replaced by a recorder that zero-fills the outputs) and
their keys computed that way, with the GPU's constexprs (``INTERPRETED`` off), while an engine on
a tiny model serves mixed batches: chunked prefills, decode batches of changing sizes and
contexts long enough for several split counts."""
from __future__ import annotations

import inspect
import random
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")

from engine.config import EngineConfig  # noqa: E402
from engine.engine import LLMEngine  # noqa: E402
from engine.request import SamplingParams  # noqa: E402
from engine.runner import model_runner  # noqa: E402
from engine.runner.attention import registry  # noqa: E402
from engine.runner.attention import triton_attention as ta  # noqa: E402
from engine.runner.model_runner import ModelRunner  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
KERNELS = ("store_kvcache_kernel", "paged_decode_kernel", "decode_reduce_kernel", "paged_prefill_kernel")


def _specialization_key(name: str, fn, args: tuple, kwargs: dict, unspecialized: set[str]) -> tuple:
    params = inspect.signature(getattr(fn, "fn", fn)).parameters
    values = {**dict(zip(params, args)), **kwargs}
    key = [name, kwargs.get("num_warps")]
    for pname, p in params.items():
        v = values[pname]
        if str(p.annotation).endswith("constexpr"):
            key.append((pname, v))
        elif isinstance(v, torch.Tensor):
            key.append((pname, v.dtype, v.data_ptr() % 16 == 0))
        elif isinstance(v, int) and pname not in unspecialized:
            key.append((pname, v == 1, v % 16 == 0, -2**31 <= v < 2**31))
        elif isinstance(v, int):
            key.append((pname, -2**31 <= v < 2**31))
        else:
            key.append((pname, type(v).__name__))
    return tuple(key)


class _Launches:
    """Replaces the kernels module: ``module.<kernel>[grid](*args, **kwargs)`` records the launch's
    key and zero-fills its output tensor (nothing runs)."""

    def __init__(self) -> None:
        from engine.runner.attention import triton_kernels
        self.keys: list[tuple] = []
        self.splits: set[int] = set()
        self.unspecialized = set(triton_kernels.UNSPECIALIZED)
        self.module = SimpleNamespace(**{n: _Kernel(self, n, getattr(triton_kernels, n)) for n in KERNELS})

    def record(self, name: str, fn, args: tuple, kwargs: dict) -> None:
        self.keys.append(_specialization_key(name, fn, args, kwargs, self.unspecialized))
        if name == "paged_decode_kernel":
            self.splits.add(kwargs["NUM_SPLITS"])
        if name in ("paged_decode_kernel", "paged_prefill_kernel"):
            args[0].zero_()


class _Kernel:
    def __init__(self, owner: _Launches, name: str, fn) -> None:
        self.owner, self.name, self.fn = owner, name, fn

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.owner.record(self.name, self.fn, args, kwargs)


def test_no_kernel_variant_is_launched_after_warm_up_that_warm_up_did_not_launch(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    launches = _Launches()
    monkeypatch.setattr(ta, "_kernels", lambda: launches.module)
    monkeypatch.setattr(ta, "_interpreting", lambda: False)
    monkeypatch.setattr(model_runner, "triton_selected", lambda device: True)
    monkeypatch.setattr(registry, "select_paged_attention", lambda query: ta.paged_attention_triton)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=300, max_position_embeddings=2048)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ecfg = EngineConfig(num_gpu_blocks=200, block_size=16, max_num_batched_tokens=128, max_num_seqs=8,
                        max_model_len=1024, clock="virtual", cuda_graphs=False)
    runner = ModelRunner.from_config(model, ecfg)
    warm = set(launches.keys)
    assert launches.splits == set(ta.SPLIT_BUCKETS)
    launches.keys.clear()
    launches.splits.clear()
    eng = LLMEngine(ecfg, runner, ecfg.num_gpu_blocks)
    rng = random.Random(0)
    for i, prompt_len in enumerate((900, 40, 7, 300, 1, 130, 600, 16)):
        eng.add_request([rng.randint(1, 299) for _ in range(prompt_len)],
                        SamplingParams(max_tokens=rng.randint(3, 12), ignore_eos=True), request_id=f"r{i}")
    eng.run_until_done()
    assert len(launches.splits) >= 2          # the workload made several split counts, not just one
    new = set(launches.keys) - warm
    assert not new, f"{len(new)} variants compiled after warm-up, e.g. {sorted(map(str, new))[:2]}"
