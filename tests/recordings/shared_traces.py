"""Where the real traces are: ``<repo>/../shared/traces`` (every developer machine and CI has it).

Import the fixture into a test module: ``from shared_traces import traces_dir  # noqa: F401``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
AZURE_CONV = "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
AZURE_CODE = "azure-llm-2023/AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake-fast25/synthetic_trace.jsonl"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """``../shared/traces``; skips the test (saying where it looked) only if it is absent."""
    traces = SHARED / "traces"
    if not traces.is_dir():
        pytest.skip(f"the shared traces folder {traces} is absent (it sits next to the repository "
                    f"on developer machines and in CI)")
    return traces
