"""Quiet interpreter teardown when Triton's bindings are loaded.

transformers imports ``torch._dynamo``, which imports Triton whenever it is installed, even for a
CPU run that never compiles a kernel. At interpreter exit, Triton's nanobind bindings then print a
"nanobind: leaked N instances/functions/types" report to stderr: Triton's own code calls it a known
report and silences it the same way in its compile workers (``triton/_compile_warmup_pool.py``):
fd 2 goes to ``/dev/null`` in the last ``atexit`` handler, after everything else has run.

Only teardown is silenced: tracebacks, warnings and every message printed before the last
``atexit`` handler reach stderr as usual.
"""
from __future__ import annotations

import atexit
import os
import sys

_registered = False


def _silence_teardown() -> None:
    if "triton._C.libtriton" not in sys.modules:
        return
    try:
        sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except (OSError, ValueError):   # stderr closed or not a real fd: nothing to silence
        pass


def quiet_triton_teardown() -> None:
    """Register the handler (once per process). Call it first thing in an entry point: ``atexit``
    runs handlers last-registered-first, so this one runs after every other handler."""
    global _registered
    if not _registered:
        atexit.register(_silence_teardown)
        _registered = True
