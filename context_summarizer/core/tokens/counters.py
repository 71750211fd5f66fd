"""The two counters, each saying how text becomes tokens (``counting`` adds the chat overheads).

``TiktokenCounter`` encodes with a tiktoken ``Encoding`` it is given (loaded offline at the edge,
by ``context_summarizer.loaders.tokenizers``); ``ApproximateCounter`` (characters / 4) is used only
when asked for by name, never as a fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .counting import TOOL_CONSTANTS, _ChatCounter
from .encodings import APPROXIMATE, O200K_BASE

if TYPE_CHECKING:
    import tiktoken


class TiktokenCounter(_ChatCounter):
    """Exact tiktoken counting with the cookbook's chat overheads; a ``TokenCounter``."""

    def __init__(self, encoding: tiktoken.Encoding, *, cache_size: int = 200_000) -> None:
        """Count with ``encoding`` (``context_summarizer.loaders.tokenizers.load_encoding`` loads
        one offline)."""
        encoding_name = encoding.name
        self.name = encoding_name
        self._encoding = encoding
        # tiktoken encodes with the GIL released, but turning millions of token ids into a Python
        # list holds it (about 110 ms for 3.4M ids). Its buffer form skips that list; it is
        # tiktoken's private API, so it is used only where present, and checked at load.
        self._count_buffer = _buffer_counter(self._encoding)
        super().__init__(
            tool_constants=TOOL_CONSTANTS.get(encoding_name, TOOL_CONSTANTS[O200K_BASE]),
            cache_size=cache_size,
        )

    def count_text(self, text: str) -> int:
        """Tokens of ``text``; special-token spellings count as ordinary text.

        A lone surrogate (JSON allows ``"\\ud800"``) counts as U+FFFD, as tiktoken itself
        encodes it. Long texts are counted without building the list of token ids.
        """
        if len(text) > _LONG_TEXT and self._count_buffer is not None:
            try:
                return self._count_buffer(text, _NO_SPECIALS).nbytes // 4
            except UnicodeEncodeError:
                return self.count_text(_without_surrogates(text))
        return len(self._encoding.encode_ordinary(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.name!r})"


_LONG_TEXT = 65_536
"""Texts longer than this (in characters) are counted through tiktoken's token buffer."""
_NO_SPECIALS: frozenset[str] = frozenset()


def _buffer_counter(
    encoding: tiktoken.Encoding,
) -> Callable[[str, frozenset[str]], memoryview] | None:
    """``encode_to_tiktoken_buffer`` as a memoryview maker, if this tiktoken has it and it agrees
    with ``encode_ordinary`` (special-token text included); else None."""
    core = getattr(encoding, "_core_bpe", None)
    encode = getattr(core, "encode_to_tiktoken_buffer", None)
    if encode is None:
        return None

    def count(text: str, allowed: frozenset[str]) -> memoryview:
        return memoryview(encode(text, allowed))

    probe = "def f(x):\n    return x  # <|endoftext|> done."
    try:
        agrees = count(probe, _NO_SPECIALS).nbytes // 4 == len(encoding.encode_ordinary(probe))
    except Exception:  # an API that changed shape: use the list path
        return None
    return count if agrees else None


def _without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (what tiktoken encodes for it)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class ApproximateCounter(_ChatCounter):
    """Characters / 4 with the same overheads: an explicit opt-in, never a fallback."""

    CHARS_PER_TOKEN = 4

    def __init__(self, *, cache_size: int = 200_000) -> None:
        self.name = APPROXIMATE
        super().__init__(tool_constants=TOOL_CONSTANTS[O200K_BASE], cache_size=cache_size)

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / 4)``."""
        return -(-len(text) // self.CHARS_PER_TOKEN)

    def __repr__(self) -> str:
        return "ApproximateCounter()"
