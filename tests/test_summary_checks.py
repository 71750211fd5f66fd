"""The online check names what weak models write instead of a summary, and passes a real one.

Each bad answer here is modelled on what a real small model wrote (issue 13): the section
template echoed back, the task restated, a loop, an answer cut at the cap, a tool call, another
language, a JSON document, and facts that never appeared.
"""

from __future__ import annotations

import pytest

from context_summarizer.core.summary_checks import (
    PROBLEM_TEXT,
    SummarySource,
    invented_facts,
    summary_problem,
)
from context_summarizer.loaders.prompts import load_prompt

INSTRUCTION = load_prompt("self_summary", "v2")
TASK = (
    "The invoice totals in the billing service are wrong for discounted orders. Fix the bug in "
    "the billing package and make tests/test_invoice.py pass."
)
CONVERSATION = "\n".join(
    [
        TASK,
        'read_file({"path": "src/billing/invoice.py"})',
        "def total(order):\n    return sum(line.price for line in order.lines)",
        'run({"command": "pytest tests/test_invoice.py -x"})',
        "FAILED tests/test_invoice.py::test_discounted_total - AssertionError: 90 != 100",
        "ERR-26936: discount ledger out of sync",
        "I will apply the discount in total() before summing.",
    ]
)
SOURCE = SummarySource(conversation=CONVERSATION, instruction=INSTRUCTION, task=TASK)

GOOD = """## Task and constraints
Fix the invoice totals for discounted orders in the billing package;
tests/test_invoice.py must pass.

## Current state
`total()` in src/billing/invoice.py sums line prices without applying the discount.

## Files and identifiers
src/billing/invoice.py, tests/test_invoice.py, `total`

## Decisions
Apply the discount inside total() before summing.

## Errors and fixes
FAILED tests/test_invoice.py::test_discounted_total - AssertionError: 90 != 100 (open).
ERR-26936: discount ledger out of sync (seen once, not yet explained).

## Open work and next step
Edit total() and rerun pytest tests/test_invoice.py -x.
"""

# What the 0.5B model wrote through the proxy: the instruction's sections with their
# descriptions, and nothing else.
ECHO = INSTRUCTION[INSTRUCTION.index("## Task") : INSTRUCTION.index("Be specific")]

TASK_ONLY = (
    "## Task and constraints\nThe invoice totals in the billing service are wrong for discounted "
    "orders. Fix the bug in the billing package and make tests/test_invoice.py pass."
)

LOOP = "## Current state\n" + "\n".join(
    ["The sum of all values in the amounts list equals the total."] * 12
)

CHINESE = (
    "## 任务\n修复账单服务中折扣订单的发票总额错误。\n## 当前状态\n"
    "已经阅读了 src/billing/invoice.py 文件，发现 total 函数没有应用折扣，测试仍然失败。"
)

JSON_ANSWER = '{"task": "fix invoice totals", "files": ["src/billing/invoice.py"]}'

INVENTED = GOOD.replace(
    "`total()` in src/billing/invoice.py", "`total()` in src/billing/discounts/engine.py"
)


@pytest.mark.parametrize(
    ("text", "finish_reason", "tool_called", "expected"),
    [
        (GOOD, "stop", False, None),
        (ECHO, "stop", False, "echo"),
        (TASK_ONLY, "stop", False, "task_only"),
        (LOOP, "stop", False, "repetition"),
        (GOOD[:300], "length", False, "cut_off"),
        ("", "tool_calls", True, "tool_call"),
        (GOOD, "stop", True, "tool_call"),
        ("   ", "stop", False, "empty"),
        ("ok", "stop", False, "empty"),
        (CHINESE, "stop", False, "wrong_language"),
        (JSON_ANSWER, "stop", False, "wrong_format"),
        ("```python\ndef total(order):\n    return 0\n```", "stop", False, "wrong_format"),
        (INVENTED, "stop", False, "invented"),
    ],
    ids=[
        "a real summary",
        "the section template echoed",
        "only the task restated",
        "a repetition loop",
        "cut at the cap",
        "a tool call with no text",
        "a tool call beside text",
        "blank",
        "one word",
        "another language",
        "a JSON document",
        "only code",
        "an invented path",
    ],
)
def test_each_kind_of_bad_answer_is_named(
    text: str, finish_reason: str, tool_called: bool, expected: str | None
) -> None:
    problem = summary_problem(
        text,
        finish_reason,
        max_tokens=1_000,
        tokens=len(text) // 4,
        tool_called=tool_called,
        source=SOURCE,
    )
    assert problem == expected


def test_over_the_cap_counts_as_cut_off_even_when_the_model_says_stop() -> None:
    assert summary_problem(GOOD, "stop", max_tokens=50, tokens=51, source=SOURCE) == "cut_off"


def test_every_problem_has_words_for_the_retry() -> None:
    assert set(PROBLEM_TEXT) == {
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
    }
    assert all(text and not text.endswith(".") for text in PROBLEM_TEXT.values())


def test_invented_facts_are_listed_and_real_ones_are_not() -> None:
    assert invented_facts(GOOD, CONVERSATION) == []
    assert invented_facts(INVENTED, CONVERSATION) == ["src/billing/discounts/engine.py"]


def test_a_conversation_in_another_language_may_be_summarized_in_it() -> None:
    source = SummarySource(conversation=CHINESE * 3, instruction=INSTRUCTION, task=None)
    assert summary_problem(CHINESE, "stop", max_tokens=1_000, tokens=100, source=source) is None


def test_without_a_source_only_the_answer_itself_is_checked() -> None:
    assert summary_problem(ECHO, "stop", max_tokens=1_000, tokens=200) is None
    assert summary_problem(LOOP, "stop", max_tokens=1_000, tokens=200) == "repetition"


def test_an_error_quoted_then_explained_is_not_an_invention_but_an_unseen_one_is() -> None:
    explained = "KeyError: 'discount_code' is still raised; the fix is not written yet."
    conversation = f"{CONVERSATION}\nKeyError: 'discount_code'"
    assert invented_facts(f"## Errors and fixes\n{explained}\n", conversation) == []
    unseen = "ERR-77777: ledger locked by another worker"
    assert invented_facts(f"## Errors and fixes\n{unseen}\n", conversation) == ["ERR-77777"]


def test_a_path_made_absolute_under_the_working_directory_is_not_an_invention() -> None:
    # Real agent runs name files relative to the directory they work in (SWE-bench's /testbed);
    # a summary that writes them absolute is right, one that adds a directory is not.
    conversation = "cd /testbed && python -m pytest\nModified astropy/table/table.py (2 lines)"
    absolute = "Edited /testbed/astropy/table/table.py to fix the mixin."
    assert invented_facts(absolute, conversation) == []
    elsewhere = "Edited /testbed/astropy/testtable/table.py to fix the mixin."
    assert invented_facts(elsewhere, conversation) == ["/testbed/astropy/testtable/table.py"]
    unseen_root = "Edited /srv/build/astropy/table/table.py to fix the mixin."
    assert invented_facts(unseen_root, conversation) == ["/srv/build/astropy/table/table.py"]
    any_file = "Edited /testbed/table.py to fix the mixin."
    assert invented_facts(any_file, conversation) == ["/testbed/table.py"]
