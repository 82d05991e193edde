"""bench/carried_wheels.py: only the modules that do not import are installed, from the wheels in
``.whl/``, into ``.whl/site``, which goes on sys.path and PYTHONPATH (for the check's children)."""
from __future__ import annotations

import sys

import pytest

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "bench"))
import carried_wheels  # noqa: E402


def _fake_wheel(folder, dist: str, module: str) -> None:
    import zipfile
    with zipfile.ZipFile(folder / f"{dist}-1.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{module}/__init__.py", "CARRIED = True\n")
        z.writestr(f"{dist}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        z.writestr(f"{dist}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}-1.0.dist-info/RECORD", "")


def test_installs_only_what_does_not_import_and_puts_it_on_the_path(tmp_path, monkeypatch):
    _fake_wheel(tmp_path, "bs_carried_probe", "bs_carried_probe")
    monkeypatch.setattr(carried_wheels, "WHEEL_DIR", tmp_path)
    monkeypatch.setattr(carried_wheels, "SITE", tmp_path / "site")
    monkeypatch.setattr(carried_wheels, "WHEELS", {"bs_carried_probe": "bs-carried-probe==1.0", "json": "json==0"})
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    assert carried_wheels.ensure() == ["bs_carried_probe"]          # json imports already: left alone
    import bs_carried_probe
    assert bs_carried_probe.CARRIED and str(tmp_path / "site") in sys.path
    assert str(tmp_path / "site") in __import__("os").environ["PYTHONPATH"]
    assert carried_wheels.ensure() == []                            # the second time nothing is missing
    sys.modules.pop("bs_carried_probe")


def test_a_missing_module_without_its_wheel_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(carried_wheels, "WHEEL_DIR", tmp_path)
    monkeypatch.setattr(carried_wheels, "SITE", tmp_path / "site")
    monkeypatch.setattr(carried_wheels, "WHEELS", {"bs_absent_probe": "bs-absent-probe==1.0"})
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(FileNotFoundError, match="bs-absent-probe==1.0.*carried_wheels.py download"):
        carried_wheels.ensure()
