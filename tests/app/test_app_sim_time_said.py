"""The README and ``batchscope run --help`` (the ``sim`` preset's help) say the same time for the
whole Azure code trace under the simulated executor."""
from __future__ import annotations

import re
from pathlib import Path

from app.presets import PRESETS

README = Path(__file__).resolve().parents[2] / "README.md"
CLAIM = re.compile(r"the whole Azure code trace \(8,819 requests\) takes (about [^,]+?\([^)]*\))", re.IGNORECASE)


def test_the_readme_and_the_run_help_say_the_same_time_for_the_azure_code_trace():
    readme = CLAIM.findall(README.read_text(encoding="utf-8"))
    helped = CLAIM.findall(" ".join(PRESETS["sim"].purpose.split()))
    assert readme and helped and set(readme) == set(helped), (readme, helped)
