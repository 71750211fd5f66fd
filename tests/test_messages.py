from __future__ import annotations

import copy

import pytest

from context_summarizer.core.errors import InvalidConversation
from context_summarizer.core.messages import (
    canonical_json,
    group_units,
    identity_form,
    message_digest,
    message_text,
    prefix_chain,
    validate_messages,
)

from .conftest import tool_turn


def test_units_group_parallel_tool_calls_with_their_results() -> None:
    parallel = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ],
    }
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        parallel,
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "assistant", "content": "done"},
    ]
    units = group_units(messages)
    assert [(u.start, u.end, u.kind) for u in units] == [
        (0, 1, "instruction"),
        (1, 2, "user"),
        (2, 5, "tool_exchange"),
        (5, 6, "assistant"),
    ]


def test_orphan_tool_message_is_its_own_unit() -> None:
    messages = [
        {"role": "user", "content": "u"},
        *tool_turn("x", "f", "{}", "out"),
        {"role": "tool", "tool_call_id": "nobody", "content": "stray"},
    ]
    units = group_units(messages)
    assert [(u.start, u.end, u.kind) for u in units] == [
        (0, 1, "user"),
        (1, 3, "tool_exchange"),
        (3, 4, "tool"),
    ]


def test_digest_ignores_key_order_but_not_content() -> None:
    a = {"role": "user", "content": "hi", "x-provider": {"k": 1}}
    b = {"x-provider": {"k": 1}, "content": "hi", "role": "user"}
    assert message_digest(a) == message_digest(b)
    assert message_digest(a) != message_digest({**a, "content": "hi!"})
    assert canonical_json({"é": 1}) == '{"é":1}'


def test_prefix_chain_identifies_prefixes() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(5)]
    chain = prefix_chain(messages)
    assert prefix_chain(messages[:3]) == chain[:3]
    changed = [*messages[:2], {"role": "user", "content": "other"}, *messages[3:]]
    other = prefix_chain(changed)
    assert other[:2] == chain[:2]
    assert all(x != y for x, y in zip(other[2:], chain[2:], strict=True))


def test_message_text_reads_parts_and_tool_arguments() -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}],
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "run", "arguments": '{"c":"ls"}'}}
        ],
    }
    assert message_text(message) == 'look\nrun({"c":"ls"})'


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ("not a list", "messages"),
        ([], "messages"),
        (["x"], "messages[0]"),
        ([{"content": "no role"}], "messages[0].role"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": [{"text": "no type"}]}], "messages[0].content[0]"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        ([{"role": "assistant", "tool_calls": {"id": "1"}}], "messages[0].tool_calls"),
        (
            [{"role": "assistant", "tool_calls": [{"type": "function"}]}],
            "messages[0].tool_calls[0].id",
        ),
    ],
)
def test_validation_names_the_bad_field(messages: object, param: str) -> None:
    with pytest.raises(InvalidConversation) as info:
        validate_messages(messages)
    assert info.value.param == param


def test_validation_keeps_the_callers_objects_and_unknown_fields() -> None:
    messages = [{"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}]
    assert validate_messages(messages) is messages
    assert messages[0]["cache_control"] == {"type": "ephemeral"}


def test_a_turn_is_one_message_whatever_form_the_client_sends_it_in() -> None:
    # Claude Code sends its newest turn as text blocks with a breakpoint, and the same turn as
    # a string on the next request; chat clients behind gateways mark parts the same way.
    plain = {"role": "user", "content": "Fix the test in src/app.py"}
    one_part = {"role": "user", "content": [{"type": "text", "text": "Fix the test in src/app.py"}]}
    marked = {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "Fix the test in src/app.py",
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }
    assert message_digest(plain) == message_digest(one_part) == message_digest(marked)
    assert prefix_chain([plain]) == prefix_chain([marked])
    # What a message says still counts: other text, another role, two parts, a non-text part.
    assert message_digest(plain) != message_digest({"role": "user", "content": "Fix it"})
    assert message_digest(plain) != message_digest({**plain, "role": "assistant"})
    two = [{"type": "text", "text": "Fix the test"}, {"type": "text", "text": " in src/app.py"}]
    assert message_digest({"role": "user", "content": two}) != message_digest(plain)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with_image = {"role": "user", "content": [image]}
    assert message_digest(with_image) != message_digest(
        {"role": "user", "content": [image, {"type": "text", "text": ""}]}
    )
    # Two text parts with a breakpoint on one are the same two parts without it.
    two_marked = [two[0], {**two[1], "cache_control": {"type": "ephemeral"}}]
    assert message_digest({"role": "user", "content": two_marked}) == message_digest(
        {"role": "user", "content": two}
    )


def test_identity_form_copies_only_what_differs_and_never_changes_the_message() -> None:
    plain = {"role": "user", "content": "hi"}
    assert identity_form(plain) is plain
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    assert identity_form(parts) is parts
    marked = {
        "role": "user",
        "cache_control": {"type": "ephemeral"},
        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
    }
    before = copy.deepcopy(marked)
    assert identity_form(marked) == plain
    assert marked == before
    # A text part carrying anything beyond its type and text (annotations) stays a list.
    annotated = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi", "annotations": []}],
    }
    assert identity_form(annotated) is annotated
