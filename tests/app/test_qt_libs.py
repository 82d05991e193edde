"""The check for system libraries Qt's xcb plugin needs, run before Qt starts (app/qt_libs.py)."""
from __future__ import annotations
from tests.support.paths import REPO

import subprocess
import sys

import pytest

from app import qt_libs


@pytest.mark.parametrize("env, expected", [
    ({"DISPLAY": ":0"}, True),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, True),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, False),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, False),
    ({"QT_QPA_PLATFORM": "wayland"}, False),
    ({"QT_QPA_PLATFORM": "xcb:nograb"}, True),
])
def test_only_the_xcb_platform_is_checked(env, expected):
    assert qt_libs.uses_xcb(env, platform="linux") is expected
    assert qt_libs.uses_xcb(env, platform="darwin") is False


def test_missing_libraries_give_one_install_command_naming_all(tmp_path):
    plugin = tmp_path / "libqxcb.so"
    absent = {"libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"}
    msg = qt_libs.check_qt_libraries({"DISPLAY": ":0"}, plugin=plugin, ldd=lambda p: None,
                                     load=lambda soname: soname not in absent)
    assert msg is not None
    command = next(line.strip() for line in msg.splitlines() if "apt-get install" in line)
    assert command.split()[:4] == ["sudo", "apt-get", "install", "-y"]
    assert set(command.split()[4:]) == {"libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"}
    assert all(s in msg for s in absent)
    # nothing missing, or a platform other than xcb: no message
    assert qt_libs.check_qt_libraries({"DISPLAY": ":0"}, plugin=plugin, ldd=lambda p: None,
                                      load=lambda s: True) is None
    assert qt_libs.check_qt_libraries({"QT_QPA_PLATFORM": "offscreen"}, plugin=plugin, ldd=lambda p: None,
                                      load=lambda s: False) is None


def test_ldd_output_is_parsed_once_per_library(tmp_path):
    out = ("\tlibQt6Gui.so.6 => /x/libQt6Gui.so.6 (0x1)\n"
           "\tlibxcb-icccm.so.4 => not found\n"
           "\tlibxcb-keysyms.so.1 => not found\n"
           "\tlibxcb-icccm.so.4 => not found\n"
           "\tlibfoo-unknown.so.3 => not found\n")
    fake = lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")  # noqa: E731
    if qt_libs.shutil.which("ldd") is None:
        pytest.skip("no ldd on this machine (not a glibc system): the dlopen fallback is tested above")
    missing = qt_libs.ldd_missing(tmp_path / "libqxcb.so", run=fake)
    assert missing == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libfoo-unknown.so.3"]
    # an unknown library is named as it is (for apt-file search), a known one by its package
    assert qt_libs.install_command(missing) == ("sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1 "
                                                "libfoo-unknown.so.3")
    failed = lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, stdout="", stderr="not a dynamic executable")  # noqa: E731
    assert qt_libs.ldd_missing(tmp_path / "libqxcb.so", run=failed) is None


def test_the_real_check_agrees_with_the_loader():
    """On this machine: whatever the real check reports missing, the loader cannot load, and every
    library of the table it does not report loads (the check neither invents nor hides one)."""
    plugin = qt_libs.xcb_plugin_path()
    assert plugin is not None, "PySide6 ships libqxcb.so on Linux"
    missing = qt_libs.missing_xcb_libraries(plugin)
    assert all(not qt_libs.can_dlopen(s) for s in missing)
    msg = qt_libs.check_qt_libraries({"DISPLAY": ":0"}, plugin=plugin)
    assert (msg is None) == (not missing)
    assert all(qt_libs.SONAME_PACKAGES.get(s, s) in (msg or "") for s in missing)


def test_window_command_stops_before_qt_with_the_install_command(tmp_path):
    """With an X display but missing xcb libraries (a fake ldd) the window's start-up check
    returns 1 and prints the install command, before PySide6 is imported."""
    code = f"""
import sys
from app.commands import window as gui
from app import qt_libs
qt_libs.ldd_missing = lambda plugin, run=None: ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
rc = gui.check_window_libraries()
print("rc", rc, "qt imported", "PySide6.QtWidgets" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "DISPLAY": ":99", "HOME": str(tmp_path)},
                         cwd=REPO)
    assert "rc 1 qt imported False" in out.stdout, out.stderr
    assert "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1" in out.stderr
