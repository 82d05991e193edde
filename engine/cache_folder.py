"""BatchScope's own cache folder (converted models, recordings' damage analyses)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """BatchScope's cache folder: ``$BATCHSCOPE_CACHE``, else ``$XDG_CACHE_HOME/batchscope``, else
    ``~/.cache/batchscope``. Converted models live in its ``models/`` subfolder."""
    if os.environ.get("BATCHSCOPE_CACHE"):
        return Path(os.environ["BATCHSCOPE_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "batchscope"
