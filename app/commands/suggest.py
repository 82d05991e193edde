"""Command lines suggested to the user (``open it with: batchscope replay ...``): shell-quoted, so a
path with spaces or quotes pastes into a shell as one argument."""
from __future__ import annotations

import os
import shlex


def replay_command(path: str | os.PathLike) -> str:
    """``batchscope replay PATH`` with ``PATH`` shell-quoted (``shlex.join``)."""
    return shlex.join(["batchscope", "replay", os.fspath(path)])
