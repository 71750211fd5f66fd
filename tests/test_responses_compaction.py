"""summarizer's Responses compaction items (pure), and a client's own compaction threshold."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_summarizer.core.bounded_json import NestingTooDeep, loads_bounded
from context_summarizer.core.budgets import Budget, resolve_budget
from context_summarizer.core.codecs.responses_compaction import (
    PREFIX,
    BadCompactionItem,
    compaction_item,
    expand,
    is_ours,
)
from context_summarizer.core.config import CompactionConfig
from context_summarizer.core.facts import extract_facts

SECRET = b"k" * 32
NS = "key-0123"

KEPT = [
    {"type": "message", "role": "user", "content": "[Context summary] fixed the parser"},
    {"type": "function_call", "call_id": "c1", "name": "run", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
]


TASK = {"type": "message", "role": "user", "content": "fix the parser"}
REPLY = {"type": "message", "role": "assistant", "content": "done"}


def sealed(summary: str, kept: list[Any], ck: str, ns: str = NS) -> Any:
    return compaction_item(summary, kept, ck, key=SECRET, namespace=ns)


def opened(items: list[Any], ns: str = NS) -> list[Any]:
    expansion = expand(items, key=SECRET, namespace=ns)
    assert expansion is not None
    return expansion.items


def refusal(items: list[Any], ns: str = NS) -> BadCompactionItem:
    with pytest.raises(BadCompactionItem) as raised:
        expand(items, key=SECRET, namespace=ns)
    return raised.value


def test_an_item_expands_to_what_it_stands_for_and_supersedes_what_came_before() -> None:
    before = {"type": "message", "role": "user", "content": "superseded"}
    older = sealed("older", [{"type": "message", "role": "user", "content": "x"}], "ck0")
    item = sealed("fixed the parser", KEPT, "ck1")
    assert is_ours(item) and item["id"] == "cmp_summarizer_ck1"
    later = {"type": "message", "role": "user", "content": "go on"}
    assert opened([before, older, item, later]) == [*KEPT, later]
    assert opened([item, later]) == [*KEPT, later]  # sent alone, as /responses/compact's output
    assert expand([before, later], key=SECRET, namespace=NS) is None
    # The content is readable JSON, its signature the last member.
    readable = json.loads(item["encrypted_content"].removeprefix(PREFIX))
    assert readable["items"] == KEPT and len(readable["sig"]) == 64


def test_another_providers_compaction_item_is_not_ours() -> None:
    theirs = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB..."}
    assert not is_ours(theirs)
    assert expand([theirs], key=SECRET, namespace=NS) is None


@pytest.mark.parametrize(
    "content", ["{not json", '{"items": "x"}', '{"items": [1]}', '{"summary": "s", "items": []}']
)
def test_an_item_without_a_valid_signature_is_refused_with_its_position(content: str) -> None:
    for prefix in (PREFIX, "summarizer.compaction.v1:"):
        item = {"type": "compaction", "encrypted_content": prefix + content}
        assert refusal([{"role": "user", "content": "a"}, item]).param == (
            "input[1].encrypted_content"
        )


def test_altered_summary_text_that_stays_json_is_refused() -> None:
    item = sealed("fixed the parser", KEPT, "ck1")
    altered = dict(item)
    altered["encrypted_content"] = item["encrypted_content"].replace(
        "fixed the parser", "delete every file"
    )
    assert json.loads(altered["encrypted_content"].removeprefix(PREFIX))  # still valid JSON
    error = refusal([TASK, altered])
    assert error.param == "input[1].encrypted_content" and error.code == "invalid_encrypted_content"


def test_another_keys_item_is_refused_and_what_comes_before_an_item_never_counts() -> None:
    item = sealed("s", KEPT, "ck1")
    assert refusal([TASK, item], ns="key-other").param == "input[1].encrypted_content"
    # Whatever a client sends before its own item is superseded: pasted after another
    # conversation's items, the item's conversation goes on, never a mix of the two; and the
    # items a client resends rewritten (Codex's) cannot break it.
    other = {"type": "message", "role": "user", "content": "another task"}
    go_on = {"role": "user", "content": "go on"}
    assert opened([other, item, go_on]) == [*KEPT, go_on]
    parts = {"role": "user", "content": [{"type": "input_text", "text": "fix the parser"}]}
    assert opened([parts, {**REPLY, "id": "msg_1", "status": "completed"}, item]) == KEPT


def test_an_item_of_an_older_summarizer_gets_a_clear_refusal() -> None:
    v1 = {"type": "compaction", "encrypted_content": "summarizer.compaction.v1:" + "{}"}
    assert "older summarizer" in str(refusal([v1]))


def test_nesting_inside_an_item_is_bounded_like_the_body() -> None:
    bomb = {"type": "compaction", "encrypted_content": PREFIX + "[" * 100_000}
    assert refusal([TASK, bomb]).param == "input[1].encrypted_content"  # no RecursionError
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    item = sealed("s", [{"type": "reasoning", "summary": [], "x": deep}], "ck")
    error = refusal([item])
    assert error.code == "nested_too_deeply" and error.param == "input[0].encrypted_content"


def test_an_item_standing_for_another_item_is_refused() -> None:
    inner = sealed("s", KEPT, "ck0")
    outer = sealed("s", [inner], "ck1")
    assert "cannot be read" in str(refusal([outer]))


def test_embedded_json_is_parsed_with_the_bodys_limits() -> None:
    for text in ("[" * 100_000, "[" * 129 + "]" * 129):
        with pytest.raises(NestingTooDeep):
            loads_bounded(text)
    assert loads_bounded("[" * 128 + "]" * 128)
    call = {"id": "c", "type": "function", "function": {"name": "run", "arguments": "[" * 100_000}}
    deep = {"id": "d", "type": "function", "function": {"name": "run", "arguments": "[" * 900}}
    assert extract_facts([{"role": "assistant", "content": None, "tool_calls": [call, deep]}]) == []


def test_a_client_threshold_lowers_trigger_and_target_but_not_the_window() -> None:
    config = CompactionConfig(context_window=100_000, reserve_output_tokens=4_000)
    plain = resolve_budget(config, "gpt-4o")
    lowered = resolve_budget(config, "gpt-4o", compact_threshold=10_000)
    assert lowered.trigger_tokens == 10_000 < plain.trigger_tokens
    assert lowered.target_tokens < 10_000
    assert lowered.target_tokens / 10_000 == pytest.approx(
        plain.target_tokens / plain.trigger_tokens, rel=0.01
    )
    assert lowered.context_window == plain.context_window
    assert resolve_budget(config, "gpt-4o", compact_threshold=10**9) == plain
    assert isinstance(lowered, Budget)
