"""Whether a model's summary can stand for the turns it replaces: the online check's verdicts.

Weak or distracted models answer a summary request with something that is not a summary of the
work: the instruction's own section template echoed back, the task restated and nothing else, a
loop of the same lines, an answer cut off at the token cap, a tool call although tools were
forbidden, another language or a format nobody asked for, or facts (paths, errors, commits) that
never appeared. Each is found here, from the text and the conversation it summarizes, and named;
the engine then asks once more (saying what was wrong) or replaces the summary with the
mechanical fallback. None of them is ever accepted. Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .facts import extract_facts, mentions, normalize_summary

Problem = Literal[
    "error",
    "empty",
    "tool_call",
    "cut_off",
    "wrong_format",
    "wrong_language",
    "echo",
    "repetition",
    "task_only",
    "invented",
]
"""Why a summary cannot be used."""

PROBLEM_TEXT: dict[Problem, str] = {
    "error": "the summary request failed",
    "empty": "it was empty or said next to nothing",
    "tool_call": "it called a tool instead of writing the summary",
    "cut_off": "it was cut off at the length limit before it ended",
    "wrong_format": "it was not a Markdown summary in prose (code, JSON or markup only)",
    "wrong_language": "it was written in another language than the conversation",
    "echo": "it repeated the instructions and section descriptions instead of the work's facts",
    "repetition": "it repeated the same lines over and over",
    "task_only": "it restated the task and nothing of the work done",
    "invented": "it named files, errors or identifiers that never appeared in the conversation",
}
"""What the strict retry tells the model about its previous answer."""

_WORD = re.compile(r"\w+", re.UNICODE)
_SHINGLE = 4
"""Words per shingle when comparing a summary with the instruction or the task."""
ECHO_SHARE = 0.6
"""A summary whose shingles come this much from the instruction is an echo of it."""
TASK_SHARE = 0.7
"""A summary whose shingles come this much from the task only restates it."""
REPEAT_SHARE = 0.4
"""A summary whose most repeated line or shingle covers this much of it is a loop."""
FOREIGN_SHARE = 0.3
"""A summary whose letters are this much in a script the conversation hardly uses (under
``FOREIGN_SHARE / 10`` of its letters) is in another language."""
MIN_WORDS = 3
"""Fewer words than this ("ok", "Done.") say nothing of the work."""
CHECKED_KINDS = frozenset({"path", "url", "commit", "test", "error"})
"""Fact kinds whose absence from the conversation makes a summary's mention an invention."""
MAX_CHECKED_CHARS = 2_000_000
"""Conversations longer than this are checked against their last part only (bounded work)."""


@dataclass(frozen=True)
class SummarySource:
    """What a summary is checked against: the text of the conversation the model saw (before
    the instruction), the instruction it was given and the task (the first user message)."""

    conversation: str
    instruction: str
    task: str | None = None


def summary_problem(
    text: str | None,
    finish_reason: str | None,
    *,
    max_tokens: int,
    tokens: int,
    tool_called: bool = False,
    source: SummarySource | None = None,
) -> Problem | None:
    """Why the summary ``text`` cannot be used, or None (see the module docstring).

    Without ``source`` only what the answer itself shows is checked (empty, cut off, a tool
    call, its format and repetition).
    """
    if tool_called or finish_reason == "tool_calls":
        return "tool_call"
    if text is None or len(_WORD.findall(text)) < MIN_WORDS:
        return "empty"
    if finish_reason == "length" or tokens > max_tokens:
        return "cut_off"
    if not _prose(text):
        return "wrong_format"
    if _looping(text, source.conversation if source is not None else ""):
        return "repetition"
    if source is None:
        return None
    if _foreign(text, source.conversation):
        return "wrong_language"
    if _share_from(text, source.instruction) >= ECHO_SHARE:
        return "echo"
    if source.task and _share_from(_without_headings(text), source.task) >= TASK_SHARE:
        return "task_only"
    if invented_facts(text, source.conversation):
        return "invented"
    return None


def invented_facts(summary: str, conversation: str) -> list[str]:
    """The paths, URLs, commits, tests and error lines ``summary`` names that ``conversation``
    never mentions."""
    haystack = normalize_summary(conversation[-MAX_CHECKED_CHARS:])
    named = extract_facts([{"role": "assistant", "content": summary}])
    return [
        fact.text
        for fact in named
        if fact.kind in CHECKED_KINDS
        and not mentions(haystack, fact.text, kind=fact.kind)
        # A summary goes on after an error's head in its own words ("KeyError: 'x' is still
        # raised"): the head is what must have been seen.
        and not (fact.kind == "error" and mentions(haystack, _head(fact.text), kind="error"))
        and not (fact.kind == "path" and _resolved(haystack, fact.text))
    ]


def _resolved(haystack: str, path: str) -> bool:
    """Whether ``path`` is a path the conversation mentions made absolute under a directory it
    also mentions: ``/testbed/src/app.py`` for ``src/app.py`` when the agent works in
    ``/testbed``. The part kept must name a directory and a file, so ``/x/__init__.py`` is not
    any ``__init__.py``."""
    parts = path.split("/")
    if not path.startswith("/"):
        return False
    for cut in range(2, len(parts) - 1):
        root, rest = "/".join(parts[:cut]), "/".join(parts[cut:])
        if mentions(haystack, rest, kind="path") and mentions(haystack, root, kind="path"):
            return True
    return False


def _head(line: str, words: int = 2) -> str:
    """The first ``words`` words of an error line: its type and the start of its message."""
    return " ".join(line.split()[:words])


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _shingles(words: Sequence[str]) -> list[tuple[str, ...]]:
    if len(words) < _SHINGLE:
        return [tuple(words)] if words else []
    return [tuple(words[i : i + _SHINGLE]) for i in range(len(words) - _SHINGLE + 1)]


def _share_from(text: str, source: str) -> float:
    """The share of ``text``'s word shingles that also occur in ``source``."""
    mine = _shingles(_words(text))
    if not mine:
        return 0.0
    theirs = set(_shingles(_words(source)))
    return sum(1 for s in mine if s in theirs) / len(mine)


def _without_headings(text: str) -> str:
    """``text`` without its Markdown heading lines (the section names every summary has)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _looping(text: str, conversation: str) -> bool:
    """Whether one line, or one run of words, repeats over a large share of ``text``, when the
    conversation itself does not hold it (quoting a repetitive log line is not a loop)."""
    lines = [" ".join(line.split()).casefold() for line in text.splitlines()]
    lines = [line for line in lines if len(line) > 3 and not line.startswith("#")]
    if len(lines) >= 4:
        line, times = Counter(lines).most_common(1)[0]
        if (
            times >= 3
            and times * len(line) >= REPEAT_SHARE * sum(len(x) for x in lines)
            and line not in " ".join(conversation.split()).casefold()
        ):
            return True
    shingles = _shingles(_words(text))
    if len(shingles) < 24:
        return False
    known = set(_shingles(_words(conversation[-MAX_CHECKED_CHARS:]))) if conversation else set()
    counts = Counter(s for s in shingles if s not in known)
    if not counts:
        return False
    _, times = counts.most_common(1)[0]
    return times >= 4 and times * _SHINGLE >= REPEAT_SHARE * len(shingles)


def _prose(text: str) -> bool:
    """Whether ``text`` reads as a written summary: mostly words outside code fences, not one
    JSON or markup document."""
    stripped = text.strip()
    if stripped[:1] in "{[" and stripped[-1:] in "}]":
        return False
    if stripped.startswith("<") and stripped.endswith(">"):
        return False
    outside = re.sub(r"```.*?(```|$)", " ", stripped, flags=re.DOTALL)
    return len(_WORD.findall(outside)) >= MIN_WORDS


def _script(char: str) -> str | None:
    """The script of a letter (``LATIN``, ``CJK``, ``CYRILLIC``, ...), None for a non-letter."""
    if not char.isalpha():
        return None
    if char.isascii():
        return "LATIN"  # the common case, without a Unicode name lookup
    try:
        name = unicodedata.name(char)
    except ValueError:
        return None
    for script in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "CYRILLIC", "ARABIC", "HEBREW"):
        if script in name:
            return script
    return "LATIN" if char.isascii() or "LATIN" in name else name.split(" ", 1)[0]


def _script_shares(text: str, limit: int = 200_000) -> dict[str, float]:
    counts = Counter(s for s in map(_script, text[:limit]) if s is not None)
    total = sum(counts.values())
    return {script: n / total for script, n in counts.items()} if total else {}


def _foreign(text: str, conversation: str) -> bool:
    """Whether much of ``text`` is in a script the conversation hardly uses."""
    mine = _script_shares(text)
    theirs = _script_shares(conversation[-MAX_CHECKED_CHARS:])
    return any(
        share >= FOREIGN_SHARE and theirs.get(script, 0.0) < FOREIGN_SHARE / 10
        for script, share in mine.items()
    )
