"""``printable``: client data made safe for the operator's terminal.

What the proxy stored came from clients (model names, summaries of their conversations, error
texts quoting them), and a terminal obeys control sequences: an OSC sequence retitles the window
or writes the clipboard, a carriage return overwrites what was printed, a bidi override makes
text read other than it is. Every string of client data the CLI prints goes through
``printable``, which shows each such character as a visible escape (``\\x1b``, ``\\u202e``).
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")
_UNSAFE_KEEPING_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, lines: bool = False) -> str:
    """``text`` (as ``str``) with every C0 and C1 control character, DEL, bidi control and
    line or paragraph separator shown as a visible escape (``\\x1b``, ``\\u202e``); with
    ``lines``, newlines and tabs are kept (a multi-line text shown as lines)."""
    pattern = _UNSAFE_KEEPING_LINES if lines else _UNSAFE
    return pattern.sub(_escape, str(text))
