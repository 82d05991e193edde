"""Recorded text made safe to show: request ids, prompts, outputs, file names and error messages
come from whoever made the recording or the trace.

:func:`visible` turns every character that could act instead of show into a visible escape, as
``repr`` writes it: C0 and C1 control characters (NUL, ESC of a terminal escape sequence, BEL,
backspace, carriage return...), the bidirectional overrides and isolates (U+202A-U+202E,
U+2066-U+2069, U+200E/U+200F, U+061C: "right-to-left override" tricks that reverse how a name
reads) and lone surrogates (invalid UTF-8 read with ``surrogateescape``). Newlines and tabs are
kept unless ``keep_newlines`` is false. Everything else, any script included, is unchanged.
"""
from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_UNSAFE_ALL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: object, *, keep_newlines: bool = True) -> str:
    """``str(text)`` with control, bidi-override and lone-surrogate characters written as
    ``\\xNN`` / ``\\uNNNN`` escapes (see the module doc); ``None`` gives ``''``."""
    if text is None:
        return ""
    return (_UNSAFE if keep_newlines else _UNSAFE_ALL).sub(_escape, str(text))
