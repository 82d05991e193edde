"""Before Qt starts: find the system libraries its xcb (X11) platform plugin needs and cannot load.

On a fresh Debian or Ubuntu machine PySide6's wheel brings Qt itself but not the X11 client
libraries its ``libqxcb.so`` plugin links (``libxcb-icccm4``, ``libxcb-keysyms1``, ...); Qt then
aborts the process (SIGABRT, exit status 134) and names only the first library it missed. This
module asks the dynamic loader (``ldd`` on the plugin: every library it needs, transitively, that
the loader cannot find) before Qt is imported, so ``batchscope`` can print one install command
naming all of them. Without ``ldd`` (not a glibc system) it tries to ``dlopen`` each library of
:data:`SONAME_PACKAGES` with :mod:`ctypes` instead.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Mapping

# The shared libraries that PySide6's libqxcb.so (Qt 6.5-6.10) needs from the system, directly or
# through libQt6XcbQpa / libQt6Gui / libQt6DBus (checked with `ldd` on the plugin), and the
# Debian/Ubuntu package that ships each.
SONAME_PACKAGES: dict[str, str] = {
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libXau.so.6": "libxau6",
    "libXdmcp.so.6": "libxdmcp6",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libGLX.so.0": "libglx0",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
}

Loader = Callable[[str], bool]


def uses_xcb(env: Mapping[str, str] | None = None, platform: str = sys.platform) -> bool:
    """Whether Qt will start its xcb (X11) platform plugin: on Linux, when ``QT_QPA_PLATFORM`` is
    unset or names xcb, and no Wayland session is announced (``WAYLAND_DISPLAY``, which Qt 6
    prefers). ``offscreen``, ``wayland``, ``vnc`` ... need none of the X11 libraries."""
    env = os.environ if env is None else env
    if not platform.startswith("linux"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(":")[0].split(";")[0].strip() == "xcb"
    return not env.get("WAYLAND_DISPLAY")


def xcb_plugin_path() -> Path | None:
    """``libqxcb.so`` of the installed PySide6 (located, not imported); None if absent."""
    spec = importlib.util.find_spec("PySide6")
    for root in (spec.submodule_search_locations or []) if spec else []:
        plugin = Path(root) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def ldd_missing(plugin: Path, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[str] | None:
    """Sonames that ``ldd plugin`` reports ``not found`` (in its order, once each), or None when
    ``ldd`` is not available or fails (then the caller falls back to :func:`dlopen_missing`)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        out = run([ldd, str(plugin)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    missing = [line.split("=>")[0].strip() for line in out.stdout.splitlines() if "not found" in line]
    return list(dict.fromkeys(missing))


def can_dlopen(soname: str) -> bool:
    """Whether the dynamic loader finds and loads ``soname`` (``ctypes.CDLL``)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def dlopen_missing(sonames: Iterable[str] = SONAME_PACKAGES, load: Loader = can_dlopen) -> list[str]:
    """The sonames among ``sonames`` that ``load`` cannot load."""
    return [s for s in sonames if not load(s)]


def install_command(missing: Iterable[str]) -> str:
    """One ``apt-get install`` command for the packages that ship ``missing`` sonames (each package
    once, in order); a soname missing from :data:`SONAME_PACKAGES` is named as it is, for
    ``apt-file search``."""
    packages = list(dict.fromkeys(SONAME_PACKAGES.get(s, s) for s in missing))
    return "sudo apt-get install -y " + " ".join(packages)


def missing_xcb_libraries(plugin: Path | None = None, *, ldd: Callable[[Path], list[str] | None] = ldd_missing,
                          load: Loader = can_dlopen) -> list[str]:
    """Sonames the xcb plugin needs and the loader cannot find: ``ldd`` on ``plugin`` (default:
    the installed PySide6's), else a ``dlopen`` of every library of :data:`SONAME_PACKAGES`.
    Empty when nothing is missing (or PySide6 has no xcb plugin: Qt then reports that itself)."""
    plugin = xcb_plugin_path() if plugin is None else plugin
    if plugin is None:
        return []
    found = ldd(plugin)
    return dlopen_missing(load=load) if found is None else found


def check_qt_libraries(env: Mapping[str, str] | None = None, **kwargs) -> str | None:
    """None when Qt can start, else the message for the user: the missing libraries and one
    install command for all of them. Checks only when Qt will use xcb (:func:`uses_xcb`);
    ``kwargs`` go to :func:`missing_xcb_libraries` (tests pass fake loaders)."""
    if not uses_xcb(env):
        return None
    missing = missing_xcb_libraries(**kwargs)
    if not missing:
        return None
    return (f"the window needs {len(missing)} system librar{'y' if len(missing) == 1 else 'ies'} that "
            f"Qt's X11 (xcb) platform plugin links and this machine lacks: {', '.join(missing)}.\n"
            f"Install them with:\n  {install_command(missing)}\n"
            f"(or run headless: QT_QPA_PLATFORM=offscreen, or `batchscope run`, which needs no window)")
