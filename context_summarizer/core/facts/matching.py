"""Whether a summary mentions a fact (``mentions``) and how many of a list it kept
(``score_summary``): normalised substrings not glued to a longer word, with the leniencies of
errors and quantities."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from .errors import _EXC_NAME, _error_line
from .fact import Fact, FactKind, _strip_edges, normalize_fact_text
from .recognizers import _QTY_RE


class NormalizedText(str):
    """A summary already normalised by ``normalize_summary``; ``mentions`` uses it as is."""

    __slots__ = ()


def normalize_summary(summary: str) -> NormalizedText:
    """Normalise a summary once, to test many facts against it with ``mentions``."""
    if isinstance(summary, NormalizedText):
        return summary
    return NormalizedText(normalize_fact_text(summary))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _contains(haystack: str, needle: str) -> bool:
    """``needle`` occurs in ``haystack`` without being glued to a longer word on either side."""
    if not needle:
        return False
    start = 0
    glue_left, glue_right = _is_word(needle[0]), _is_word(needle[-1])
    while (i := haystack.find(needle, start)) != -1:
        end = i + len(needle)
        left_ok = i == 0 or not (glue_left and _is_word(haystack[i - 1]))
        right_ok = end == len(haystack) or not (glue_right and _is_word(haystack[end]))
        if left_ok and right_ok:
            return True
        start = i + 1
    return False


_HEAD_CHARS = 60
_EXC_WITH_MESSAGE = re.compile(_EXC_NAME + r":\s*\S")
_QTY_SPLIT = re.compile(r"(\d[\d,.]*)[ \t]?([^\d\s].*)")


def _head(key: str) -> str:
    """The first ~60 characters of a normalised error line, cut at a word boundary."""
    if len(key) <= _HEAD_CHARS:
        return key
    cut = key[:_HEAD_CHARS]
    if key[_HEAD_CHARS] != " " and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return _strip_edges(cut)


def _variants(text: str, kind: FactKind | None) -> list[str]:
    key = normalize_fact_text(text)
    out = [key]
    if kind == "error" or (kind is None and _error_line(text) is not None):
        out.append(_head(key))
        exc = _EXC_WITH_MESSAGE.search(text[:300])
        if exc is not None and exc.start() > 0:
            out.append(_head(normalize_fact_text(text[exc.start() :])))
    qty = _QTY_SPLIT.fullmatch(key) if kind in (None, "quantity") else None
    if qty is not None and _QTY_RE.fullmatch(text.strip()):
        out += [qty[1] + qty[2], f"{qty[1]} {qty[2]}"]
    return [v for v in dict.fromkeys(out) if len(v) >= 2 or v == key]


def mentions(
    summary: str,
    fact_text: str,
    aliases: Sequence[str] = (),
    *,
    kind: FactKind | None = None,
) -> bool:
    """Whether ``summary`` mentions the fact (or an alias), after normalising both.

    A match is a normalised substring not glued to a longer word. Paths match with either
    separator and with or without ``./``; an error line also matches by its first ~60 characters
    or by its ``ExceptionType: message`` head; a quantity matches with or without the space before
    its unit. ``kind`` enables those leniencies explicitly; when None they follow from the text.
    Pass ``normalize_summary(summary)`` to normalise a summary only once for many facts.
    """
    haystack = normalize_summary(summary)
    candidates = _variants(fact_text, kind)
    candidates += [normalize_fact_text(alias) for alias in aliases]
    return any(_contains(haystack, c) for c in candidates)


class Score(BaseModel):
    """How many of the facts a summary mentions."""

    total: int
    mentioned: int
    recall: float
    missed: list[Fact]


def score_summary(
    summary: str,
    facts: Sequence[Fact],
    *,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> Score:
    """Score ``summary`` on ``facts`` (each counted as given); ``aliases`` maps a fact's key."""
    haystack = normalize_summary(summary)
    missed = [
        fact
        for fact in facts
        if not mentions(haystack, fact.text, (aliases or {}).get(fact.key, ()), kind=fact.kind)
    ]
    total = len(facts)
    mentioned = total - len(missed)
    return Score(
        total=total, mentioned=mentioned, recall=mentioned / total if total else 1.0, missed=missed
    )
