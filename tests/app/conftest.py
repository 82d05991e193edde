"""End-to-end tests of the ``batchscope`` command and the live wiring."""
from __future__ import annotations
from tests.support.paths import REPO

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = REPO
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from engine.model.tiny_model import make_tiny_llama  # noqa: E402

DEMO_TRACE = ROOT / "recordings" / "workloads" / "data" / "azure_conv_demo.csv"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A random-weight 2-layer Llama folder without tokenizer (token ids only)."""
    return make_tiny_llama(tmp_path_factory.mktemp("models") / "tiny", seed=0)
