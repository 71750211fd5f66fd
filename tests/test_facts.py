"""The fact ledger: extraction precision/recall on realistic agent output, matching, ledger I/O."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from context_summarizer.core.facts import (
    KIND_ORDER,
    LEDGER_HEADER,
    Fact,
    FactRole,
    extract_facts,
    importance,
    mentions,
    merge_ledger,
    normalize_fact_text,
    normalize_summary,
    parse_ledger,
    render_ledger,
    score_summary,
)


def tool(content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "call_1", "content": content}


def call(name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }


def pairs(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(fact.kind, fact.text) for fact in extract_facts(messages)]


def F(kind: Any, text: str, role: Any = None) -> Fact:
    return Fact(kind=kind, text=text, role=role)


def words(text: str) -> int:
    return len(text.split())


PYTEST_FAILURE = """\
============================= test session starts ==============================
platform linux -- Python 3.11.4, pytest-8.0.0, pluggy-1.3.0
rootdir: /work/proj
collected 3 items

tests/test_models.py .F.                                                 [100%]

=================================== FAILURES ===================================
_______________________________ test_user_lookup _______________________________

    def test_user_lookup():
        users = {"alice": 1}
>       assert users["bob"] == 2
E       KeyError: 'bob'
E       assert 1 == 2

tests/test_models.py:12: KeyError
=========================== short test summary info ============================
FAILED tests/test_models.py::test_user_lookup - KeyError: 'bob'
========================= 1 failed, 2 passed in 0.05s ==========================
"""

TRACEBACK = """\
Traceback (most recent call last):
  File "/work/proj/src/app/cli.py", line 42, in main
    config = load_config(args.path)
  File "/work/proj/src/app/config.py", line 17, in load_config
    raise ValueError(f"bad config: {path}")
ValueError: bad config: settings.toml
"""

GIT_LOG = """\
commit 3f2a9c1e5b7d4a6f8e0c2b4d6f8a0c2e4b6d8f0a
Author: Jane Dev <jane@example.com>
Date:   Tue Mar 5 14:02:11 2024 +0100

    Fix user lookup (#123)

a1b2c3d Merge branch 'main'
9e8d7c6 Bump version to 3.11.2
"""

LS_R = """\
.:
README.md  pyproject.toml  src  tests

./src/app:
__init__.py  models.py

./tests:
test_models.py
"""


# --- extraction: each kind from realistic content ---------------------------------------------


def test_pytest_failure_output() -> None:
    assert pairs([tool(PYTEST_FAILURE)]) == [
        ("path", "/work/proj"),
        ("path", "tests/test_models.py"),
        ("test", "test_user_lookup"),
        ("error", "KeyError: 'bob'"),  # only the first line of the "E" block, gutter removed
        ("error", "FAILED tests/test_models.py::test_user_lookup - KeyError: 'bob'"),
        ("test", "tests/test_models.py::test_user_lookup"),
        # "1 failed in 0.05s": how long the run took is a timing, not a fact
    ]


def test_pytest_assertion_gutter_and_verbose_passes() -> None:
    output = (
        "tests/test_a.py::test_ok PASSED                                   [ 50%]\n"
        "tests/test_a.py::test_sum[1-2] FAILED                             [100%]\n"
        "E       assert 1 == 2\n"
        "E        +  where 1 = add(0, 1)\n"
    )
    assert pairs([tool(output)]) == [
        ("test", "tests/test_a.py::test_sum[1-2]"),
        ("error", "assert 1 == 2"),
    ]


def test_traceback() -> None:
    assert pairs([tool(TRACEBACK)]) == [
        ("path", "/work/proj/src/app/cli.py"),
        ("path", "/work/proj/src/app/config.py"),
        ("error", "ValueError: bad config: settings.toml"),
        ("path", "settings.toml"),
    ]


def test_git_log_commits_without_noise() -> None:
    assert pairs([tool(GIT_LOG)]) == [
        ("commit", "3f2a9c1e5b7d4a6f8e0c2b4d6f8a0c2e4b6d8f0a"),
        ("commit", "a1b2c3d"),
        ("commit", "9e8d7c6"),
    ]


def test_commit_rules() -> None:
    text = (
        "deadbeef facade 1234567 0x7f3a2b1c call_ab12cd3 "
        "d41d8cd98f00b204e9800998ecf8427e\n"  # 32 hex chars without a commit word: a digest
        "reverted commit 4b825dc642cb6eb9a06\n"  # 19 chars next to "commit"
    )
    assert pairs([tool(text)]) == [("commit", "4b825dc642cb6eb9a06")]


def test_ls_recursive_listing() -> None:
    assert pairs([tool(LS_R)]) == [
        ("path", "README.md"),
        ("path", "pyproject.toml"),
        ("path", "./src/app"),
        ("path", "__init__.py"),
        ("path", "models.py"),
        ("path", "./tests"),
        ("path", "test_models.py"),
    ]


def test_paths_of_every_shape() -> None:
    text = (
        "Edit C:\\Users\\dev\\proj\\main.py and src\\app\\models.py, then ~/.bashrc, "
        "../lib/util.js, /etc/nginx/nginx.conf, /tmp and src/app/views.py:42:7 (see .env). "
        "Run with --config=conf/app.yaml or the Makefile; a/b/c is nested."
    )
    assert pairs([{"role": "user", "content": text}]) == [
        ("path", "C:\\Users\\dev\\proj\\main.py"),
        ("path", "src\\app\\models.py"),
        ("path", "~/.bashrc"),
        ("path", "../lib/util.js"),
        ("path", "/etc/nginx/nginx.conf"),
        ("path", "/tmp"),
        ("path", "src/app/views.py"),
        ("path", ".env"),
        ("path", "conf/app.yaml"),
        ("path", "Makefile"),
        ("path", "a/b/c"),
    ]


def test_urls_are_trimmed_and_not_split_into_paths() -> None:
    text = (
        "See https://docs.python.org/3/library/re.html. Also "
        "(https://example.com/a?b=src/c.py&x=1), and http://localhost:8080/api/v1"
    )
    assert pairs([{"role": "assistant", "content": text}]) == [
        ("url", "https://docs.python.org/3/library/re.html"),
        ("url", "https://example.com/a?b=src/c.py&x=1"),
        ("url", "http://localhost:8080/api/v1"),
    ]


def test_identifiers_only_from_identifier_like_code_spans() -> None:
    text = (
        "Look at `foo_bar`, `MyClass.method`, `os.path.join()`, `Vec::new`, `this is prose`, "
        "`True`, `--fix`, `42`, `src/app/models.py` and `test_login`.\n"
        "```python\nx = compute()\n```\n"
    )
    assert pairs([{"role": "assistant", "content": text}]) == [
        ("identifier", "foo_bar"),
        ("identifier", "MyClass.method"),
        ("identifier", "os.path.join"),
        ("identifier", "Vec::new"),
        ("path", "src/app/models.py"),
        ("test", "test_login"),
    ]


def test_error_lines_from_several_tools() -> None:
    text = "\n".join(
        [
            "src/main.c:12:5: error: expected ';' before '}' token",
            "src/a.py:3: error: Incompatible return value type",
            "error[E0425]: cannot find value `total` in this scope",
            "fatal: not a git repository (or any of the parent directories): .git",
            "bash: jq: command not found",
            "ERROR tests/test_b.py - ModuleNotFoundError: No module named 'foo'",
            "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.x.io')",
            "Traceback (most recent call last):",
            "Error handling is important, and so is logging.",
        ]
    )
    errors = [text for kind, text in pairs([tool(text)]) if kind == "error"]
    assert errors == [
        "src/main.c:12:5: error: expected ';' before '}' token",
        "src/a.py:3: error: Incompatible return value type",
        "error[E0425]: cannot find value `total` in this scope",
        "fatal: not a git repository (or any of the parent directories): .git",
        "bash: jq: command not found",
        "ERROR tests/test_b.py - ModuleNotFoundError: No module named 'foo'",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.x.io')",
    ]


def test_error_line_is_bounded() -> None:
    line = "RuntimeError: " + "very long detail " * 40
    [fact] = extract_facts([tool(line)])
    assert fact.kind == "error"
    assert fact.text.startswith("RuntimeError: very long detail")
    assert 150 <= len(fact.text) <= 200


def test_commands_from_tool_call_arguments_and_prompts() -> None:
    messages = [
        call("bash", {"command": "cd /work/proj && pytest -x tests/test_models.py\necho done"}),
        call("exec", {"cmd": ["bash", "-lc", "git log --oneline -5"]}),
        call("exec", {"cmd": ["ls", "-la", "src"]}),
        call("broken", '{"command": "unterminated'),
        {"role": "assistant", "content": "I ran:\n$ ruff check summarizer\n$ 5 is the price"},
    ]
    assert pairs(messages) == [
        ("command", "cd /work/proj && pytest -x tests/test_models.py"),
        ("path", "/work/proj"),
        ("path", "tests/test_models.py"),
        ("command", "git log --oneline -5"),
        ("command", "ls -la src"),
        ("command", "ruff check summarizer"),
    ]


def test_quantities_need_a_unit() -> None:
    text = (
        "Set the timeout to 30s and memory to 512 MiB; latency went from 200 ms to 1.5 sec. "
        "95% of 1,000 tokens, 128k tokens, 8GB, 50 rps, listening on port 8080."
    )
    assert pairs([{"role": "assistant", "content": text}]) == [
        ("quantity", "30s"),
        ("quantity", "512 MiB"),
        ("quantity", "200 ms"),  # a measured duration ("1.5 sec", "0.3s") is not a fact
        ("quantity", "95%"),
        ("quantity", "1,000 tokens"),
        ("quantity", "128k tokens"),
        ("quantity", "8GB"),
        ("quantity", "50 rps"),
        ("quantity", "port 8080"),
    ]


@pytest.mark.parametrize(
    "prose",
    [
        "I'll update it and/or refactor it, e.g. by splitting, i.e. w/o retries.",
        "About 1/2 of the calls fail; it runs 24/7 over TCP/IP with read/write access.",
        "Python 3.11 is required, and v1.2.3 or 2.0 works. The date was 2024/01/02.",
        "In the 1990s servers returned 500s. It costs $5 per month, etc. Mr. Smith agreed.",
        "The client/server split is fine; 3 x 4 = 12 and 10 of 12 passed.",
        "Sure — I deleted the cache, decade-old facade code and the deadbeef placeholder.",
    ],
)
def test_ordinary_prose_yields_nothing(prose: str) -> None:
    assert extract_facts([{"role": "assistant", "content": prose}]) == []


def test_dedupe_across_messages_keeps_first_appearance() -> None:
    messages = [
        {"role": "user", "content": "Please fix ./src/app/models.py"},
        tool("src\\app\\models.py:12: error: boom\nSRC/APP/MODELS.PY"),
        {"role": "assistant", "content": "Fixed `src/app/models.py` and src/app/models.py."},
    ]
    assert pairs(messages) == [
        ("path", "./src/app/models.py"),
        ("constraint", "Please fix ./src/app/models.py"),  # what the user asked, whole
        ("error", "src\\app\\models.py:12: error: boom"),
    ]


def test_order_is_first_appearance_across_roles_and_content_parts() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Repo at /srv/repo"},
        {"role": "user", "content": [{"type": "text", "text": "Bump to 2 GB"}]},
        call("bash", {"command": "cat conf/app.yaml"}),
        tool("ValueError: missing key"),
    ]
    assert pairs(messages) == [
        ("path", "/srv/repo"),
        ("quantity", "2 GB"),
        ("constraint", "Bump to 2 GB"),
        ("command", "cat conf/app.yaml"),
        ("path", "conf/app.yaml"),
        ("error", "ValueError: missing key"),
    ]


@pytest.mark.timeout(60)
def test_pathological_megabyte_outputs_complete() -> None:
    outputs = [
        "a/" * 200_000,
        "x" * 500_000,
        "A." * 500 + "\n",
        "`a" * 200_000,
        "../" * 100 + "x\n",
        "5% " * 300_000,
        "E  x\n" * 200_000,
        "1" * 1_000_000,
    ]
    facts = extract_facts([tool(text) for text in outputs])
    # deduplicated, and nothing from the runs of path-, URL-, hex- or number-like junk
    assert [(f.kind, f.text) for f in facts] == [("quantity", "5%"), ("error", "x")]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_extract_never_raises_on_arbitrary_text(text: str) -> None:
    facts = extract_facts([{"role": "user", "content": text}, tool(text), call("bash", text)])
    assert len({f.key for f in facts}) == len(facts)
    assert all("\n" not in f.text and f.text == f.text.strip() for f in facts)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab/\\.:`$E _-01[]()'\"\n\t%sm", max_size=400))
def test_extract_never_raises_on_adversarial_alphabet(text: str) -> None:
    extract_facts([tool(text)])


# --- Fact and normalisation -------------------------------------------------------------------


def test_fact_is_frozen_single_line_and_non_empty() -> None:
    fact = F("error", "  ValueError:\nbad x \r\n")
    assert fact.text == "ValueError: bad x"
    with pytest.raises(ValidationError):
        fact.text = "other"
    with pytest.raises(ValidationError):
        F("path", " \n ")
    with pytest.raises(ValidationError):
        F("nonsense", "x")
    assert F("path", "a.py") == F("path", "a.py")
    assert len({F("path", "a.py"), F("path", "a.py")}) == 1


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("  Src/App/Models.PY ", "src/app/models.py"),
        ("src\\app\\models.py", "src/app/models.py"),
        ("./src/a.py", "src/a.py"),
        ("`./src/a.py`.", "src/a.py"),
        ("\"KeyError:   'x'\"", "keyerror: 'x'"),
        ("KeyError: 'x'", "keyerror: 'x'"),
        ("“quoted”", "quoted"),
        ("(src/a.py),", "src/a.py"),
        ("test_b[1]", "test_b[1]"),
        ("(a) or (b)", "(a) or (b)"),
        ("../lib/a.py", "../lib/a.py"),
        ("Straße", "strasse"),
        ("''", ""),
    ],
)
def test_normalize_fact_text(raw: str, key: str) -> None:
    assert normalize_fact_text(raw) == key


# --- mentions and scoring ---------------------------------------------------------------------


def test_mentions_paths_case_separators_and_dot_slash() -> None:
    assert mentions("We edited SRC\\APP\\models.py today", "./src/app/models.py")
    assert mentions("see ./src/a.py", "src\\a.py")
    assert mentions("see src/a.py", "a.py")  # a file named by its directory
    assert not mentions("we edited data.py", "a.py")  # glued to a longer name
    assert not mentions("we edited src/a.pyc", "src/a.py")
    assert not mentions("nothing relevant", "src/a.py")


def test_mentions_aliases_and_whitespace() -> None:
    assert mentions("uses the   LRU\ncache", "lru cache")
    assert mentions("it now uses the cache", "memoization layer", aliases=["the cache"])
    assert not mentions("it now uses the cache", "memoization layer", aliases=["redis"])


def test_mentions_error_by_head_or_exception_message() -> None:
    long_error = (
        "ValueError: invalid literal for int() with base 10: 'abc' while parsing the "
        "configuration file at line 3 column 7"
    )
    summary = "Parsing crashed: ValueError: invalid literal for int() with base 10: 'abc' (fixed)"
    assert mentions(summary, long_error)
    failed = "FAILED tests/test_models.py::test_user_lookup - KeyError: 'bob'"
    assert mentions("the lookup raised KeyError: 'bob' in tests", failed)
    assert not mentions("the lookup raised KeyError in tests", failed)
    # the head rule is for error lines only; a long command must match in full
    command = "python -m pytest --maxfail=1 --disable-warnings -q tests/test_models.py -k lookup"
    assert not mentions(command[:62], command, kind="command")


def test_mentions_quantity_with_or_without_space() -> None:
    assert mentions("memory is now 512MiB", "512 MiB")
    assert mentions("a 30 s timeout", "30s")
    assert not mentions("a 300s timeout", "30s")


def test_normalize_summary_is_reused() -> None:
    summary = normalize_summary("Edited ./SRC/A.PY")
    assert summary == "edited ./src/a.py"
    assert normalize_summary(summary) is summary
    assert mentions(summary, "src/a.py")


def test_score_summary_drops_one_of_five() -> None:
    facts = [
        F("path", "src/app/models.py"),
        F("error", "KeyError: 'user_id'"),
        F("test", "tests/test_models.py::test_lookup"),
        F("command", "pytest -x tests"),
        F("quantity", "30s"),
    ]
    summary = (
        "Edited src/app/models.py to fix KeyError: 'user_id'; "
        "tests/test_models.py::test_lookup now passes. Timeout is 30s."
    )
    score = score_summary(summary, facts)
    assert (score.total, score.mentioned, score.recall) == (5, 4, 0.8)
    assert score.missed == [F("command", "pytest -x tests")]
    aliased = score_summary(summary, facts, aliases={"pytest -x tests": ["now passes"]})
    assert aliased.recall == 1.0
    assert aliased.missed == []


def test_score_of_no_facts_is_perfect() -> None:
    score = score_summary("anything", [])
    assert (score.total, score.mentioned, score.recall, score.missed) == (0, 0, 1.0, [])


# --- merge, render, parse ---------------------------------------------------------------------


PREVIOUS = [F("path", "src/a.py", "edited"), F("error", "KeyError: 'x'")]
NEW = [F("test", "tests/t.py::test_a"), F("command", "ls -la", "ran"), F("path", "./SRC/a.py")]


def test_merge_orders_by_importance_new_first_and_dedupes() -> None:
    merged = merge_ledger(PREVIOUS, NEW, max_tokens=1000, count_tokens=words)
    assert merged == [
        # The newest text of a repeated fact wins; it stays edited though only mentioned since.
        F("path", "./SRC/a.py", "edited"),
        F("test", "tests/t.py::test_a"),  # tier 1, new before previous
        F("error", "KeyError: 'x'"),
        F("command", "ls -la", "ran"),  # exploring: tier 3
    ]
    assert [importance(f) for f in merged] == [0, 1, 1, 3]
    assert merge_ledger(PREVIOUS, NEW, max_tokens=1000, count_tokens=words) == merged


def test_merge_bound_gives_up_the_least_important_first() -> None:
    header = words(LEDGER_HEADER) + 1
    # Line costs: edited path 4+1, test 3+1, error 4+1, exploring command 5+1.
    assert merge_ledger(PREVIOUS, NEW, max_tokens=header + 5 + 4 + 5, count_tokens=words) == [
        F("path", "./SRC/a.py", "edited"),
        F("test", "tests/t.py::test_a"),
        F("error", "KeyError: 'x'"),
    ]
    assert merge_ledger(PREVIOUS, NEW, max_tokens=header + 5, count_tokens=words) == [
        F("path", "./SRC/a.py", "edited")
    ]
    assert merge_ledger(PREVIOUS, NEW, max_tokens=header, count_tokens=words) == []
    assert merge_ledger(PREVIOUS, NEW, max_tokens=0, count_tokens=words) == []


def test_merge_bound_drops_the_oldest_within_a_tier() -> None:
    header = words(LEDGER_HEADER) + 1
    old = [F("path", f"src/old{i}.py", "edited") for i in range(2)]  # 4 + 1 words each
    new = [F("path", f"src/new{i}.py", "edited") for i in range(2)]
    assert merge_ledger(old, new, max_tokens=header + 15, count_tokens=words) == [
        *new,
        old[0],
    ]


def test_a_flood_of_listings_never_pushes_out_an_edited_file() -> None:
    header = words(LEDGER_HEADER) + 1
    previous = [F("path", "src/core.py", "edited")]
    listed = [F("path", f"pkg/m{i}.py") for i in range(50)]  # only mentioned, all newer
    merged = merge_ledger(previous, listed, max_tokens=header + 30, count_tokens=words)
    assert merged[0] == F("path", "src/core.py", "edited")
    assert len(merged) == 7 and merged[1:] == listed[:6]


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=60))
def test_merged_ledger_renders_within_bound(max_tokens: int) -> None:
    merged = merge_ledger(PREVIOUS, NEW, max_tokens=max_tokens, count_tokens=words)
    assert words(render_ledger(merged)) <= max_tokens
    full = merge_ledger(PREVIOUS, NEW, max_tokens=10_000, count_tokens=words)
    assert merged == full[: len(merged)]  # the bound only ever cuts the bottom


def test_render_keeps_ledger_order_and_says_each_role() -> None:
    facts = [
        F("path", "src/b.py", "edited"),
        F("error", "KeyError: 'x'", "unresolved"),
        F("quantity", "30s"),
    ]
    assert render_ledger(facts) == (
        f"{LEDGER_HEADER}\n"
        "- path (edited): src/b.py\n"
        "- error (unresolved): KeyError: 'x'\n"
        "- quantity: 30s"
    )
    assert render_ledger([]) == ""
    kinds = ["path", "url", "identifier", "error", "command", "test", "commit", "quantity"]
    assert sorted(KIND_ORDER) == sorted([*kinds, "constraint"])


def test_parse_finds_the_last_ledger_inside_a_summary() -> None:
    old = render_ledger([F("path", "old.py")])
    ledger = render_ledger([F("path", "src/a.py"), F("commit", "a1b2c3d")])
    summary = (
        f"Earlier:\n{old}\n\n## Summary\nWe fixed the bug.\n\n{ledger}\n- bogus: skipped kind"
        "\n- url: https://x.io\n\nTrailing prose\n- path: not/part/of/ledger.py"
    )
    assert parse_ledger(summary) == [
        F("path", "src/a.py"),
        F("commit", "a1b2c3d"),
        F("url", "https://x.io"),
    ]
    assert parse_ledger("no ledger here\n- path: a.py") == []
    assert parse_ledger("") == []


facts_strategy = st.lists(
    st.builds(
        Fact,
        kind=st.sampled_from(KIND_ORDER),
        text=st.text(min_size=1, max_size=80).filter(lambda t: t.strip() != ""),
        role=st.one_of(st.none(), st.sampled_from(get_args(FactRole))),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(facts_strategy)
def test_render_parse_round_trip(facts: list[Fact]) -> None:
    rendered = render_ledger(facts)
    assert parse_ledger(rendered) == facts
    assert parse_ledger(f"Summary text.\n\n{rendered}") == facts
    assert render_ledger(parse_ledger(rendered)) == rendered
