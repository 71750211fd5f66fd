"""The recall tool on Anthropic's Messages API (``core.recall_messages``): offered, found,
continued and taken out of a message, a held exchange put back into a later request, and a
streamed round read, held and released (streams
rendered by the test upstream's ``messages_answers``, thinking blocks hand-written in the wire
shape of Anthropic's extended-thinking streams)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from anthropic.lib.streaming._messages import accumulate_event

from context_summarizer.core.recall_codec import Held, RecallStream, ToolCall
from context_summarizer.core.recall_messages import (
    MESSAGES,
    calls,
    continued,
    may_offer,
    offered,
    spliced,
    without,
)
from context_summarizer.core.recall_tool import PARAMETERS, RecallTool, recall_tool
from context_summarizer.core.sse_events import event_json
from context_summarizer.loaders.prompts import load_prompt_set
from context_summarizer.testing.messages_answers import message_body, message_events
from context_summarizer.testing.messages_checks import invalid_messages_request

MODEL = "claude-sonnet-4-5"
USAGE = {
    "input_tokens": 120,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 900,
    "output_tokens": 42,
}
AGENT_TOOL = {
    "name": "bash",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    "cache_control": {"type": "ephemeral"},
}
STOP = "tool_use"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


def body() -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "What did we decide about the schema?"}],
        "tools": [AGENT_TOOL],
    }


def tool() -> RecallTool:
    made = recall_tool(load_prompt_set(), ["bash"])
    assert made is not None
    return made


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def use(ident: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": name, "input": arguments}


def thinking(words: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": words, "signature": SIGNATURE}


def wire(payload: dict[str, Any]) -> bytes:
    """One event as Anthropic sends it (named, spaced JSON: unlike ``build_event``'s)."""
    data = json.dumps(payload, ensure_ascii=False)
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


def reply(blocks: list[dict[str, Any]], stop: str, ident: str = "msg_1") -> list[bytes]:
    """The stream of a message (thinking blocks first, then what the test upstream renders)."""
    thoughts = [block for block in blocks if block["type"] == "thinking"]
    rest = [block for block in blocks if block["type"] != "thinking"]
    events = list(message_events(ident, MODEL, rest, stop, USAGE))
    for payload in events:
        if "index" in payload:
            payload["index"] += len(thoughts)
    for index, block in reversed(list(enumerate(thoughts))):
        events[2:2] = thinking_events(index, block)  # after message_start and ping
    return [wire(payload) for payload in events]


def thinking_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    words = block["thinking"]
    deltas = [{"type": "thinking_delta", "thinking": words[:6]}]
    deltas.append({"type": "thinking_delta", "thinking": words[6:]})
    deltas.append({"type": "signature_delta", "signature": block["signature"]})
    start = {"type": "thinking", "thinking": "", "signature": ""}
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def answer_of(blocks: list[dict[str, Any]], stop: str, ident: str = "msg_1") -> dict[str, Any]:
    return message_body(ident, MODEL, copy.deepcopy(blocks), stop, USAGE)


def fed(stream: RecallStream, events: Iterable[bytes]) -> list[bytes]:
    return [out for event in events for out in stream.feed(event)]


def kinds(events: Iterable[bytes]) -> list[tuple[str, int | None]]:
    payloads = [event_json(event) or {} for event in events]
    return [(payload["type"], payload.get("index")) for payload in payloads]


def client_view(events: list[bytes]) -> dict[str, Any]:
    """What the client makes of the events it got: one well-formed stream (one start, blocks
    indexed 0, 1, ... each started, written and stopped in turn, every event named by its
    type), read by the anthropic SDK's own accumulator."""
    payloads = [event_json(event) for event in events]
    for event, payload in zip(events, payloads, strict=True):
        assert payload is not None
        assert event.startswith(f"event: {payload['type']}\n".encode())
    types = [p["type"] for p in payloads if p]
    assert types[0] == "message_start" and types.count("message_start") == 1
    assert types[-1] == "message_stop" and types.count("message_stop") == 1
    started, open_block = 0, None
    for payload in payloads:
        assert payload is not None
        if payload["type"] == "content_block_start":
            assert open_block is None and payload["index"] == started
            open_block, started = started, started + 1
        elif payload["type"] == "content_block_delta":
            assert payload["index"] == open_block
        elif payload["type"] == "content_block_stop":
            assert payload["index"] == open_block
            open_block = None
    snapshot: Any = None
    buffers: dict[int, bytes] = {}
    for payload in payloads:
        snapshot = accumulate_event(event=payload, current_snapshot=snapshot, json_bufs=buffers)  # type: ignore[arg-type]
    return dict(snapshot.to_dict())


# The request and the whole message.


def test_the_tool_goes_after_the_agents_own_which_stay_the_same_objects() -> None:
    original = body()
    before = copy.deepcopy(original)
    sent = offered(original, tool())
    assert sent["tools"][0] is original["tools"][0]  # its cache_control as it was
    assert sent["tools"][1] == {
        "name": "recall",
        "description": tool().description,
        "input_schema": dict(PARAMETERS),
    }  # a custom tool: no "type"
    assert sent["tools"][1]["input_schema"] is not PARAMETERS
    assert original == before
    assert invalid_messages_request(sent) is None
    bare = offered({"model": MODEL, "max_tokens": 5, "messages": []}, tool())
    assert [t["name"] for t in bare["tools"]] == ["recall"]


def test_the_tool_is_not_offered_where_the_agent_chose_otherwise() -> None:
    assert may_offer(body())
    assert may_offer({**body(), "tool_choice": {"type": "auto"}})
    assert may_offer({**body(), "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}})
    assert not may_offer({**body(), "tool_choice": {"type": "any"}})
    assert not may_offer({**body(), "tool_choice": {"type": "tool", "name": "bash"}})
    assert not may_offer({**body(), "tool_choice": {"type": "none"}})
    assert not may_offer({**body(), "tool_choice": "auto"})  # not the Messages shape


def test_calls_are_the_tool_use_blocks_in_order() -> None:
    answer = answer_of(
        [
            thinking("The schema was discussed earlier."),
            text("Let me look."),
            use("toolu_1", "recall", query="schema"),
            use("toolu_2", "bash", command="ls"),
        ],
        "tool_use",
    )
    answer["content"].append({"type": "tool_use", "name": "recall", "input": {}})  # no id
    answer["content"].insert(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "x"})
    assert calls(answer) == [
        ToolCall("toolu_1", "recall", {"query": "schema"}),
        ToolCall("toolu_2", "bash", {"command": "ls"}),
    ]
    assert calls(answer_of([text("Done.")], "end_turn")) == [] and calls({}) == []


def test_the_request_continues_with_the_message_and_one_result_per_call() -> None:
    original = body()
    before = copy.deepcopy(original)
    answer = answer_of(
        [
            thinking("I should search the replaced turns."),
            text("Let me look."),
            use("toolu_1", "recall", query="schema"),
            use("toolu_2", "recall", span="s2"),
        ],
        "tool_use",
    )
    after = continued(original, answer, [("toolu_1", "first"), ("toolu_2", "second")])
    assert after["messages"][0] is original["messages"][0]
    assistant, user = after["messages"][1:]
    assert assistant == {"role": "assistant", "content": answer["content"]}
    assert assistant["content"][0] == thinking("I should search the replaced turns.")
    assert user == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "first"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "second"},
        ],
    }
    assert invalid_messages_request(offered(after, tool())) is None
    missing = continued(original, answer, [("toolu_1", "first")])
    assert invalid_messages_request(missing) is not None  # the check does check the pairing
    assert original == before


def test_recall_calls_are_taken_out_of_a_message_with_the_agents_own() -> None:
    answer = answer_of(
        [
            text("Two things."),
            use("toolu_1", "bash", command="ls"),
            use("toolu_2", "recall", query="schema"),
            use("toolu_3", "bash", command="pwd"),
        ],
        "tool_use",
    )
    before = copy.deepcopy(answer)
    shown = without(answer, "recall")
    assert shown["content"] == [answer["content"][i] for i in (0, 1, 3)]
    assert shown["stop_reason"] == "tool_use" and shown["usage"] == USAGE
    assert answer == before


def test_a_message_left_with_no_call_ends_its_turn() -> None:
    answer = answer_of([text("Let me look."), use("toolu_1", "recall", query="x")], "tool_use")
    shown = without(answer, "recall")
    assert shown["content"] == [text("Let me look.")]
    assert shown["stop_reason"] == "end_turn"
    assert answer["stop_reason"] == "tool_use"
    plain = answer_of([text("Done.")], "end_turn")
    assert without(plain, "recall") == plain
    cut = answer_of([use("toolu_1", "recall", query="x")], "max_tokens")
    assert without(cut, "recall")["stop_reason"] == "max_tokens"


# A held exchange put back.


def result(ident: str, words: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": words}


def held_turn(
    blocks: list[dict[str, Any]],
) -> tuple[dict[str, Any], Held, dict[str, Any]]:
    """An answer calling recall beside the agent's tools, what the loop holds of it, and the
    client's next request: the answer as the client got it (a copy, ``cache_control`` on its
    last block as a client managing its cache sets it), the client's results, and more."""
    said = answer_of(blocks, "tool_use")
    found = calls(said)
    held = Held(
        tuple(call.id for call in found if call.name != "recall"),
        said,
        tuple((call.id, f"recalled {call.id}") for call in found if call.name == "recall"),
    )
    shown = copy.deepcopy(without(said, "recall")["content"])
    shown[-1]["cache_control"] = {"type": "ephemeral"}
    own = [result(call.id, "ok") for call in found if call.name != "recall"]
    client = body()
    client["messages"] += [
        {"role": "assistant", "content": shown},
        {"role": "user", "content": [*own, text("And now?")]},
        {"role": "assistant", "content": "Done."},
    ]
    return said, held, client


def test_a_held_exchange_is_put_back_where_the_client_has_its_turn() -> None:
    said, held, client = held_turn(
        [
            thinking("Recall first, then run."),
            text("Two things."),
            use("toolu_r1", "recall", query="schema"),
            use("toolu_b1", "bash", command="ls"),
            use("toolu_r2", "recall", span="s3"),
            use("toolu_b2", "bash", command="pwd"),
        ]
    )
    before = copy.deepcopy(client)
    asked: list[tuple[str, ...]] = []

    def find(key: tuple[str, ...]) -> Held | None:
        asked.append(key)
        return held if key == held.key else None

    out = spliced(client, find)
    assert out is not None and client == before
    assert asked == [("toolu_b1", "toolu_b2")]  # only the assistant turn with calls
    question, assistant, user, done = out["messages"]
    assert question is client["messages"][0] and done is client["messages"][3]
    shown = client["messages"][1]["content"]
    assert assistant["content"] == [
        shown[0],
        shown[1],
        use("toolu_r1", "recall", query="schema"),
        shown[2],
        use("toolu_r2", "recall", span="s3"),
        shown[3],
    ]
    assert assistant["content"][3] is shown[2] and assistant["content"][5] is shown[3]
    assert assistant["content"][2] is not said["content"][2]  # a copy: the held answer stays
    assert user["content"] == [
        result("toolu_r1", "recalled toolu_r1"),
        result("toolu_r2", "recalled toolu_r2"),
        *client["messages"][2]["content"],
    ]
    assert invalid_messages_request(offered(out, tool())) is None
    assert invalid_messages_request(client) is None
    assert spliced(out, lambda key: held) is None  # put back once
    assert MESSAGES.spliced(client, find) == out


def test_a_recall_block_goes_back_as_a_request_takes_it() -> None:
    said, held, client = held_turn([use("toolu_r1", "recall", query="x"), use("toolu_b1", "bash")])
    said["content"][0]["caller"] = {"type": "direct"}  # a field of the answer, not the request
    out = spliced(client, lambda key: held)
    assert out is not None
    assert out["messages"][1]["content"][0] == use("toolu_r1", "recall", query="x")


def test_a_turn_with_no_user_message_after_it_gets_one() -> None:
    _, held, client = held_turn(
        [text("Checking."), use("toolu_b1", "bash"), use("toolu_r1", "recall", query="x")]
    )
    cut = {**client, "messages": client["messages"][:2]}
    out = spliced(cut, lambda key: held)
    assert out is not None
    assert out["messages"][2] == {
        "role": "user",
        "content": [result("toolu_r1", "recalled toolu_r1")],
    }
    assert [b.get("id") for b in out["messages"][1]["content"]] == [None, "toolu_b1", "toolu_r1"]
    # A user message of text alone (the client sent no results): its text after the results.
    plain = {**client, "messages": [*client["messages"][:2], {"role": "user", "content": "Hi"}]}
    out = spliced(plain, lambda key: held)
    assert out is not None
    assert out["messages"][2]["content"] == [result("toolu_r1", "recalled toolu_r1"), text("Hi")]


def test_a_result_the_client_sent_already_is_not_added_twice() -> None:
    _, held, client = held_turn([use("toolu_r1", "recall", query="x"), use("toolu_b1", "bash")])
    theirs = result("toolu_r1", "the client's own")
    client["messages"][2]["content"].insert(0, theirs)
    out = spliced(client, lambda key: held)
    assert out is not None
    assert out["messages"][2]["content"] == client["messages"][2]["content"]
    assert [b["id"] for b in out["messages"][1]["content"]] == ["toolu_r1", "toolu_b1"]


def test_every_held_turn_of_a_request_is_put_back() -> None:
    _, first, client = held_turn([use("toolu_b1", "bash"), use("toolu_r1", "recall", query="a")])
    _, second, later = held_turn([use("toolu_r2", "recall", query="b"), use("toolu_b2", "bash")])
    client["messages"] += later["messages"][1:]
    holding = {first.key: first, second.key: second}
    out = spliced(client, holding.get)
    assert out is not None
    uses = [
        [block["id"] for block in message["content"] if block["type"] == "tool_use"]
        for message in out["messages"]
        if message["role"] == "assistant" and isinstance(message["content"], list)
    ]
    assert uses == [["toolu_b1", "toolu_r1"], ["toolu_r2", "toolu_b2"]]
    assert invalid_messages_request(out) is None


def test_nothing_is_put_back_without_a_held_turn() -> None:
    _, held, client = held_turn([use("toolu_r1", "recall", query="x"), use("toolu_b1", "bash")])
    assert spliced(client, lambda key: None) is None
    assert spliced({"messages": "x"}, lambda key: held) is None
    assert spliced({}, lambda key: held) is None
    looked: list[tuple[str, ...]] = []

    def find(key: tuple[str, ...]) -> Held:
        looked.append(key)
        return held

    idless = {"role": "assistant", "content": [{"type": "tool_use", "name": "bash", "input": {}}]}
    plain = {"role": "assistant", "content": [text("Hi.")]}
    user = {"role": "user", "content": [use("toolu_b1", "bash")]}  # not an assistant turn
    assert spliced({"messages": [idless, plain, user, "junk"]}, find) is None
    assert looked == []


# A streamed round.


def test_text_is_relayed_as_it_comes_and_held_from_the_first_call() -> None:
    events = reply(
        [
            text("Let me look that up."),
            use("toolu_1", "recall", query="schema"),
            use("toolu_2", "bash", command="ls"),
        ],
        "tool_use",
    )
    first_call = kinds(events).index(("content_block_start", 1))
    stream = MESSAGES.stream(None)
    for number, event in enumerate(events):
        out = stream.feed(event)
        if number < first_call:
            assert len(out) == 1 and out[0] is event
        else:
            assert out == []
    assert stream.release(None) == events[first_call:]


def test_a_round_with_no_calls_is_relayed_entirely() -> None:
    events = reply([thinking("Easy."), text("It is Postgres.")], "end_turn")
    stream = MESSAGES.stream(None)
    assert all(stream.feed(event) == [event] for event in events)
    assert stream.release("recall") == [] and stream.release(None) == []
    assert stream.answer() == answer_of([thinking("Easy."), text("It is Postgres.")], "end_turn")


def test_the_answer_is_the_non_streamed_message_of_the_same_reply() -> None:
    replies = [
        ([text("Hello there, how are you?")], "end_turn"),
        ([use("toolu_1", "recall", query="schema", regex=False)], "tool_use"),
        (
            [
                thinking("Search first, then run."),
                text("Checking."),
                use("toolu_1", "recall", span="s1", offset=3),
                use("toolu_2", "bash", command="echo 'é'"),
            ],
            "tool_use",
        ),
    ]
    for blocks, stop in replies:
        stream = MESSAGES.stream(None)
        fed(stream, reply(blocks, stop))
        assert stream.answer() == answer_of(blocks, stop)
        assert MESSAGES.calls(stream.answer()) == calls(answer_of(blocks, stop))


def test_a_call_without_whole_input_reads_as_an_empty_object() -> None:
    start = {"type": "tool_use", "id": "toolu_1", "name": "recall", "input": {}}
    for pieces in [[""], ['{"query": "sch'], ["[1]"]]:  # none, cut by max_tokens, no object
        stream = MESSAGES.stream(None)
        for payload in [
            {"type": "content_block_start", "index": 0, "content_block": start},
            *(
                {"type": "content_block_delta", "index": 0, "delta": delta}
                for delta in ({"type": "input_json_delta", "partial_json": p} for p in pieces)
            ),
            {"type": "content_block_stop", "index": 0},
        ]:
            stream.feed(wire(payload))
        assert stream.answer()["content"] == [start]


def test_release_takes_the_recall_calls_out_and_closes_the_indexes() -> None:
    blocks = [
        text("Two things."),
        use("toolu_1", "recall", query="schema"),
        use("toolu_2", "bash", command="ls"),
        use("toolu_3", "recall", span="s4"),
    ]
    events = reply(blocks, "tool_use")
    stream = MESSAGES.stream(None)
    relayed = fed(stream, events)
    released = stream.release("recall")
    bash_events = [kind for kind, index in kinds(events) if index == 2]
    assert [kind for kind in kinds(released) if kind[1] is not None] == [
        (kind, 1) for kind in bash_events
    ]
    assert {index for _, index in kinds(released)} == {1, None}
    assert released[-1] is events[-1]  # message_stop: the same bytes
    shown = client_view(relayed + released)
    assert shown["content"] == [blocks[0], blocks[2]]
    assert shown["stop_reason"] == "tool_use"
    assert client_view(relayed + stream.release(None))["content"] == blocks
    assert stream.release("other") == events[len(relayed) :]


def test_release_of_the_only_calls_ends_the_turn() -> None:
    blocks = [text("Let me look."), use("toolu_1", "recall", query="schema")]
    stream = MESSAGES.stream(None)
    relayed = fed(stream, reply(blocks, "tool_use"))
    released = stream.release("recall")
    assert [kind for kind, _ in kinds(released)] == ["message_delta", "message_stop"]
    assert released[0].startswith(b"event: message_delta\ndata: {")
    shown = client_view(relayed + released)
    assert shown["content"] == [text("Let me look.")]
    assert shown["stop_reason"] == "end_turn"
    assert shown["usage"]["output_tokens"] == USAGE["output_tokens"]


def test_a_continuing_round_drops_its_start_and_continues_the_indexes() -> None:
    first = MESSAGES.stream(None)
    client = fed(first, reply([text("Let me check."), use("toolu_1", "recall", query="a")], STOP))
    second = MESSAGES.stream(first)
    second_events = reply([use("toolu_2", "recall", query="b")], "tool_use", "msg_2")
    assert fed(second, second_events) == []  # its start and ping dropped, the rest held
    assert second.answer()["id"] == "msg_2"  # the round's own message, its own indexes
    assert second.answer()["content"] == [use("toolu_2", "recall", query="b")]
    third = MESSAGES.stream(second)
    blocks = [
        thinking("Found it."),
        text("The schema is v2."),
        use("toolu_3", "bash", command="ls"),
    ]
    third_events = reply(blocks, "tool_use", "msg_3")
    relayed = fed(third, third_events)
    assert kinds(relayed)[0] == ("content_block_start", 1)
    assert relayed[0].startswith(b"event: content_block_start\ndata: {")
    assert third.answer()["content"] == blocks
    released = third.release("recall")
    assert kinds(released)[0] == ("content_block_start", 3)
    assert kinds(third.release(None))[0] == ("content_block_start", 3)  # moved on, too
    assert released[-1] is third_events[-1]
    shown = client_view(client + relayed + released)
    assert shown["id"] == "msg_1"
    assert shown["content"] == [text("Let me check."), *blocks]
    assert shown["stop_reason"] == "tool_use"


def test_a_continuing_round_without_calls_ends_the_clients_message() -> None:
    first = MESSAGES.stream(None)
    client = fed(first, reply([text("Let me check."), use("toolu_1", "recall", query="a")], STOP))
    second = MESSAGES.stream(first)
    events = reply([text("It is v2.")], "end_turn", "msg_2")
    relayed = fed(second, events)
    assert kinds(relayed)[0] == ("content_block_start", 1)
    assert relayed[-2:] == events[-2:]  # message_delta and message_stop as they came
    assert second.release("recall") == []
    shown = client_view(client + relayed)
    assert shown["content"] == [text("Let me check."), text("It is v2.")]
    assert shown["stop_reason"] == "end_turn"


def test_a_stream_reader_continues_only_its_own_kind() -> None:
    class Other:
        def feed(self, event: bytes) -> list[bytes]:
            return [event]

        def answer(self) -> dict[str, Any]:
            return {}

        def release(self, name: str | None) -> list[bytes]:
            return []

    events = reply([text("Hi.")], "end_turn")
    assert fed(MESSAGES.stream(Other()), events) == events
