"""summarizer's Responses compaction items (pure), and a client's own compaction threshold."""

from __future__ import annotations

import pytest

from summarizer.core.codecs.responses_compaction import compaction_item, expand, is_ours
from summarizer.core.config import Budget, CompactionConfig, resolve_budget
from summarizer.core.errors import InvalidConversation

KEPT = [
    {"type": "message", "role": "user", "content": "[Context summary] fixed the parser"},
    {"type": "function_call", "call_id": "c1", "name": "run", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
]


def test_an_item_expands_to_what_it_stands_for_and_supersedes_what_came_before() -> None:
    item = compaction_item("fixed the parser", KEPT, "ck1")
    assert is_ours(item) and item["id"] == "cmp_summarizer_ck1"
    older = compaction_item("older", [{"type": "message", "role": "user", "content": "x"}], "ck0")
    later = {"type": "message", "role": "user", "content": "go on"}
    before = {"type": "message", "role": "user", "content": "superseded"}
    assert expand([before, older, item, later]) == [*KEPT, later]
    assert expand([before, later]) is None


def test_another_providers_compaction_item_is_not_ours() -> None:
    theirs = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB..."}
    assert not is_ours(theirs)
    assert expand([theirs]) is None


@pytest.mark.parametrize("content", ["{not json", '{"items": "x"}', '{"items": [1]}'])
def test_an_altered_item_is_refused_with_its_position(content: str) -> None:
    item = {"type": "compaction", "encrypted_content": "summarizer.compaction.v1:" + content}
    with pytest.raises(InvalidConversation) as raised:
        expand([{"role": "user", "content": "a"}, item])
    assert raised.value.param == "input[1].encrypted_content"


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
