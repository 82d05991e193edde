"""Which paged attention the transformers hook runs: the torch reference on the CPU (with or without
triton installed), the Triton kernels only for CUDA tensors."""
from __future__ import annotations

import pytest
import torch

from engine.attention.reference import paged_attention
from engine.attention.registry import select_paged_attention
from engine.attention.triton_attention import paged_attention_triton, triton_available


def test_cpu_always_runs_the_reference():
    assert select_paged_attention(torch.zeros(1, 4, 3, 16)) is paged_attention


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_runs_triton_when_importable(monkeypatch):
    q = torch.zeros(1, 4, 3, 16, device="cuda")
    want = paged_attention_triton if triton_available() else paged_attention
    assert select_paged_attention(q) is want
    monkeypatch.setenv("BATCHSCOPE_ATTENTION", "reference")
    assert select_paged_attention(q) is paged_attention
