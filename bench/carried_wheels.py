"""The wheels the GPU check carries to a machine without network: what ``bench/gpu_check.py`` and
the ``batchscope bench`` runs it starts import and the GPU image (Python 3.12, torch, triton,
transformers and their dependencies) lacks. Pure-Python wheels, well under a megabyte together.

    python bench/carried_wheels.py download      # here (network): into .whl/ (git-ignored)
    python bench/carried_wheels.py install       # there: the missing ones into .whl/site

``download`` runs ``pip download --only-binary=:all: --python-version 3.12 --platform
manylinux2014_x86_64 --no-deps`` of :data:`WHEELS` into ``.whl/``. ``install`` (what
:func:`ensure` does from ``gpu_check.py``) runs ``pip install --no-index --no-deps --target
.whl/site`` on the wheels of the modules that do not import, and puts ``.whl/site`` on
``sys.path`` and ``PYTHONPATH`` (for child processes). A module the image already has is left to
the image's version.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL_DIR = ROOT / ".whl"
SITE = WHEEL_DIR / "site"
PYTHON_VERSION = "3.12"                  # the GPU image's
PLATFORM = "manylinux2014_x86_64"
MAX_BYTES = 64 << 20                     # the device tool's upload limit, the whole checkout included
# module -> pinned distribution: the recorder (sqlite-utils and what it imports at import time), the
# tables of gpu_check.py (tabulate); click-default-group is imported by sqlite-utils' CLI only but
# is tiny and keeps `import sqlite_utils.cli` working.
WHEELS = {
    "sqlite_utils": "sqlite-utils==4.2.1",
    "sqlite_fts4": "sqlite-fts4==1.0.3",
    "click_default_group": "click-default-group==1.2.4",
    "click": "click==8.5.1",
    "dateutil": "python-dateutil==2.9.0.post0",
    "six": "six==1.17.0",
    "pluggy": "pluggy==1.7.0",
    "tabulate": "tabulate==0.10.0",
}


NEEDED = ("sqlite_utils", "tabulate")   # what the check and the bench import; the rest of WHEELS are theirs


def _imports(modules) -> bool:
    """True when every module of ``modules`` imports here (with whatever it imports)."""
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        return False
    return True


def _normal(name: str) -> str:
    return name.split("==")[0].replace("-", "_").lower()


def download(dest: Path = WHEEL_DIR) -> list[Path]:
    """Download :data:`WHEELS` into ``dest``; returns the wheel files. Raises ``RuntimeError`` when
    pip fails or the wheels exceed :data:`MAX_BYTES`."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--no-deps",
           "--python-version", PYTHON_VERSION, "--platform", PLATFORM, "--dest", str(dest), *WHEELS.values()]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pip download failed ({done.returncode}): {done.stderr[-1500:]}")
    wheels = sorted(dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    if size > MAX_BYTES:
        raise RuntimeError(f".whl/ holds {size / 2**20:.1f} MiB of wheels, over the {MAX_BYTES >> 20} MiB upload limit")
    return wheels


def missing_modules() -> list[str]:
    """The modules of :data:`WHEELS` that do not import here (``.whl/site`` counted once on the path)."""
    return [m for m in WHEELS if importlib.util.find_spec(m) is None]


def _wheel_for(module: str, wheels: list[Path]) -> Path:
    want = _normal(WHEELS[module])
    for w in wheels:
        if w.name.split("-")[0].lower() == want:
            return w
    raise FileNotFoundError(f"no wheel of {WHEELS[module]} in {WHEEL_DIR} (run: python bench/carried_wheels.py download)")


def ensure(quiet: bool = True) -> list[str]:
    """Make every module of :data:`WHEELS` importable: put ``.whl/site`` on ``sys.path`` and
    ``PYTHONPATH``, install the wheels of those still missing there (``pip install --no-index
    --no-deps --target``). Returns the modules installed now. Raises ``FileNotFoundError`` when a
    missing module has no wheel in ``.whl/``, ``RuntimeError`` when a module still does not import
    (where pip itself fails, e.g. is not installed, the wheels are unpacked instead: all are pure Python)."""
    site = str(SITE)
    if site not in sys.path:
        sys.path.append(site)            # after the image's own packages: they win
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, site])
    importlib.invalidate_caches()
    missing = missing_modules()
    if not missing:
        return []
    if set(NEEDED) <= set(WHEELS) and _imports(NEEDED):   # what the check imports works here: a
        return []                                         # wheel's optional dependency may be absent
    wheels = sorted(WHEEL_DIR.glob("*.whl"))
    files = [str(_wheel_for(m, wheels)) for m in missing]
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", site, "--upgrade",
           *(["--quiet"] if quiet else []), *files]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:                  # no pip on the image: a pure-Python wheel is a zip of the files to import
        import zipfile
        for f in files:
            with zipfile.ZipFile(f) as z:
                z.extractall(site)
    importlib.invalidate_caches()
    still = missing_modules()
    if still:
        raise RuntimeError(f"installed into {site} but still not importable: {', '.join(still)}")
    return missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["download", "install"])
    args = ap.parse_args(argv)
    if args.action == "download":
        wheels = download()
        print(f"{len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 1024:.0f} KiB in {WHEEL_DIR}")
    else:
        print("installed:", ", ".join(ensure(quiet=False)) or "nothing (all import)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
