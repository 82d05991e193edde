"""Where the traces are: the first rows of each, shipped in ``tests/data/traces`` (:data:`SLICES`,
always there), and the whole files in ``<repo>/../shared/traces`` (developer machines and CI).

Tests about a whole trace (row counts, its span, its ideal hit rate) import the fixture:
``from shared_traces import traces_dir  # noqa: F401``; it skips them, saying why, in a plain clone.
"""
from __future__ import annotations
from tests.support.paths import REPO

from pathlib import Path

import pytest

REPO = REPO
SHARED = REPO.parent / "shared"
AZURE_CONV = "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = "azure-llm-2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake-fast25/synthetic_trace.jsonl"
SLICES = REPO / "tests" / "data" / "traces"
# in-project slice -> the whole trace it is the beginning of
SLICE_OF = {"azure_conv_300.csv": AZURE_CONV, "azure_code_300.csv": AZURE_CODE, "mooncake_300.jsonl": MOONCAKE}
SLICE_ROWS = 300


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """``../shared/traces``; skips the test (saying where it looked) only if it is absent."""
    traces = SHARED / "traces"
    if not traces.is_dir():
        pytest.skip(f"needs a whole trace: the shared traces folder {traces} is absent (it sits next to "
                    f"the repository on developer machines and in CI; tests/data/traces holds the "
                    f"first {SLICE_ROWS} rows of each, which the other trace tests use)")
    return traces
