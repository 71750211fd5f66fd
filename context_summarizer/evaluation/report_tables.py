"""Tables of the reports, rendered as GitHub-flavoured Markdown or as HTML, with text escaped.

A cell is plain text, or a sequence of pieces where ``Code`` marks text shown verbatim (a code
span in Markdown, ``<code>`` in HTML): facts such as paths, errors and commands. Nothing from the
data can break a table or inject markup: in Markdown, plain text has its backslashes, pipes,
backticks and ``<`` escaped and line breaks folded; a code span is fenced with more backticks than
it holds, with its pipes escaped (GFM splits table rows on pipes even inside code spans). In HTML
every piece is escaped with ``html.escape``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

ELLIPSIS = "…"
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Code:
    """Text shown verbatim: a code span in Markdown, ``<code>`` in HTML."""

    text: str


Piece = str | Code
Cell = str | Sequence[Piece]
"""Plain text, or pieces of plain text and ``Code`` shown one after another."""
Table = tuple[list[str], list[list[Cell]], int]
"""Headers, rows of cells, and how many leading columns hold text (left-aligned; the others are
numbers, right-aligned); rendered as Markdown or HTML."""


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (line breaks included) folded to one space."""
    return _WHITESPACE.sub(" ", text)


def shorten(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis when longer."""
    flat = one_line(text).strip()
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1].rstrip() + ELLIPSIS


def md_text(text: str) -> str:
    """Plain text for a Markdown table cell or line: no markup, no raw HTML, one line."""
    flat = one_line(text)
    return flat.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("<", "\\<")


def md_code(text: str) -> str:
    """``text`` as a Markdown code span that is safe in a table cell."""
    flat = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("|", "\\|")
    if not flat.strip():
        return "(blank)"
    longest = run = 0
    for char in flat:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    # CommonMark strips one space from each end when both are present, and a backtick at
    # either end would merge with the fence: pad so neither happens.
    padded = flat.startswith(("`", " ")) or flat.endswith(("`", " "))
    return f"{fence} {flat} {fence}" if padded else f"{fence}{flat}{fence}"


def md_cell(cell: Cell) -> str:
    """A cell as Markdown."""
    if isinstance(cell, str):
        return md_text(cell)
    return "".join(md_code(p.text) if isinstance(p, Code) else md_text(p) for p in cell)


def html_cell(cell: Cell) -> str:
    """A cell as HTML, every piece escaped."""
    if isinstance(cell, str):
        return escape(cell)
    return "".join(
        f"<code>{escape(p.text)}</code>" if isinstance(p, Code) else escape(p) for p in cell
    )


def markdown_table(table: Table) -> str:
    """``table`` as a GitHub-flavoured Markdown table."""
    headers, lines, text_columns = table
    out = ["| " + " | ".join(map(md_text, headers)) + " |"]
    out.append(
        "|" + "|".join("---" if i < text_columns else "---:" for i in range(len(headers))) + "|"
    )
    out += ["| " + " | ".join(map(md_cell, line)) + " |" for line in lines]
    return "\n".join(out)


def html_table(table: Table) -> str:
    """``table`` as an HTML table, every cell escaped."""
    headers, lines, text_columns = table

    def cell(tag: str, i: int, content: Cell) -> str:
        align = ' class="text"' if i < text_columns else ""
        return f"<{tag}{align}>{html_cell(content)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(cell("td", i, content) for i, content in enumerate(line)) + "</tr>"
        for line in lines
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
