"""The ledger: facts folded across compactions under a token bound (``merge_ledger``), written
into the summary message (``render_ledger``) and read back from it (``parse_ledger``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import get_args

from .fact import Fact, FactKind

_KINDS: dict[str, FactKind] = {kind: kind for kind in get_args(FactKind)}
KIND_ORDER: tuple[FactKind, ...] = (
    *("error", "test", "command", "path"),
    *("identifier", "commit", "url", "quantity"),
)
"""The fixed order ``render_ledger`` groups kinds in (most important first)."""

EVICTION_ORDER: tuple[FactKind, ...] = (
    "quantity",
    "test",
    "identifier",
    "url",
    "command",
    "path",
    "commit",
    "error",
)
"""Which kinds a full ledger gives up first."""

LEDGER_HEADER = "## Fact ledger (extracted verbatim from the compacted turns)"
"""The line that opens a rendered ledger."""

_ITEM_RE = re.compile(r"- ([a-z]+): (.+)")
_LINE_OVERHEAD = 1  # the newline ending each rendered line


def _render_line(fact: Fact) -> str:
    return f"- {fact.kind}: {fact.text}"


def merge_ledger(
    previous: Sequence[Fact],
    new: Sequence[Fact],
    *,
    max_tokens: int,
    count_tokens: Callable[[str], int],
) -> list[Fact]:
    """The next ledger, newest first, bounded to ``max_tokens`` as rendered.

    ``new`` is taken in reverse (``extract_facts`` lists facts by first appearance, so the last
    one first appeared most recently), then ``previous`` in its own order; a key seen earlier in
    that sequence wins, so a fact seen again keeps its newest text. While the header plus every
    line (``count_tokens`` of each + 1 for its newline) is over ``max_tokens``, facts are dropped
    by kind in ``EVICTION_ORDER`` (quantities first, errors last), oldest first within a kind: a
    flood of new test ids or timings never pushes out an old error or decision-bearing path.
    """
    ordered: list[Fact] = []
    seen: set[str] = set()
    for fact in [*reversed(new), *previous]:
        if fact.key not in seen:
            seen.add(fact.key)
            ordered.append(fact)
    costs = [count_tokens(_render_line(fact)) + _LINE_OVERHEAD for fact in ordered]
    used = count_tokens(LEDGER_HEADER) + _LINE_OVERHEAD + sum(costs)
    dropped: set[int] = set()
    for kind in EVICTION_ORDER:
        if used <= max_tokens:
            break
        for i in range(len(ordered) - 1, -1, -1):
            if used <= max_tokens:
                break
            if ordered[i].kind == kind:
                dropped.add(i)
                used -= costs[i]
    if used > max_tokens:  # only the header is left
        return []
    return [fact for i, fact in enumerate(ordered) if i not in dropped]


def render_ledger(facts: Sequence[Fact]) -> str:
    """The ledger block: header, then ``- kind: text`` lines grouped in ``KIND_ORDER``.

    Within a kind, facts keep their ledger order. An empty ledger renders as ``""``.
    """
    if not facts:
        return ""
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    ordered = sorted(facts, key=lambda fact: rank[fact.kind])
    return "\n".join([LEDGER_HEADER, *map(_render_line, ordered)])


def parse_ledger(text: str) -> list[Fact]:
    """Read back the facts of the last ledger block in ``text`` (``[]`` when there is none).

    ``parse_ledger(render_ledger(facts))`` returns ``facts`` in rendered (kind-grouped) order.
    Items of an unknown kind are skipped; the block ends at the first line that is not an item.
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
            facts.append(Fact(kind=kind, text=match[2]))
    return facts
