"""What one benchmark section reports: its figures as Markdown, and the floors it checks.

Every section module exposes ``run(*, quick: bool, out_dir: Path) -> Section``; the entry point
(``python -m benchmarks``) runs them and writes ``RESULTS.md`` from the sections it gets back.
``quick`` is the smoke mode CI runs: the same code paths with the smallest sizes, whose figures
mean nothing and whose floors are reported but not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Floor:
    """One threshold an issue set for a figure, and whether this run met it."""

    name: str
    """What is measured, e.g. "concurrency 1, 100k tokens: median added latency"."""
    measured: str
    """The figure with its unit, e.g. "1.62 ms"."""
    limit: str
    """The threshold, e.g. "≤ 2 ms"."""
    met: bool


@dataclass
class Section:
    """One section of ``RESULTS.md``."""

    title: str
    command: str
    """The command that reruns this section alone."""
    body: str
    """Markdown: tables and short notes on how the figures were made."""
    floors: list[Floor] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    """Extra files written into ``out_dir`` (charts), relative to it."""
    seconds: float = 0.0
    """Wall time of the section; the entry point fills it in."""


def markdown_table(header: list[str], rows: list[list[str]], *, align: str = "") -> str:
    """A Markdown table. ``align`` has one letter per column, ``l`` or ``r`` (default: first
    column left, the others right)."""
    if not align:
        align = "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``values``, which must not be empty."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def print_section(section: Section) -> None:
    """A section as its module's command line prints it: title, body, floors."""
    print(f"## {section.title}\n\n{section.body.strip()}\n")
    for floor in section.floors:
        print(
            f"- {floor.name}: {floor.measured} ({floor.limit}): {'met' if floor.met else 'MISSED'}"
        )
