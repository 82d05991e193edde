"""Session-wide test setup, loaded before any test module is imported.

The Triton kernel tests run on the CPU through the Triton interpreter, which only works when
``TRITON_INTERPRET=1`` is set before anything imports ``triton`` (torch._dynamo does, through
transformers, as soon as triton is installed): set it here when there is no GPU. The engine's CPU
path never runs Triton kernels, so nothing else is affected.
"""
import os

if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
