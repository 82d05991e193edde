"""A rehearsal of the GPU check on a CPU: a virtual environment holding the GPU image's versions of
what the project imports (torch, triton, transformers from the package registry: the CUDA build
of torch imports on a machine without a GPU) and nothing else of the project's dependencies, then
``bench/gpu_check.py --cpu-smoke`` in it. Whatever the bench or check paths import beyond the
image must come from the carried wheels (``bench/carried_wheels.py``), as on the GPU machine.

    python bench/rehearse.py                      # builds /tmp/batchscope-rehearsal once (~3 GB), then runs
    python bench/rehearse.py --venv DIR --python python3.12

Needs network the first time (the venv is reused while its versions match) and a Python 3.12
interpreter (the image's). Exit code: the smoke run's.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = {"torch": "2.11.0", "triton": "3.6.0", "transformers": "5.17.0"}   # the GPU image's versions
INDEX = "https://pypi.org/simple"


def _versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            f"{list(IMAGE)!r} if __import__('importlib.util').util.find_spec(p)}}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    import json
    return json.loads(done.stdout) if done.returncode == 0 else {}


def build(venv: Path, python: str) -> Path:
    """The venv's interpreter, created with ``python`` and the image's pins when missing or different."""
    exe = venv / "bin" / "python"
    have = _versions(exe) if exe.exists() else {}
    if all(have.get(p, "").split("+")[0] == v for p, v in IMAGE.items()):
        return exe
    if not exe.exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(exe), "-m", "pip", "install", "--quiet", "--index-url", INDEX,
                    *(f"{p}=={v}" for p, v in IMAGE.items())], check=True)
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/batchscope-rehearsal"))
    ap.add_argument("--python", default=shutil.which("python3.12") or "python3.12",
                    help="a Python 3.12 interpreter (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/batchscope-rehearsal-out"))
    args = ap.parse_args(argv)
    exe = build(args.venv, args.python)
    print("rehearsal venv:", args.venv, _versions(exe), flush=True)
    if not list((ROOT / ".whl").glob("*.whl")):
        subprocess.run([sys.executable, str(ROOT / "bench" / "carried_wheels.py"), "download"], check=True)
    shutil.rmtree(ROOT / ".whl" / "site", ignore_errors=True)     # install as the GPU machine will
    return subprocess.run([str(exe), "bench/gpu_check.py", "--cpu-smoke", "--out", str(args.out)], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
