"""The Responses API codec: ``input`` items to chat messages and back, kept items unchanged."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_summarizer.core.codecs import OPAQUE_KEY, Decoded
from context_summarizer.core.codecs.responses import (
    ResponsesCodec,
    ResponsesDecoded,
    history_at_provider,
)
from context_summarizer.core.codecs.responses_items import WIRE_TYPE_KEY
from context_summarizer.core.errors import InvalidConversation
from context_summarizer.core.messages import (
    group_units,
    message_digest,
    prefix_chain,
    validate_messages,
)

CODEC = ResponsesCodec()
Item = dict[str, Any]


def user(text: str) -> Item:
    return {"role": "user", "content": text}


def said(text: str, id: str = "msg_1") -> Item:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "type": "message",
        "role": "assistant",
        "id": id,
        "status": "completed",
        "content": content,
    }


def thought(id: str, secret: str = "ENC") -> Item:
    return {"type": "reasoning", "id": id, "summary": [], "encrypted_content": secret}


def call(call_id: str, name: str = "ls", arguments: str = "{}") -> Item:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def output(call_id: str, text: str = "out") -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def searched(id: str) -> Item:
    return {"type": "web_search_call", "id": id, "status": "completed", "action": {"query": "q"}}


def image_message() -> Item:
    return {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
            {"type": "input_image", "file_id": "file-1", "detail": "auto"},
        ],
    }


def decode(items: list[Item], **body: Any) -> ResponsesDecoded:
    return CODEC.decode({"model": "gpt-x", "input": items, **body})


def encoded(decoded: Decoded, messages: list[dict[str, Any]]) -> list[Any]:
    result = CODEC.encode(decoded, messages)
    assert list(result) == ["input"]
    items = result["input"]
    assert isinstance(items, list)
    return items


BODIES = {
    "text turns": [user("hi"), said("hello"), user("bye")],
    "parallel calls": [
        user("list"),
        call("a"),
        call("b", "cat"),
        output("b", "B"),
        output("a", "A"),
        said("done"),
    ],
    "encrypted reasoning": [user("q"), thought("rs_1"), call("a"), output("a"), thought("rs_2")],
    "assistant text with calls": [
        user("q"),
        thought("rs_1"),
        said("looking", "msg_2"),
        call("a"),
        call("b"),
        output("a"),
        output("b"),
    ],
    "opaque web search": [user("q"), thought("rs_1"), searched("ws_1"), thought("rs_2"), said("x")],
    "images": [image_message(), said("a cat")],
    "custom tool": [
        user("patch"),
        {"type": "custom_tool_call", "call_id": "p", "name": "apply_patch", "input": "*** diff"},
        {"type": "custom_tool_call_output", "call_id": "p", "output": "ok"},
    ],
    "local shell answered by a function output": [
        user("run"),
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "s1",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        output("s1", "file.txt"),
    ],
    "computer use": [
        user("click"),
        thought("rs_1"),
        {"type": "computer_call", "id": "cu_1", "call_id": "k1", "action": {}, "status": "done"},
        {
            "type": "computer_call_output",
            "call_id": "k1",
            "output": {"type": "computer_screenshot"},
        },
        said("clicked"),
    ],
}


@pytest.mark.parametrize("name", list(BODIES))
def test_encoding_every_decoded_message_gives_back_the_clients_items(name: str) -> None:
    items = BODIES[name]
    decoded = decode(items, instructions="be brief")
    validate_messages(decoded.messages)
    out = encoded(decoded, decoded.messages)
    assert len(out) == len(items)
    assert all(a is b for a, b in zip(out, items, strict=True))


def test_a_string_input_is_one_user_message_and_encodes_back_to_the_string() -> None:
    decoded = CODEC.decode({"input": "hello", "instructions": "sys"})
    assert decoded.messages == [{"role": "system", "content": "sys"}, user("hello")]
    assert decoded.system_items == 1
    assert CODEC.encode(decoded, decoded.messages) == {"input": "hello"}


def test_a_string_input_beside_a_summary_becomes_a_message_item() -> None:
    decoded = CODEC.decode({"input": "hello"})
    summary = {"role": "user", "content": "SUMMARY"}
    out = encoded(decoded, [summary, *decoded.messages])
    assert out == [
        {"type": "message", "role": "user", "content": "SUMMARY"},
        {"type": "message", "role": "user", "content": "hello"},
    ]


def test_instructions_are_a_leading_system_message_never_emitted() -> None:
    decoded = decode([user("hi")], instructions="rules")
    assert decoded.messages[0] == {"role": "system", "content": "rules"}
    assert decoded.origins[id(decoded.messages[0])].items == ()
    assert encoded(decoded, decoded.messages) == [user("hi")]
    assert decode([user("hi")]).system_items == 0


def test_message_parts_are_translated_to_chat_parts() -> None:
    items = [
        image_message(),
        {
            "role": "user",
            "content": [{"type": "input_file", "file_id": "file-2", "filename": "a.pdf"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "phase": "final_answer",
            "content": [
                {"type": "output_text", "text": "t", "annotations": []},
                {"type": "refusal", "refusal": "no"},
            ],
        },
    ]
    messages = decode(items).messages
    assert messages[0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "file_id:file-1", "detail": "auto"}},
    ]
    assert messages[1]["content"] == [
        {"type": "file", "file": {"file_id": "file-2", "filename": "a.pdf"}}
    ]
    assert messages[2] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "t", "annotations": []},
            {"type": "refusal", "refusal": "no"},
        ],
        "phase": "final_answer",
    }


def test_calls_join_the_assistant_message_before_them_and_outputs_are_tool_messages() -> None:
    items = [
        user("q"),
        said("looking"),
        call("a", "ls", '{"d": 1}'),
        call("b", "cat"),
        output("a", "A"),
        {
            "type": "function_call_output",
            "call_id": "b",
            "output": [{"type": "input_text", "text": "B"}],
        },
    ]
    decoded = decode(items)
    assistant, first, second = decoded.messages[1:]
    assert assistant == {
        "role": "assistant",
        "content": [{"type": "text", "text": "looking", "annotations": []}],
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "ls", "arguments": '{"d": 1}'}},
            {"id": "b", "type": "function", "function": {"name": "cat", "arguments": "{}"}},
        ],
    }
    assert first == {"role": "tool", "tool_call_id": "a", "content": "A"}
    assert second == {
        "role": "tool",
        "tool_call_id": "b",
        "content": [{"type": "text", "text": "B"}],
    }
    assert decoded.origins[id(assistant)].items == (1, 2, 3)
    assert [u.kind for u in group_units(decoded.messages)] == ["user", "tool_exchange"]


def test_a_custom_tool_call_reads_as_a_function_call_marked_with_its_type() -> None:
    messages = decode(BODIES["custom tool"]).messages
    assert messages[1]["tool_calls"] == [
        {
            "id": "p",
            "type": "function",
            "function": {"name": "apply_patch", "arguments": "*** diff"},
            WIRE_TYPE_KEY: "custom_tool_call",
        }
    ]
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "p",
        "content": "ok",
        WIRE_TYPE_KEY: "custom_tool_call_output",
    }


def test_calls_after_an_output_start_a_new_assistant_message() -> None:
    items = [user("q"), call("a"), output("a"), call("b"), output("b")]
    messages = decode(items).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert [u.kind for u in group_units(messages)] == ["user", "tool_exchange", "tool_exchange"]


def test_reasoning_rides_under_the_opaque_key_of_what_it_led_to() -> None:
    items = [user("q"), thought("rs_1"), said("a"), user("q2"), thought("rs_2"), call("c")]
    messages = decode(items).messages
    assert messages[1][OPAQUE_KEY] == [items[1]]
    assert messages[1][OPAQUE_KEY][0] is items[1]
    assert messages[1]["content"] == [{"type": "text", "text": "a", "annotations": []}]
    assert messages[3][OPAQUE_KEY] == [items[4]]
    assert messages[3]["tool_calls"][0]["id"] == "c"


def test_reasoning_with_nothing_after_it_in_its_turn_is_an_assistant_message_of_its_own() -> None:
    items = [user("q"), thought("rs_1"), user("again"), thought("rs_2")]
    decoded = decode(items)
    lone = {"role": "assistant", "content": None}
    assert decoded.messages == [
        user("q"),
        {**lone, OPAQUE_KEY: [items[1]]},
        user("again"),
        {**lone, OPAQUE_KEY: [items[3]]},
    ]
    assert [decoded.origins[id(m)].items for m in decoded.messages] == [(0,), (1,), (2,), (3,)]


def test_opaque_items_join_the_next_model_output_so_a_turn_stays_whole() -> None:
    items = BODIES["opaque web search"]
    messages = decode(items).messages
    assert len(messages) == 2
    assert messages[1][OPAQUE_KEY] == items[1:4]
    assert all(a is b for a, b in zip(messages[1][OPAQUE_KEY], items[1:4], strict=True))


def test_an_opaque_item_between_outputs_joins_the_next_output_not_splitting_the_exchange() -> None:
    reference = {"type": "item_reference", "id": "ws_9"}
    items = [user("q"), call("a"), call("b"), output("a"), reference, output("b")]
    decoded = decode(items, previous_response_id="resp_1")
    assert decoded.messages[3] == {
        "role": "tool",
        "tool_call_id": "b",
        "content": "out",
        OPAQUE_KEY: [reference],
    }
    assert [(u.start, u.end) for u in group_units(decoded.messages)] == [(0, 1), (1, 4)]


def test_opaque_calls_and_their_outputs_form_one_unit() -> None:
    items = BODIES["computer use"]
    messages = decode(items).messages
    assert messages[1] == {
        "role": "assistant",
        "content": None,
        OPAQUE_KEY: [items[1], items[2]],
        "tool_calls": [{"id": "k1", "type": "computer_call"}],
    }
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "k1",
        "content": None,
        OPAQUE_KEY: [items[3]],
    }
    assert [u.kind for u in group_units(messages)] == ["user", "tool_exchange", "assistant"]
    shell = decode(BODIES["local shell answered by a function output"]).messages
    assert [u.kind for u in group_units(shell)] == ["user", "tool_exchange"]
    assert shell[2] == {"role": "tool", "tool_call_id": "s1", "content": "file.txt"}


def test_tools_become_chat_tools_and_other_tools_pass_as_they_are() -> None:
    function = {
        "type": "function",
        "name": "ls",
        "description": "list",
        "parameters": {"type": "object", "properties": {}},
        "strict": True,
    }
    search = {"type": "web_search"}
    decoded = decode([user("q")], tools=[function, search])
    assert decoded.tools is not None
    assert decoded.tools[0] == {
        "type": "function",
        "function": {
            "name": "ls",
            "description": "list",
            "parameters": {"type": "object", "properties": {}},
            "strict": True,
        },
    }
    assert decoded.tools[1] is search
    assert decode([user("q")]).tools is None


# Identity ----------------------------------------------------------------------------------------


def test_a_changed_encrypted_content_changes_its_messages_digest() -> None:
    before = decode([user("q"), thought("rs_1", "AAA"), said("x")]).messages
    after = decode([user("q"), thought("rs_1", "AAB"), said("x")]).messages
    assert message_digest(before[0]) == message_digest(after[0])
    assert message_digest(before[1]) != message_digest(after[1])


@pytest.mark.parametrize("name", list(BODIES))
def test_equal_items_decoded_twice_give_equal_digests(name: str) -> None:
    first = decode(BODIES[name]).messages
    second = decode(copy.deepcopy(BODIES[name])).messages
    assert prefix_chain(first) == prefix_chain(second)


def test_ids_statuses_and_cache_breakpoints_do_not_change_a_translated_message() -> None:
    marker = {"prompt_cache_breakpoint": {"mode": "explicit"}}
    plain = decode([{"role": "user", "content": [{"type": "input_text", "text": "q"}]}, said("x")])
    marked = decode(
        [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "q", **marker}],
            },
            {**said("x", "msg_other"), "status": "incomplete"},
        ]
    )
    assert prefix_chain(plain.messages) == prefix_chain(marked.messages)


def test_what_the_model_reads_changes_the_digest() -> None:
    base = decode([user("q"), said("x")]).messages
    phased = decode([user("q"), {**said("x"), "phase": "commentary"}]).messages
    custom = decode(
        [user("q"), {"type": "custom_tool_call", "call_id": "a", "name": "ls", "input": "{}"}]
    ).messages
    function = decode([user("q"), call("a")]).messages
    assert message_digest(base[1]) != message_digest(phased[1])
    assert message_digest(custom[1]) != message_digest(function[1])


# Encoding what the engine chose ------------------------------------------------------------------


def test_a_shortened_output_is_its_item_with_the_new_output_and_no_id() -> None:
    original = {
        "type": "custom_tool_call_output",
        "id": "ctco_1",
        "call_id": "p",
        "output": "long " * 50,
    }
    reference = {"type": "item_reference", "id": "x"}
    items = [user("q"), BODIES["custom tool"][1], reference, original]
    decoded = decode(items)
    tool = decoded.messages[2]
    shortened = {**tool, "content": "[elided]"}
    out = encoded(decoded, [*decoded.messages[:2], shortened])
    assert out[:3] == items[:3] and all(a is b for a, b in zip(out, items[:3], strict=False))
    assert out[3] == {"type": "custom_tool_call_output", "call_id": "p", "output": "[elided]"}
    assert original["output"] == "long " * 50  # the client's object is untouched


def test_an_output_the_engine_cannot_read_is_never_shortened() -> None:
    items = BODIES["computer use"]
    decoded = decode(items)
    masked = {**decoded.messages[2], "content": "[masked]"}
    out = encoded(decoded, [*decoded.messages[:2], masked, decoded.messages[3]])
    assert all(a is b for a, b in zip(out, items, strict=True))


def test_a_kept_message_given_twice_emits_its_items_once() -> None:
    items = [user("q"), said("x")]
    decoded = decode(items)
    out = encoded(decoded, [*decoded.messages, decoded.messages[1]])
    assert out == items


def test_new_messages_are_message_items() -> None:
    decoded = decode([user("q")])
    new_assistant = {"role": "assistant", "content": [{"type": "text", "text": "noted"}]}
    out = encoded(
        decoded, [{"role": "developer", "content": "d"}, new_assistant, *decoded.messages]
    )
    assert out == [
        {"type": "message", "role": "developer", "content": "d"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "noted", "annotations": []}],
        },
        user("q"),
    ]


def test_encode_refuses_a_decoded_it_did_not_make() -> None:
    with pytest.raises(TypeError):
        CODEC.encode(Decoded(messages=[user("q")], tools=None), [user("q")])


# Validation --------------------------------------------------------------------------------------

INVALID = [
    ({"input": 3}, "input"),
    ({"input": []}, "input"),
    ({"instructions": ["x"], "input": "q"}, "instructions"),
    ({"input": [user("q"), "text"]}, "input[1]"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "message", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": [{"text": "x"}]}]}, "input[0].content[0]"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
        "input[0].content[0].text",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
        "input[0].content[0].image_url",
    ),
    ({"input": [{"content": "x"}]}, "input[0].type"),
    ({"input": [{"type": 7}]}, "input[0].type"),
    ({"input": [user("q"), {**call("a"), "call_id": None}]}, "input[1].call_id"),
    ({"input": [user("q"), {**call("a"), "name": 1}]}, "input[1].name"),
    ({"input": [user("q"), {**call("a"), "arguments": {}}]}, "input[1].arguments"),
    ({"input": [user("q"), output("a")]}, "input[1].call_id"),
    ({"input": [user("q"), output("a"), call("a")]}, "input[1].call_id"),
    (
        {"input": [user("q"), call("a"), {"type": "function_call_output", "call_id": "a"}]},
        "input[2].output",
    ),
    ({"input": [user("q"), {"type": "function_call_output", "output": "x"}]}, "input[1].call_id"),
    ({"input": "q", "tools": {}}, "tools"),
    ({"input": "q", "tools": ["web_search"]}, "tools[0]"),
    ({"input": "q", "tools": [{"type": "function"}]}, "tools[0].name"),
]


@pytest.mark.parametrize(("body", "param"), INVALID, ids=[p for _, p in INVALID])
def test_a_body_the_api_refuses_names_the_bad_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidConversation) as raised:
        CODEC.decode(body)
    assert raised.value.param == param


@pytest.mark.parametrize(
    "history",
    [
        {"previous_response_id": "resp_1"},
        {"conversation": "conv_1"},
        {"extra": [{"type": "item_reference", "id": "fc_a"}]},
        {"extra": [{"id": "fc_a"}]},
    ],
)
def test_with_the_history_at_the_provider_an_output_may_answer_a_call_not_in_input(
    history: dict[str, Any],
) -> None:
    items = [*history.pop("extra", []), output("a")]
    body = {"input": items, **history}
    assert history_at_provider(body)
    decoded = CODEC.decode(body)
    validate_messages(decoded.messages)
    assert decoded.messages[-1]["role"] == "tool"
    assert group_units(decoded.messages)[-1].kind == "tool"
    assert not history_at_provider({"input": [output("a")]})


# Properties over generated conversations ---------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[Item], list[int]]:
    """A valid ``input``, and the lengths at which a client would send it (after each user
    message or batch of outputs)."""
    ids = itertools.count()
    items: list[Item] = []
    requests: list[int] = []

    def fresh(prefix: str) -> str:
        return f"{prefix}_{next(ids)}"

    for _ in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(["user", "user", "developer"]))
        if draw(st.booleans()):
            items.append({"role": role, "content": fresh("text")})
        else:
            items.append(
                {
                    "type": "message",
                    "role": role,
                    "content": [{"type": "input_text", "text": fresh("t")}],
                }
            )
        requests.append(len(items))
        for _ in range(draw(st.integers(0, 3))):
            calls: list[str] = []
            for _ in range(draw(st.integers(0, 2))):
                kind = draw(st.sampled_from(["reasoning", "search", "text"]))
                if kind == "reasoning":
                    items.append(thought(fresh("rs"), draw(st.sampled_from(["A", "B"]))))
                elif kind == "search":
                    items.append(searched(fresh("ws")))
                else:
                    items.append(said(fresh("text"), fresh("msg")))
            for _ in range(draw(st.integers(0, 3))):
                if draw(st.booleans()):
                    items.append(thought(fresh("rs")))
                call_id = fresh("call")
                kind = draw(
                    st.sampled_from(["function", "function", "custom", "shell", "computer"])
                )
                if kind == "function":
                    items.append(call(call_id, draw(st.sampled_from(["ls", "cat"]))))
                elif kind == "custom":
                    items.append(
                        {"type": "custom_tool_call", "call_id": call_id, "name": "p", "input": "x"}
                    )
                else:
                    items.append(
                        {
                            "type": f"{kind}_call" if kind == "computer" else "local_shell_call",
                            "call_id": call_id,
                            "action": {},
                        }
                    )
                calls.append(call_id)
            if not calls:
                if items[-1].get("role") != "assistant" and draw(st.booleans()):
                    items.append(said(fresh("text"), fresh("msg")))
                continue
            for call_id in draw(st.permutations(calls)):
                kind = next(i["type"] for i in items if i.get("call_id") == call_id)
                if kind == "custom_tool_call":
                    items.append(
                        {
                            "type": "custom_tool_call_output",
                            "call_id": call_id,
                            "output": fresh("out"),
                        }
                    )
                elif kind == "computer_call":
                    items.append({"type": "computer_call_output", "call_id": call_id, "output": {}})
                else:
                    items.append(output(call_id, fresh("out")))
            requests.append(len(items))
    return items, requests


def wire_pairs_hold(out: list[Any], items: list[Item]) -> None:
    """Every output has its call earlier; every call keeps the output it had; every kept
    reasoning item is still followed by what followed it (when that was not a new turn)."""
    index = {id(item): n for n, item in enumerate(items)}
    called: set[str] = set()
    answered = {i.get("call_id") for i in out if i.get("type", "").endswith("_output")}
    for position, item in enumerate(out):
        if item.get("type", "").endswith("_output"):
            assert item["call_id"] in called
        elif "call_id" in item:
            called.add(item["call_id"])
            if any(o.get("call_id") == item["call_id"] for o in items if o is not item):
                assert item["call_id"] in answered
        if item.get("type") == "reasoning":
            after = index[id(item)] + 1
            if after < len(items) and items[after].get("role") not in ("user", "developer"):
                assert out[position + 1] is items[after]


@settings(max_examples=150, deadline=None)
@given(conversations(), st.data())
def test_dropping_leading_units_for_a_summary_keeps_the_rest_as_sent(
    generated: tuple[list[Item], list[int]], data: st.DataObject
) -> None:
    items, _ = generated
    decoded = decode(items, instructions=data.draw(st.sampled_from([None, "sys"])))
    validate_messages(decoded.messages)
    start = decoded.system_items
    units = group_units(decoded.messages[start:])
    dropped = data.draw(st.integers(0, len(units) - 1))
    kept = decoded.messages[start + units[dropped].start :]
    summary = {"role": "user", "content": "SUMMARY of the start"}
    out = encoded(decoded, [*decoded.messages[:start], summary, *kept])
    expected = [items[i] for m in kept for i in decoded.origins[id(m)].items]
    assert out[0] == {"type": "message", "role": "user", "content": "SUMMARY of the start"}
    assert len(out) == len(expected) + 1
    assert all(a is b for a, b in zip(out[1:], expected, strict=True))
    index = {id(item): n for n, item in enumerate(items)}
    assert [index[id(i)] for i in out[1:]] == sorted(index[id(i)] for i in out[1:])
    wire_pairs_hold(out[1:], items)


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_every_generated_conversation_decodes_valid_and_round_trips(
    generated: tuple[list[Item], list[int]],
) -> None:
    items, _ = generated
    decoded = decode(items)
    validate_messages(decoded.messages)
    covered = sorted(i for m in decoded.messages for i in decoded.origins[id(m)].items)
    assert covered == list(range(len(items)))
    for message in decoded.messages:
        assert "reasoning" not in repr(message.get("content"))
    out = encoded(decoded, decoded.messages)
    assert all(a is b for a, b in zip(out, items, strict=True))


@settings(max_examples=100, deadline=None)
@given(conversations())
def test_a_growing_conversation_decodes_append_only(
    generated: tuple[list[Item], list[int]],
) -> None:
    items, requests = generated
    chains = [prefix_chain(decode(items[:n]).messages) for n in requests]
    for shorter, longer in itertools.pairwise(chains):
        assert longer[: len(shorter)] == shorter
