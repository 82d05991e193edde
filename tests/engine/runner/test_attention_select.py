"""Which paged attention the transformers hook runs: the torch reference on the CPU (with or without
triton installed, whatever is asked), the Triton kernels on CUDA unless ``BATCHSCOPE_ATTENTION=reference``."""
from __future__ import annotations

import pytest
import torch

from engine.runner.attention.reference import paged_attention
from engine.runner.attention.registry import select_paged_attention
from engine.runner.attention.triton_attention import paged_attention_triton, triton_available


@pytest.mark.parametrize("ask", ["", "triton", "reference"])
def test_cpu_always_runs_the_reference(monkeypatch, ask):
    monkeypatch.setenv("BATCHSCOPE_ATTENTION", ask)
    assert select_paged_attention(torch.zeros(1, 4, 3, 16)) is paged_attention


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_runs_triton_unless_the_reference_is_asked_for(monkeypatch):
    q = torch.zeros(1, 4, 3, 16, device="cuda")
    monkeypatch.delenv("BATCHSCOPE_ATTENTION", raising=False)
    assert select_paged_attention(q) is (paged_attention_triton if triton_available() else paged_attention)
    monkeypatch.setenv("BATCHSCOPE_ATTENTION", "reference")
    assert select_paged_attention(q) is paged_attention
