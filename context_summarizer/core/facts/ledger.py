"""The ledger: facts folded across compactions under a token bound (``merge_ledger``), written
into the summary message (``render_ledger``) and read back from it (``parse_ledger``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, get_args

from .fact import Fact, FactKind, FactRole
from .importance import importance

_KINDS: dict[str, FactKind] = {kind: kind for kind in get_args(FactKind)}
_ROLES: dict[str, FactRole] = {role: role for role in get_args(FactRole)}
KIND_ORDER: tuple[FactKind, ...] = (
    *("constraint", "error", "test", "command", "path"),
    *("identifier", "commit", "url", "quantity"),
)
"""Every kind of fact, the ones a reader needs first first."""

LEDGER_HEADER = "## Fact ledger (extracted verbatim from the compacted turns)"
"""The line that opens a rendered ledger."""

_ITEM_RE = re.compile(r"- ([a-z]+)(?: \(([a-z]+)\))?: (.+)")
_LINE_OVERHEAD = 1  # the newline ending each rendered line


def _render_line(fact: Fact) -> str:
    role = f" ({fact.role})" if fact.role is not None else ""
    return f"- {fact.kind}{role}: {fact.text}"


def merge_ledger(
    previous: Sequence[Fact],
    new: Sequence[Fact],
    *,
    max_tokens: int,
    count_tokens: Callable[[str], int],
) -> list[Fact]:
    """The next ledger, most important first, bounded to ``max_tokens`` as rendered.

    ``new`` comes most important first (``rank_facts``), ``previous`` in its own (ledger) order.
    A fact in both keeps its newest text and its newest role, or its earlier role when the new
    span gives it none (a file edited before and only mentioned since is still edited). The
    facts are ordered by ``importance``, the new before the previous within a tier; while the
    header plus every line (``count_tokens`` of each + 1 for its newline) is over
    ``max_tokens``, the last one goes: the least important, and of those the oldest. A flood of
    new file listings or timings never pushes out an edited file or an unresolved error.
    """
    merged: dict[str, Fact] = {}
    for fact in new:
        merged.setdefault(fact.key, fact)
    for fact in previous:
        kept = merged.get(fact.key)
        if kept is None:
            merged[fact.key] = fact
        elif kept.role is None and fact.role is not None and kept.kind == fact.kind:
            merged[fact.key] = kept.model_copy(update={"role": fact.role})
    ordered = sorted(merged.values(), key=importance)  # stable: new first within a tier
    costs = [count_tokens(_render_line(fact)) + _LINE_OVERHEAD for fact in ordered]
    used = count_tokens(LEDGER_HEADER) + _LINE_OVERHEAD + sum(costs)
    while ordered and used > max_tokens:
        ordered.pop()
        used -= costs.pop()
    return ordered if used <= max_tokens else []


def render_ledger(facts: Sequence[Fact]) -> str:
    """The ledger block: header, then one ``- kind (role): text`` line per fact (``- kind:
    text`` without a role), in ledger order. An empty ledger renders as ``""``."""
    if not facts:
        return ""
    return "\n".join([LEDGER_HEADER, *map(_render_line, facts)])


def parse_ledger(text: str) -> list[Fact]:
    """Read back the facts of the last ledger block in ``text`` (``[]`` when there is none).

    ``parse_ledger(render_ledger(facts))`` returns ``facts``. Items of an unknown kind are
    skipped (an unknown role is dropped); the block ends at the first line that is not an item.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == LEDGER_HEADER]
    if not starts:
        return []
    facts: list[Fact] = []
    for line in lines[starts[-1] + 1 :]:
        match = _ITEM_RE.fullmatch(line.rstrip())
        if match is None:
            break
        kind = _KINDS.get(match[1])
        if kind is not None:
            role = _ROLES.get(match[2]) if match[2] else None
            facts.append(Fact(kind=kind, text=match[3], role=role))
    return facts


def ledger_facts(entries: Iterable[Mapping[str, Any]]) -> list[Fact]:
    """The facts of ledger entries as slots and records keep them (``{"kind", "text",
    "role"}``), in order; an entry that is not a valid fact is skipped."""
    facts: list[Fact] = []
    for entry in entries:
        try:
            facts.append(Fact.model_validate(dict(entry)))
        except ValueError:
            continue
    return facts
