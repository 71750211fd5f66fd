"""The eval reports name missed gold facts by their text, escaped for Markdown and HTML.

End to end through ``summarizer eval`` on a small dataset whose missed facts are known (a fact
only in an early tool output, which truncation drops; facts in no message at all, which every
strategy misses), then the three reports read back: Markdown rendered by a CommonMark parser with
GFM tables (markdown-it-py, which typer's rich brings), HTML parsed by the standard library.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from context_summarizer.evaluation.dataset import write_dataset
from context_summarizer.evaluation.records import FactRecall, MissedFact, ResultRow
from context_summarizer.evaluation.report_facts import (
    TOP_CASES,
    TOP_FACTS,
    facts_table,
    missed_facts,
)
from context_summarizer.evaluation.report_tables import markdown_table, md_code, shorten

from .test_eval_runner import invoke, rows_of
from .test_eval_strategies import make_case

URL = "postgres://db.internal:5432/billing"
HOSTILE = "a | b `x` ``y`` <script>alert(1)</script>\nsecond | line \\| end"
LONG = "src/billing/" + "/".join(f"level_{i}" for i in range(15)) + "/deep_module.py"
FACTS = [
    {"id": "db", "text": URL, "kind": "other"},
    {"id": "evil", "text": HOSTILE, "kind": "error"},
    {"id": "long", "text": LONG, "kind": "path"},
]


class Page(HTMLParser):
    """The tags of an HTML page, the text of each ``<code>``, and each table's rows of cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.code: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._in_code = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "code":
            self._in_code = True
            self.code.append("")
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._in_code = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._in_code:
            self.code[-1] += data
        if self._cell is not None:
            self._cell.append(data)


def parse(page: str) -> Page:
    parser = Page()
    parser.feed(page)
    parser.close()
    return parser


def render_markdown_as_html(markdown: str) -> Page:
    return parse(MarkdownIt("commonmark").enable("table").render(markdown))


def section(markdown: str, title: str) -> str:
    """The Markdown between ``## title`` and the next ``## ``."""
    start = markdown.index(f"## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end >= 0 else None]


def run(tmp_path: Path) -> tuple[Path, Any]:
    cases = [make_case(id=f"case-{i}", exchanges=10 + 2 * i, facts=FACTS) for i in range(2)]
    dataset = tmp_path / "facts.jsonl"
    write_dataset(cases, dataset)
    out = tmp_path / "run"
    result = invoke(dataset, "--out", out, "-s", "truncate,masking", "--budget", "0.4")
    assert result.exit_code == 0, result.output
    return out, result


def test_missed_facts_are_named_by_their_text_in_every_report(tmp_path: Path) -> None:
    out, _ = run(tmp_path)
    rows = rows_of(out)
    truncated = [r for r in rows if r.strategy == "truncate"]
    assert all(r.gold and URL in [m.text for m in r.gold.missed] for r in truncated)

    # Markdown: the per-case cell shows the text (cut to 80 characters) with the id in brackets
    markdown = (out / "report.md").read_text()
    cases = section(markdown, "Cases")
    assert f"`{URL}` (db)" in cases
    assert f"`{shorten(LONG)}` (long)" in cases and shorten(LONG).endswith("…")
    assert len(shorten(LONG)) == 80 and LONG not in cases
    # and the section of missed facts the full text, kind and cases, most-missed first
    facts = section(markdown, "Facts the summaries missed")
    assert f"| `{LONG}` (long) | path | case-0, case-1 | 2 |" in facts
    assert f"| `{URL}` (db) | other | case-0, case-1 | 2 |" in facts
    truncate_part = facts[facts.index("truncate:") : facts.index("masking:")]
    assert "truncate: 6 missed facts (3 distinct), most-missed first." in truncate_part
    assert markdown.startswith("# Summary-quality evaluation\n\n- truncate: kept ")

    page = parse((out / "report.html").read_text())
    assert URL in page.code and LONG in page.code and shorten(LONG) in page.code
    assert HOSTILE in page.code  # the full text, line break and all, as text

    report = json.loads((out / "report.json").read_text())
    by_text = {e["text"]: e for e in report["missed_facts"]["truncate"]}
    assert by_text[URL] == {
        "text": URL,
        "kind": "other",
        "ids": ["db"],
        "cases": ["case-0", "case-1"],
        "count": 2,
    }
    assert {e["text"] for e in report["missed_facts"]["masking"]} >= {HOSTILE, LONG}
    missed = [m for case in report["cases"] for m in case["missed_gold"]]
    assert {"id": "evil", "kind": "error", "text": HOSTILE} in missed  # ids kept, texts added
    assert report["verdicts"][0].startswith("truncate: kept ")


def test_markdown_hostile_fact_text_is_escaped_in_markdown_and_html(tmp_path: Path) -> None:
    out, _ = run(tmp_path)
    markdown = (out / "report.md").read_text()
    rendered = render_markdown_as_html(markdown)
    assert "script" not in rendered.tags  # no raw HTML got through
    one_line = HOSTILE.replace("\n", " ")
    assert one_line in rendered.code  # the facts section: the whole text, verbatim
    assert shorten(HOSTILE) in rendered.code  # the case table: cut, but still verbatim
    # no pipe or backtick broke a table: every row has as many cells as its header
    # strategies, kinds, two strategies' facts, cases, and the recommendation's choice table
    assert len(rendered.tables) == 6
    for table in rendered.tables:
        assert {len(row) for row in table} == {len(table[0])}
    hostile_rows = [row for table in rendered.tables for row in table if row and one_line in row[0]]
    assert len(hostile_rows) == 2  # one per strategy in the facts section
    for row in hostile_rows:
        assert row[1:] == ["error", "case-0, case-1", "2"]

    page_text = (out / "report.html").read_text()
    page = parse(page_text)
    assert "script" not in page.tags and "<script" not in page_text
    assert HOSTILE in page.code
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page_text


def test_the_reports_and_the_terminal_open_with_one_verdict_per_strategy(tmp_path: Path) -> None:
    out, result = run(tmp_path)
    first = result.stdout.splitlines()  # stderr has what each file was read as
    assert first[0].startswith("truncate: kept ") and first[1].startswith("masking: kept ")
    assert first[2] == "" and first[3].startswith("| strategy |")
    report = json.loads((out / "report.json").read_text())
    assert first[:2] == report["verdicts"]
    page = (out / "report.html").read_text()
    assert page.index('<ul class="verdicts">') < page.index("<p>Budget:") < page.index("<h2>")
    assert "<li><strong>truncate</strong>: kept " in page


def ok_row(case: str, label: str, missed: list[MissedFact]) -> ResultRow:
    return ResultRow(
        case_id=case,
        strategy=label,
        status="ok",
        agent_model="gpt-4o",
        tokens_before=100,
        budget_tokens=30,
        tokens_after=25,
        met_budget=True,
        compression_ratio=0.25,
        gold=FactRecall(total=30, kept=30 - len(missed), recall=0.5, missed=missed),
    )


def test_missed_facts_merge_across_cases_most_missed_first_and_are_bounded() -> None:
    shared = MissedFact(id="e1", kind="error", text="boom")
    renamed = MissedFact(id="e7", kind="error", text="boom")  # same fact, another case's id
    once = [MissedFact(id=f"p{i}", kind="path", text=f"src/m{i}.py") for i in range(TOP_FACTS + 4)]
    rows = [
        ok_row("c1", "truncate", [once[0], shared]),
        ok_row("c2", "truncate", [renamed, *once[1:]]),
        *(ok_row(f"d{i}", "truncate", [shared]) for i in range(TOP_CASES + 2)),
        ok_row("c1", "masking", []),
    ]
    grouped = missed_facts(rows)
    first = grouped["truncate"][0]
    assert (first.text, first.ids, first.count) == ("boom", ["e1", "e7"], TOP_CASES + 4)
    assert [e.text for e in grouped["truncate"][1:3]] == ["src/m0.py", "src/m1.py"]
    assert grouped["masking"] == []

    table = facts_table(grouped["truncate"])
    assert len(table[1]) == TOP_FACTS
    cases = table[1][0][2]
    assert cases == f"c1, c2, d0, d1, d2 and {TOP_CASES + 4 - 5} more"
    assert markdown_table(table).splitlines()[2].startswith("| `boom` (e1, e7) | error |")


def test_a_code_span_holds_any_text() -> None:
    parser = MarkdownIt("commonmark").enable("table")
    for text in ["`start", "end`", "a``b", " padded ", "a|b", "a\\|b", "<b>x</b>"]:
        cell = md_code(text)
        page = parse(parser.render(f"| h |\n|---|\n| {cell} |\n"))
        assert page.code == [text], (text, cell)
