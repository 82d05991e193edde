"""The forward's Triton kernels (residual add + RMSNorm, RoPE) against the torch ops they replace,
and the whole fused forward with them against transformers' logits. Without a GPU the kernels run
on CPU tensors through the Triton interpreter (``TRITON_INTERPRET=1``, set by tests/conftest.py
before triton is imported); with CUDA they run compiled. Skipped where triton is not installed."""
from __future__ import annotations

import copy
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")

from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from engine.runner.forward.layers import add_rms_norm, apply_rope, rms_norm, rope_table  # noqa: E402
from engine.runner.forward.llama import LlamaForward  # noqa: E402
from engine.runner.forward.triton_layers import add_rms_norm_triton, apply_rope_triton  # noqa: E402
from tests.engine.runner.forward.test_llama_forward import (  # noqa: E402
    full_logits, make_model, run_schedule)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRET else "cpu")
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", [64, 96])           # 96: a row shorter than its power-of-two block
def test_add_rms_norm_kernel_equals_the_torch_ops(dtype, hidden):
    gen = torch.Generator().manual_seed(0)
    x, res = (torch.randn(5, hidden, generator=gen).to(DEVICE, dtype) for _ in range(2))
    w = (torch.rand(hidden, generator=gen) + 0.5).to(DEVICE, dtype)
    out, new_res = add_rms_norm_triton(x, res, w, 1e-6)
    want, want_res = add_rms_norm(x, res, w, 1e-6)
    # one bf16 rounding apart at most: the interpreter's float32 -> bf16 cast truncates
    torch.testing.assert_close(new_res, want_res, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(out, want, rtol=TOL[dtype], atol=TOL[dtype])
    first, same = add_rms_norm_triton(x, None, w, 1e-6)             # the first layer: no residual yet
    assert same is x
    torch.testing.assert_close(first, rms_norm(x, w, 1e-6), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads, head_dim", [(6, 16), (3, 24)])   # 3 heads / 12-wide halves: padded blocks
def test_rope_kernel_equals_the_torch_ops(dtype, heads, head_dim):
    cfg = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, head_dim=head_dim)
    table = rope_table(LlamaRotaryEmbedding(cfg), 64, dtype, DEVICE)
    assert table.shape == (64, head_dim)
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(7, heads + 2, head_dim, generator=gen).to(DEVICE, dtype)
    x = qkv[:, :heads]                                                # strided, as the forward's view
    pos = torch.tensor([0, 5, 63, 2, 2, 17, 40], device=DEVICE)
    got = apply_rope_triton(x, table, pos)
    want = apply_rope(x, table.index_select(0, pos))
    torch.testing.assert_close(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    assert not torch.equal(want, x)                                   # the rotation did something


def test_the_fused_forward_with_kernels_equals_transformers_over_mixed_steps():
    model = make_model("llama GQA, untied")
    reference = copy.deepcopy(model)
    ours, seqs = run_schedule(LlamaForward(model, fused_kernels=True), model)
    for r, ids in seqs.items():
        torch.testing.assert_close(ours[r], full_logits(reference, ids), rtol=0, atol=1e-4)
