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


import pytest  # noqa: E402

from app.exit_quiet import quiet_triton_teardown  # noqa: E402

quiet_triton_teardown()      # no "nanobind: leaked ..." report from Triton at the end of the run


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module: on a busy 2-core machine tiny matmuls are many times
    slower with two. Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
