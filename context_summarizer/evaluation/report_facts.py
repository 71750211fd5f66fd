"""The gold facts each strategy's compacted contexts missed, by their text.

``missed_facts`` groups the missed facts of a strategy's rows by kind and text (a fact with the
same text in several cases is one entry, with every case that missed it), most-missed first. The
reports show a missed fact by its text, with its id in brackets: ids are per case (``error-1`` of
one case is not ``error-1`` of another), so an id alone says nothing without the dataset at hand.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from .records import MissedFact, ResultRow
from .report_tables import Code, Piece, Table, shorten

TOP_FACTS = 20
"""Missed facts listed per strategy in the Markdown and HTML reports (report.json has them all)."""
TOP_CASES = 5
"""Cases named per missed fact in those reports."""
CELL_CHARS = 80
"""A fact's text in the per-case table is cut to this many characters."""


class MissedFactEntry(BaseModel):
    """One gold fact (by kind and text) a strategy missed, and the cases where it did."""

    text: str
    kind: str
    ids: list[str]
    """The fact's id in each dataset case that has it, distinct, in case order."""
    cases: list[str]
    """The cases whose compacted context missed it, in report order."""

    @property
    def count(self) -> int:
        """How many cases missed it."""
        return len(self.cases)


def missed_facts(rows: Sequence[ResultRow]) -> dict[str, list[MissedFactEntry]]:
    """Per strategy label (in order of first row), its missed gold facts, most-missed first
    (ties in the order first missed). Only rows that succeeded count."""
    out: dict[str, dict[tuple[str, str], MissedFactEntry]] = {}
    for row in rows:
        entries = out.setdefault(row.label, {})
        if row.status != "ok" or row.gold is None:
            continue
        for fact in row.gold.missed:
            entry = entries.setdefault(
                (fact.kind, fact.text),
                MissedFactEntry(text=fact.text, kind=fact.kind, ids=[], cases=[]),
            )
            if fact.id is not None and fact.id not in entry.ids:
                entry.ids.append(fact.id)
            if row.case_id not in entry.cases:
                entry.cases.append(row.case_id)
    return {
        label: sorted(entries.values(), key=lambda e: -e.count) for label, entries in out.items()
    }


def fact_pieces(text: str, ids: Sequence[str], *, limit: int | None = None) -> list[Piece]:
    """A fact as report pieces: its text verbatim (cut to ``limit`` characters), its ids in
    brackets."""
    shown = text if limit is None else shorten(text, limit)
    return [Code(shown), *([f" ({', '.join(ids)})"] if ids else [])]


def missed_cell(missed: Sequence[MissedFact]) -> list[Piece]:
    """The per-case table's cell: each missed fact's text, cut for a table, with its id."""
    pieces: list[Piece] = []
    for i, fact in enumerate(missed):
        if i:
            pieces.append("; ")
        pieces += fact_pieces(fact.text, [fact.id] if fact.id else [], limit=CELL_CHARS)
    return pieces or ["–"]


def _cases_text(cases: Sequence[str]) -> str:
    shown = ", ".join(cases[:TOP_CASES])
    more = len(cases) - TOP_CASES
    return f"{shown} and {more} more" if more > 0 else shown


def facts_table(entries: Sequence[MissedFactEntry]) -> Table:
    """The first ``TOP_FACTS`` entries: how many cases missed the fact, its full text, its kind
    and those cases."""
    lines = [
        [fact_pieces(e.text, e.ids), e.kind, _cases_text(e.cases), str(e.count)]
        for e in entries[:TOP_FACTS]
    ]
    return ["fact (id)", "kind", "cases", "missed in"], list(lines), 3


def facts_summary(label: str, entries: Sequence[MissedFactEntry], scored: bool) -> str:
    """The sentence that introduces a strategy's missed facts (or says there are none)."""
    if not scored:
        return f"{label}: no case with gold facts was scored."
    if not entries:
        return f"{label}: no gold fact missed."
    total = sum(e.count for e in entries)
    distinct = len(entries)
    shown = min(distinct, TOP_FACTS)
    head = f"{label}: {total} missed {'fact' if total == 1 else 'facts'}"
    if distinct != total:
        head += f" ({distinct} distinct)"
    head += ", most-missed first"
    more = distinct - shown
    return head + (f"; the first {shown} shown, and {more} more in report.json." if more else ".")


def scored_labels(rows: Sequence[ResultRow]) -> set[str]:
    """The strategies with at least one successful row that had gold facts to keep."""
    return {r.label for r in rows if r.status == "ok" and r.gold is not None and r.gold.total}
