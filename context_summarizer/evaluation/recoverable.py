"""Recoverable recall: of the gold facts a compacted context missed, the share the recall tool
(``core.recall.search``) gives back from the raw messages the compaction replaced. Pure.

Gold recall asks whether the compacted context still states a fact; this asks whether a model
that lost it could get it back by asking, with one query of the kind an agent would type for it,
within the tool's default bounds (8 excerpts, 4,000 characters). A query that matches too many
places to bring the fact back within them does not count: the bound is the measure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.messages import message_digest
from ..core.recall import search
from ..core.spans import Span, spans_of
from .dataset import GoldFact
from .metrics import fact_kept
from .records import FactRecall, MissedFact

_ERROR_CLASS = re.compile(
    r"\b(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Warning|Failure|Exit|Interrupt))\b"
)
# ENOENT (not ERROR), ERR_ASSERTION, E501, TS2345
_ERROR_CODE = re.compile(r"\b(E(?!RROR\b)[A-Z]{3,}|ERR_[A-Z0-9_]+|[A-Z]{1,4}\d{3,5})\b")
_HTTP_STATUS = re.compile(r"(?i)\b(?:http(?:/[\d.]+)?|status(?: code)?)\D{0,3}([1-5]\d\d)\b")
_STATUS_TEXT = re.compile(r"\b([45]\d\d)(?= [A-Z][a-z])")  # 404 Not Found
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=\S*")
_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        """a about after all also an and any are as at be because been before but by can could did
    do does don done for from had has have how if in into is it its just keep let may more must
    need needs no not now of on only or our out over please should so some still such than that
    the their them then there these they this those to too under until up us use very was we
    were what when where which while will with without would yes you your""",
    )
)
DISTINCTIVE_WORDS = 3
REGEX_SECONDS = 5.0
"""The time bound of this module's own patterns (the constraint rule's): the tool's default
bound is wall-clock and sized for a model's patterns, and the evaluator's worker threads on a
loaded machine would reach it on harmless ones, making the figure depend on the load."""


def query_for(fact: GoldFact) -> tuple[str, bool]:
    """The one query an agent would type to get ``fact`` back, and whether it is a regular
    expression. By the fact's kind:

    - ``path``: its file name (the last path component);
    - ``command``: its program and first argument (leading ``VAR=x`` assignments skipped);
    - ``error``: its class (``KeyError``, the last part of a dotted one), else its code
      (``ENOENT``, ``ERR_ASSERTION``, ``E501``, an HTTP status), else as a ``constraint``;
    - ``test``: its own name (the last ``::`` or `` › `` part, parameters kept);
    - ``url``: its last path segment, or its host when it has no path;
    - ``identifier``, ``commit``, ``quantity``: the text itself;
    - anything else (``constraint``, ``decision``, ``open_work``): its three most distinctive
      words (the longest that are not common English words, ties in text order), in text order,
      as the regular expression ``w1.*?w2.*?w3`` (so on one line of the raw text): no three words
      of a sentence are contiguous in general, and the longest words are the rarest a person
      would remember of it.
    """
    text = " ".join(fact.text.split())
    if fact.kind == "path":
        return re.split(r"[/\\]", text.rstrip("/\\"))[-1] or text, False
    if fact.kind == "command":
        words = text.split()
        while len(words) > 1 and _ENV_ASSIGNMENT.fullmatch(words[0]):
            words = words[1:]
        return " ".join(words[:2]), False
    if fact.kind == "error":
        for pattern in (_ERROR_CLASS, _ERROR_CODE, _HTTP_STATUS, _STATUS_TEXT):
            found = pattern.search(text)
            if found:
                return found.group(1), False
        return _distinctive(text)
    if fact.kind == "test":
        name = re.split(r"::| › ", text)[-1].strip()
        if "/" in name and not name.endswith("]"):  # a test file: its name
            name = name.rsplit("/", 1)[-1]
        return name or text, False
    if fact.kind == "url":
        bare = re.sub(r"^[a-z][\w+.-]*://", "", text, flags=re.IGNORECASE)
        bare = re.split(r"[?#]", bare)[0]
        host, _, path = bare.partition("/")
        segments = [s for s in path.split("/") if s]
        return (segments[-1] if segments else host) or text, False
    if fact.kind in ("identifier", "commit", "quantity"):
        return text, False
    return _distinctive(text)


def _distinctive(text: str) -> tuple[str, bool]:
    """``text``'s ``DISTINCTIVE_WORDS`` most distinctive words as one pattern, in text order."""
    words = [m for m in _WORD.finditer(text) if m.group().lower() not in _STOPWORDS]
    ranked = sorted(words, key=lambda m: (-len(m.group()), m.start()))
    chosen = sorted(ranked[:DISTINCTIVE_WORDS], key=lambda m: m.start())
    if not chosen:
        return text, False
    if len(chosen) == 1:
        return chosen[0].group(), False
    return ".*?".join(rf"\b{re.escape(m.group())}\b" for m in chosen), True


def replaced_spans(
    original: Sequence[Mapping[str, Any]], compacted: Sequence[Mapping[str, Any]]
) -> list[Span]:
    """The spans of the original messages that do not reach the model unchanged (as in
    ``metrics.compacted_span``), one per run of consecutive indices."""
    sent = {message_digest(m) for m in compacted}
    ranges: list[tuple[int, int]] = []
    for index, message in enumerate(original):
        if message_digest(message) in sent:
            continue
        if ranges and ranges[-1][1] == index:
            ranges[-1] = (ranges[-1][0], index + 1)
        else:
            ranges.append((index, index + 1))
    return spans_of(ranges, original)


def recovered(spans: Sequence[Span], original: Sequence[Mapping[str, Any]], fact: GoldFact) -> bool:
    """Whether one search for ``query_for(fact)``, with the tool's default hit and character
    bounds, returns excerpts that state ``fact``."""
    query, is_regex = query_for(fact)
    answer = search(spans, original, query, is_regex=is_regex, timeout=REGEX_SECONDS)
    if answer.error is not None or not answer.hits:
        return False
    return fact_kept("\n\n".join(hit.text for hit in answer.hits), fact)


def recoverable_recall(
    original_messages: Sequence[Mapping[str, Any]],
    compacted_messages: Sequence[Mapping[str, Any]],
    missed_facts: Sequence[GoldFact],
) -> FactRecall:
    """Of ``missed_facts`` (the gold facts the compacted context missed), how many one recall
    search (``query_for``) over the replaced messages (``replaced_spans``) gives back; the ones
    it does not are listed. ``recall`` is None when nothing was missed."""
    spans = replaced_spans(original_messages, compacted_messages)
    still = [
        MissedFact(id=fact.id, kind=fact.kind, text=fact.text)
        for fact in missed_facts
        if not spans or not recovered(spans, original_messages, fact)
    ]
    total = len(missed_facts)
    kept = total - len(still)
    return FactRecall(total=total, kept=kept, recall=kept / total if total else None, missed=still)
