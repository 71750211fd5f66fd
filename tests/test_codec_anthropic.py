"""The Anthropic Messages codec: what the engine sees of a Messages request, and what goes back."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from context_summarizer.core.codecs import OPAQUE_KEY
from context_summarizer.core.codecs.anthropic import AnthropicCodec
from context_summarizer.core.errors import InvalidConversation
from context_summarizer.core.messages import group_units, message_digest, validate_messages

codec = AnthropicCodec()


def _thinking(text: str, signature: str = "sig-1") -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": signature}


def _body() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [
            {"type": "text", "text": "You fix bugs.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [
            {
                "name": "bash",
                "description": "Run a command",
                "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            }
        ],
        "messages": [
            {"role": "user", "content": "Fix the failing test in parser.py"},
            {
                "role": "assistant",
                "content": [
                    _thinking("Look at the test first."),
                    {"type": "text", "text": "Running the tests."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "bash",
                        "input": {"cmd": "pytest"},
                    },
                    {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1 failed"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "parser.py tests/"}],
                        "is_error": False,
                    },
                    {"type": "text", "text": "Also keep the API stable."},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Will do."}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    },
                    {
                        "type": "text",
                        "text": "What is this?",
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
        ],
    }


def test_decode_splits_a_mixed_user_turn_into_tool_messages_and_text_in_wire_order() -> None:
    decoded = codec.decode(_body())
    roles = [m["role"] for m in decoded.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "user"]
    assert decoded.system_items == 1
    assistant = decoded.messages[2]
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"cmd": "pytest"}
    assert assistant[OPAQUE_KEY] == [_thinking("Look at the test first.")]
    assert decoded.messages[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "1 failed"}
    assert decoded.messages[5]["content"] == [{"type": "text", "text": "Also keep the API stable."}]
    image = decoded.messages[7]["content"][0]
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    assert decoded.tools == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ]
    validate_messages(decoded.messages)
    # An assistant turn and its results are one unit for the engine.
    kinds = [u.kind for u in group_units(decoded.messages)]
    assert kinds == ["instruction", "user", "tool_exchange", "user", "assistant", "user"]


def test_everything_kept_encodes_to_the_clients_own_message_objects() -> None:
    body = _body()
    decoded = codec.decode(body)
    encoded = codec.encode(decoded, decoded.messages)
    assert len(encoded["messages"]) == len(body["messages"])
    assert all(a is b for a, b in zip(encoded["messages"], body["messages"], strict=True))
    assert "system" not in encoded  # the body's system field stays as the client sent it


def test_a_summary_replacing_a_prefix_of_units_keeps_the_rest_as_sent() -> None:
    body = _body()
    decoded = codec.decode(body)
    units = group_units(decoded.messages)
    # Drop the first user turn and the tool exchange; keep the text of the mixed turn.
    keep_from = units[3].start
    summary = {"role": "user", "content": "Summary: pytest fails in parser.py."}
    chosen = [decoded.messages[0], summary, *decoded.messages[keep_from:]]
    out = codec.encode(decoded, chosen)["messages"]
    assert out[0] == {"role": "user", "content": [{"type": "text", "text": summary["content"]}]}
    # The mixed turn comes back with only its text block, the client's own block object.
    assert out[1]["role"] == "user"
    assert out[1]["content"] == [body["messages"][2]["content"][2]]
    assert out[1]["content"][0] is body["messages"][2]["content"][2]
    assert out[2] is body["messages"][3] and out[3] is body["messages"][4]


def test_a_shortened_tool_result_replaces_its_block_in_its_own_turn() -> None:
    body = _body()
    decoded = codec.decode(body)
    masked = {"role": "tool", "tool_call_id": "toolu_1", "content": "[output elided]"}
    chosen = [m if m is not decoded.messages[3] else masked for m in decoded.messages]
    out = codec.encode(decoded, chosen)["messages"]
    assert len(out) == len(body["messages"])
    turn = out[2]
    assert turn is not body["messages"][2]
    assert turn["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "[output elided]",
    }
    assert turn["content"][1] is body["messages"][2]["content"][1]
    assert turn["content"][2] is body["messages"][2]["content"][2]
    assert body["messages"][2]["content"][0]["content"] == "1 failed"  # the client's untouched


def test_moving_a_cache_breakpoint_does_not_change_what_the_engine_sees() -> None:
    first = _body()
    second = copy.deepcopy(first)
    del second["messages"][4]["content"][1]["cache_control"]
    second["messages"][3]["content"][0]["cache_control"] = {"type": "ephemeral"}
    del second["system"][0]["cache_control"]
    a, b = codec.decode(first), codec.decode(second)
    assert [message_digest(m) for m in a.messages] == [message_digest(m) for m in b.messages]


def test_a_changed_thinking_signature_is_a_different_message() -> None:
    first = _body()
    second = copy.deepcopy(first)
    second["messages"][1]["content"][0]["signature"] = "sig-2"
    a, b = codec.decode(first), codec.decode(second)
    assert message_digest(a.messages[2]) != message_digest(b.messages[2])
    assert message_digest(a.messages[1]) == message_digest(b.messages[1])


def test_a_new_assistant_message_puts_thinking_first_and_calls_as_tool_use() -> None:
    decoded = codec.decode(_body())
    written = {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [
            {"id": "toolu_9", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ],
        OPAQUE_KEY: [_thinking("hm")],
    }
    out = codec.encode(decoded, [decoded.messages[0], written])["messages"]
    assert [b["type"] for b in out[0]["content"]] == ["thinking", "text", "tool_use"]
    assert out[0]["content"][2]["input"] == {}


@pytest.mark.parametrize(
    ("mutate", "param"),
    [
        (lambda b: b.update(messages=[]), "messages"),
        (lambda b: b["messages"][0].update(role="system"), "messages.0.role"),
        (lambda b: b["messages"][0].update(content=[]), "messages.0.content"),
        (lambda b: b["messages"][0].update(content=7), "messages.0.content"),
        (lambda b: b["messages"][1]["content"][2].pop("id"), "messages.1.content.2.id"),
        (
            lambda b: b["messages"][2]["content"][0].pop("tool_use_id"),
            "messages.2.content.0.tool_use_id",
        ),
        (lambda b: b.update(system=[{"type": "image"}]), "system"),
        (lambda b: b["messages"][3]["content"][0].pop("text"), "messages.3.content.0.text"),
    ],
)
def test_a_malformed_request_names_the_field(mutate: Any, param: str) -> None:
    body = _body()
    mutate(body)
    with pytest.raises(InvalidConversation) as raised:
        codec.decode(body)
    assert raised.value.param == param


def test_a_mid_conversation_system_message_stays_an_instruction_in_place() -> None:
    body = _body()
    update = {"role": "system", "content": [{"type": "text", "text": "Now use tabs."}]}
    body["messages"].insert(1, update)  # right after the task, a user turn
    decoded = codec.decode(body)
    assert decoded.messages[2] == {
        "role": "system",
        "content": [{"type": "text", "text": "Now use tabs."}],
    }
    assert [u.kind for u in group_units(decoded.messages)][:3] == [
        "instruction",
        "user",
        "instruction",
    ]
    # Kept, it goes back as the client's own object.
    encoded = codec.encode(decoded, decoded.messages)
    assert encoded["messages"][1] is update
    # Where the API refuses one (first, or after an assistant turn), so does the codec.
    for at in (0, 2):
        refused = _body()
        refused["messages"].insert(at, dict(update))
        with pytest.raises(InvalidConversation) as raised:
            codec.decode(refused)
        assert raised.value.param == f"messages.{at}.role"
