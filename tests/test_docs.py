"""The README is a front page and docs/ holds the rest: every relative link of README.md and
docs/*.md reaches a file (and, with a ``#fragment``, a heading of it, by GitHub's anchors), the
README stays short, links every docs page and keeps the two setup commands ``.ci/run`` reads,
and every page links back to it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MARKDOWN = MarkdownIt("commonmark").enable("table")


def tokens(path: Path) -> list[Token]:
    """The parsed Markdown of ``path``, inline tokens' children included."""
    flat: list[Token] = []
    for token in MARKDOWN.parse(path.read_text(encoding="utf-8")):
        flat.append(token)
        flat.extend(token.children or [])
    return flat


def links(path: Path) -> list[str]:
    """Every link and image target in ``path`` (code spans and blocks are not links)."""
    found = []
    for token in tokens(path):
        if token.type == "link_open":
            found.append(str(token.attrs["href"]))
        elif token.type == "image":
            found.append(str(token.attrs["src"]))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes for the headings of ``path`` (a repeated one gets ``-1``, ...)."""
    seen: dict[str, int] = {}
    found = set()
    parsed = MARKDOWN.parse(path.read_text(encoding="utf-8"))
    for opening, inline in itertools.pairwise(parsed):
        if opening.type != "heading_open":
            continue
        text = "".join(
            child.content if child.type in ("text", "code_inline") else " "
            for child in inline.children or []
            if child.type in ("text", "code_inline", "softbreak")
        )
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_the_slugs_are_githubs() -> None:
    assert slug("The page: /ui") == "the-page-ui"
    assert slug("Coding agents: Claude Code, Codex CLI and Gemini CLI") == (
        "coding-agents-claude-code-codex-cli-and-gemini-cli"
    )
    assert slug("A real model, offline") == "a-real-model-offline"
    assert slug("Install from the package index") == "install-from-the-package-index"
    assert {"seeing-what-happened", "the-page-ui"} <= anchors(DOCS / "operating.md")


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    relative = [link for link in links(page) if not urlsplit(link).scheme]
    assert relative, f"{page.name} links nothing"
    broken = []
    for link in relative:
        parts = urlsplit(link)
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif parts.fragment and (
            target.suffix != ".md" or unquote(parts.fragment) not in anchors(target)
        ):
            broken.append(f"{link}: no heading #{parts.fragment} in {target.name}")
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 220, f"README.md has {lines} lines: move the detail to docs/"


def test_the_readme_links_every_docs_page() -> None:
    assert len(PAGES) >= 10
    linked = {
        (ROOT / urlsplit(link).path).resolve()
        for link in links(README)
        if not urlsplit(link).scheme and urlsplit(link).path
    }
    unlinked = [page.name for page in PAGES if page.resolve() not in linked]
    assert not unlinked, f"README.md links no {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_says_what_it_is_and_links_back(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    title, _, rest = text.partition("\n\n")
    assert title.startswith("# "), f"{page.name} opens with no title"
    opening = rest.partition("\n\n")[0]
    assert "(../README.md)" in opening, f"{page.name}'s opening paragraph does not link the README"


def test_the_setup_block_holds_the_two_commands_ci_runs() -> None:
    readme = README.read_text(encoding="utf-8")
    block = re.search(r"<!-- setup:begin -->\n(.*?)<!-- setup:end -->", readme, flags=re.DOTALL)
    assert block, "README.md has no setup block"
    commands = [
        line
        for line in block.group(1).splitlines()
        if line.strip() and not line.startswith(("```", "<!--"))
    ]
    assert len(commands) == 2, commands
    light, dev = commands
    assert "pip install -e . " in light and light.endswith("summarizer demo"), light
    assert "'.[dev]'" in dev and dev.endswith("python -m pytest"), dev
