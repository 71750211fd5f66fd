"""The recall tool on Gemini's ``generateContent`` (``core.recall_gemini``): offered, found,
continued and taken out of an answer, and a streamed round read chunk by chunk. Answers and
streams are the test upstream's own renderings (``testing.gemini_answers``), and once its real
server's."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2
import pytest

from context_summarizer.core.recall_codec import Held, RecallCodec, ToolCall
from context_summarizer.core.recall_gemini import (
    GEMINI,
    SKIP_SIGNATURE,
    GeminiStream,
    calls,
    continued,
    may_offer,
    offered,
    spliced,
    without,
)
from context_summarizer.core.recall_tool import PARAMETERS, RecallTool, recall_tool
from context_summarizer.loaders.prompts import load_prompt_set
from context_summarizer.proxy.sse import EventSplitter
from context_summarizer.testing import Reply, TestUpstream, ToolCallSpec
from context_summarizer.testing.answers import Answer
from context_summarizer.testing.gemini_answers import (
    THOUGHT,
    answer_parts,
    response_body,
    stream_chunks,
    usage_metadata,
)
from context_summarizer.testing.gemini_chat import (
    invalid_gemini_request,
    missing_signature,
    signature_for,
    unanswered_calls,
)

MODEL = "gemini-3-pro-preview"
AGENT_TOOL = {
    "functionDeclarations": [
        {"name": "run_shell_command", "parameters": {"type": "object", "properties": {}}}
    ]
}
USAGE = usage_metadata(120, 0, 30)


def body(**extra: Any) -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": "Where did we put the key?"}]}],
        "tools": [AGENT_TOOL],
        "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
        **extra,
    }


def reply_parts(
    text: str | None, *names: str, ids: list[str | None] | None = None
) -> list[dict[str, Any]]:
    """The parts the test model answers with: its thought, ``text``, a signed call per name."""
    tool_calls = [
        {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"query": f"q{n}"})},
        }
        for n, name in enumerate(names)
    ]
    answer = Answer(text, tool_calls, "tool_calls" if names else "stop", 30)
    return answer_parts(answer, thoughts=True, signed=True, ids=ids or [])


def answer(text: str | None, *names: str, ids: list[str | None] | None = None) -> dict[str, Any]:
    return response_body("resp-1", MODEL, reply_parts(text, *names, ids=ids), "STOP", USAGE)


def sse(chunk: Mapping[str, Any]) -> bytes:
    """A chunk as the test upstream (and Google) frames it with ``alt=sse``."""
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\r\n\r\n"


def events(text: str | None, *names: str, ids: list[str | None] | None = None) -> list[bytes]:
    chunks = stream_chunks("resp-1", MODEL, reply_parts(text, *names, ids=ids), "STOP", USAGE)
    return [sse(chunk) for chunk in chunks]


def chunk_of(event: bytes) -> dict[str, Any]:
    found = json.loads(event.split(b"data: ", 1)[1])
    assert isinstance(found, dict)
    return found


def parts_of(event: bytes) -> list[dict[str, Any]]:
    parts = chunk_of(event)["candidates"][0]["content"]["parts"]
    assert isinstance(parts, list)
    return parts


def tool() -> RecallTool:
    made = recall_tool(load_prompt_set(), ["run_shell_command"])
    assert made is not None
    return made


def test_the_codec_object_is_a_recall_codec() -> None:
    codec: RecallCodec = GEMINI
    assert codec.calls(answer(None, "recall")) == calls(answer(None, "recall"))
    assert isinstance(codec.stream(None), GeminiStream)


# --- offered, may_offer ---------------------------------------------------------------------


def test_the_tool_is_a_new_declaration_after_the_agents_which_stay_the_same_objects() -> None:
    original = body()
    before = copy.deepcopy(original)
    sent = offered(original, tool())
    assert sent["tools"][0] is original["tools"][0]
    assert len(sent["tools"]) == 2
    (declaration,) = sent["tools"][1]["functionDeclarations"]
    assert declaration["name"] == "recall" and declaration["description"] == tool().description
    expected = {key: value for key, value in PARAMETERS.items() if key != "additionalProperties"}
    assert declaration["parameters"] == expected  # the rest of the schema kept as it is
    assert original == before and "additionalProperties" in PARAMETERS
    assert offered({"contents": []}, tool())["tools"][0]["functionDeclarations"][0]["name"] == (
        "recall"
    )


def test_additional_properties_go_at_any_depth_but_a_property_of_that_name_stays() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "additionalProperties": {"type": "string"},
            "filter": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "properties": {"tags": {"type": "array", "items": {"additionalProperties": 1}}},
            },
            "either": {"anyOf": [{"type": "object", "additionalProperties": True}]},
        },
        "required": ["filter"],
    }
    original = copy.deepcopy(schema)
    sent = offered(body(), RecallTool("recall", "d", schema))
    parameters = sent["tools"][1]["functionDeclarations"][0]["parameters"]
    assert parameters == {
        "type": "object",
        "properties": {
            "additionalProperties": {"type": "string"},
            "filter": {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {}}},
            },
            "either": {"anyOf": [{"type": "object"}]},
        },
        "required": ["filter"],
    }
    assert schema == original
    assert parameters["required"] is not schema["required"]


def test_the_tool_is_offered_only_with_auto_calling_and_one_candidate() -> None:
    auto = {"functionCallingConfig": {"mode": "AUTO"}}
    assert may_offer(body()) and may_offer(body(toolConfig=auto))
    assert may_offer(body(toolConfig={}))
    assert may_offer(body(toolConfig={"functionCallingConfig": {}}))
    assert may_offer({**body(), "generationConfig": {"candidateCount": 1}})
    assert not may_offer({**body(), "generationConfig": {"candidateCount": 2}})
    snake_count = {"contents": body()["contents"], "generation_config": {"candidate_count": 3}}
    assert not may_offer(snake_count)
    assert not may_offer(body(toolConfig={"functionCallingConfig": {"mode": "NONE"}}))
    assert not may_offer(body(toolConfig={"functionCallingConfig": {"mode": "ANY"}}))
    assert not may_offer(body(toolConfig={"functionCallingConfig": {"mode": "VALIDATED"}}))
    named = {"mode": "AUTO", "allowedFunctionNames": ["run_shell_command"]}
    assert not may_offer(body(toolConfig={"functionCallingConfig": named}))
    snake = {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["x"]}}
    assert not may_offer(body(tool_config=snake))


# --- calls, continued, without --------------------------------------------------------------


def test_calls_are_read_in_order_with_their_own_id_else_name_and_position() -> None:
    found = calls(answer("Looking.", "recall", "run_shell_command", ids=[None, "fc-7"]))
    # parts: the thought, the text, then the calls (positions 2 and 3)
    assert found == [
        ToolCall("recall#2", "recall", {"query": "q0"}),
        ToolCall("fc-7", "run_shell_command", {"query": "q1"}),
    ]
    assert isinstance(found[0].arguments, dict)
    malformed = answer(None, "recall")
    malformed["candidates"][0]["content"]["parts"][1:1] = [
        {"functionCall": {"args": {}}},  # no name
        {"functionCall": {"name": "recall"}},  # no args: read as None
    ]
    assert [(c.id, c.arguments) for c in calls(malformed)] == [
        ("recall#2", None),
        ("recall#3", {"query": "q0"}),
    ]
    assert calls(answer("Just text.")) == []
    assert calls({"candidates": []}) == [] and calls({}) == []
    assert calls({"candidates": [{"finishReason": "SAFETY"}]}) == []


def test_the_request_continues_with_the_answer_as_it_came_and_one_response_per_result() -> None:
    original = body()
    before = copy.deepcopy(original)
    said = answer("Let me look.", "recall", "recall", ids=[None, "fc-2"])
    found = calls(said)
    after = continued(original, said, [(found[1].id, "second"), (found[0].id, "first")])
    user, model, results = after["contents"]
    assert user is original["contents"][0] and original == before
    assert model == {"role": "model", "parts": said["candidates"][0]["content"]["parts"]}
    assert model["parts"][2]["thoughtSignature"] == signature_for("recall", {"query": "q0"})
    assert results == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "recall",
                    "response": {"result": "second"},
                    "id": "fc-2",
                }
            },
            {"functionResponse": {"name": "recall", "response": {"result": "first"}}},
        ],
    }
    assert after["tools"] is original["tools"]
    # the next request is one Gemini (thinking on, as Gemini 3 checks signatures) takes
    assert invalid_gemini_request(after) is None
    assert unanswered_calls(after) is None and missing_signature(after) is None
    with pytest.raises(ValueError, match="no function call"):
        continued(original, said, [("nope", "x")])


def test_recall_calls_are_taken_out_of_an_answer_with_the_agents_own() -> None:
    said = answer("Both.", "run_shell_command", "recall", "run_shell_command")
    before = copy.deepcopy(said)
    shown = without(said, "recall")
    assert [(c.name, c.arguments) for c in calls(shown)] == [
        ("run_shell_command", {"query": "q0"}),
        ("run_shell_command", {"query": "q2"}),
    ]
    parts = shown["candidates"][0]["content"]["parts"]
    assert parts[:2] == [{"text": THOUGHT, "thought": True}, {"text": "Both."}]
    assert parts[2] == said["candidates"][0]["content"]["parts"][2]  # keeps its signature
    assert shown["candidates"][0]["finishReason"] == "STOP"
    assert shown["usageMetadata"] == said["usageMetadata"]
    assert said == before
    plain = answer("Just text.")
    assert without(plain, "recall") == plain


def test_an_agents_call_left_first_gets_googles_stand_in_for_the_signature_taken_out() -> None:
    said = answer(None, "recall", "run_shell_command", "run_shell_command")
    shown = without(said, "recall")
    parts = shown["candidates"][0]["content"]["parts"]
    assert parts[1]["thoughtSignature"] == SKIP_SIGNATURE
    assert "thoughtSignature" not in parts[2]
    assert "thoughtSignature" not in said["candidates"][0]["content"]["parts"][2]
    # the client's next request, with the agent's results, is one Gemini 3 takes
    history = {**body(), "contents": [*body()["contents"], shown["candidates"][0]["content"]]}
    result = {"functionResponse": {"name": "run_shell_command", "response": {"output": "ok"}}}
    history["contents"].append({"role": "user", "parts": [result, result]})
    assert missing_signature(history) is None and unanswered_calls(history) is None
    bare = without(answer(None, "recall"), "recall")
    assert bare["candidates"][0]["content"]["parts"] == [{"text": THOUGHT, "thought": True}]
    assert bare["candidates"][0]["finishReason"] == "STOP"


# --- spliced ---------------------------------------------------------------------------------


def held_turn(*names: str) -> tuple[dict[str, Any], Held, dict[str, Any]]:
    """A Gemini 3 answer (every call with its id) calling recall beside the agent's tool, what
    the loop holds of it, and the client's next request (its turn as the client got it)."""
    names = names or ("recall", "run_shell_command")
    ids: list[str | None] = ["fc-r" if name == "recall" else "fc-s" for name in names]
    said = answer("Two things.", *names, ids=ids)
    others = tuple(call.id for call in calls(said) if call.name != "recall")
    held = Held(others, said, (("fc-r", "recalled text"),))
    shown = without(said, "recall")["candidates"][0]["content"]
    result = {"functionResponse": {"id": "fc-s", "name": "run_shell_command", "response": {}}}
    client = body()
    client["contents"] += [shown, {"role": "user", "parts": [result]}]
    client["contents"] += [{"role": "model", "parts": [{"text": "Done."}]}]
    return said, held, client


def test_a_held_exchange_is_put_back_where_the_client_has_its_turn() -> None:
    said, held, client = held_turn()
    before = copy.deepcopy(client)
    asked: list[tuple[str, ...]] = []

    def find(key: tuple[str, ...]) -> Held | None:
        asked.append(key)
        return held if key == held.key else None

    out = spliced(client, find)
    assert out is not None and client == before
    assert asked == [("fc-s",)]  # the plain model content has no call to look up
    question, model, results, done = out["contents"]
    assert question is client["contents"][0] and done is client["contents"][3]
    original = said["candidates"][0]["content"]["parts"]
    shown = client["contents"][1]["parts"]
    # the recall call with the signature it came with; the agent's call is the client's own
    assert model["parts"] == [*original[:3], shown[2]]
    assert model["parts"][3] is shown[2] and shown[2]["thoughtSignature"] == SKIP_SIGNATURE
    assert results["parts"] == [
        {
            "functionResponse": {
                "name": "recall",
                "response": {"result": "recalled text"},
                "id": "fc-r",
            }
        },
        client["contents"][2]["parts"][0],
    ]
    assert unanswered_calls(out) is None and missing_signature(out) is None
    assert spliced(out, lambda key: held) is None  # put back once


def test_nothing_is_put_back_without_a_held_turn_or_with_calls_that_have_no_ids() -> None:
    _, held, client = held_turn()
    assert spliced(client, lambda key: None) is None
    assert spliced({"contents": "x"}, lambda key: held) is None
    idless = answer("Two things.", "recall", "run_shell_command")
    shown = without(idless, "recall")["candidates"][0]["content"]
    looked: list[tuple[str, ...]] = []

    def find(key: tuple[str, ...]) -> Held:
        looked.append(key)
        return held

    assert spliced({"contents": [shown]}, find) is None
    assert looked == []  # name#position changes once recall is out: never looked up


def test_responses_without_ids_are_found_by_name_and_a_missing_answer_gets_its_own() -> None:
    _, held, client = held_turn("run_shell_command", "recall")
    del client["contents"][2]["parts"][0]["functionResponse"]["id"]
    text = {"text": "And also look at this."}
    client["contents"][2]["parts"].append(text)
    out = spliced(client, lambda key: held)
    assert out is not None
    parts = out["contents"][2]["parts"]
    assert [p.get("functionResponse", {}).get("name") for p in parts] == [
        "run_shell_command",
        "recall",
        None,
    ]  # in the order of the calls
    assert parts[0] is client["contents"][2]["parts"][0] and parts[2] is text
    unanswered = {**client, "contents": client["contents"][:2]}
    out = spliced(unanswered, lambda key: held)
    assert out is not None
    assert out["contents"][2] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "recall",
                    "response": {"result": "recalled text"},
                    "id": "fc-r",
                }
            }
        ],
    }
    assert GEMINI.spliced(client, lambda key: held) == spliced(client, lambda key: held)


# --- the stream -----------------------------------------------------------------------------


def feed_all(stream: Any, round_events: list[bytes]) -> list[bytes]:
    return [out for event in round_events for out in stream.feed(event)]


def test_text_is_relayed_live_and_the_round_held_from_the_first_call() -> None:
    round_events = events("Let me look that up for you now.", "recall")
    assert len(round_events) > 4
    stream = GEMINI.stream(None)
    relayed = []
    for event in round_events[:-1]:
        out = stream.feed(event)
        assert out == [event] and out[0] is event  # the same bytes, as they come
        relayed.extend(out)
    assert stream.feed(round_events[-1]) == []  # the calls' chunk
    assert stream.release(None) == [round_events[-1]]
    assert relayed == round_events[:-1]


def test_the_answer_of_a_stream_is_the_answer_of_the_same_reply_unstreamed() -> None:
    for text, names in (("Let me look that up for you now.", ("recall", "recall")), (None, ())):
        stream = GEMINI.stream(None)
        feed_all(stream, events(text, *names, ids=["fc-1"]))
        assert stream.answer() == answer(text, *names, ids=["fc-1"])
    empty = GEMINI.stream(None).answer()
    assert empty["candidates"][0]["content"] == {"role": "model", "parts": []}


def test_a_chunk_with_text_and_a_call_is_held_whole_and_released_without_the_call() -> None:
    first = response_body("r", MODEL, [{"text": "Checking"}], None, {"promptTokenCount": 9})
    mixed_parts = [{"text": " the notes."}, *reply_parts(None, "recall", "run_shell_command")[1:]]
    mixed = response_body("r", MODEL, mixed_parts, "STOP", USAGE)
    stream = GEMINI.stream(None)
    assert stream.feed(sse(first)) == [sse(first)]
    assert stream.feed(sse(mixed)) == []
    released = stream.release("recall")
    (event,) = released
    assert event.startswith(b"data: {") and event.endswith(b"\n\n")
    assert parts_of(event) == [
        {"text": " the notes."},
        {
            "functionCall": {"name": "run_shell_command", "args": {"query": "q1"}},
            "thoughtSignature": SKIP_SIGNATURE,
        },
    ]
    assert chunk_of(event)["candidates"][0]["finishReason"] == "STOP"
    assert chunk_of(event)["usageMetadata"] == USAGE
    assert stream.answer()["candidates"][0]["content"]["parts"] == [
        {"text": "Checking the notes."},
        *mixed_parts[1:],
    ]


def test_release_takes_recall_out_keeps_other_events_as_they_are_and_drops_empty_chunks() -> None:
    parts = reply_parts(None, "recall", "run_shell_command")[1:]
    recall_only = response_body("r", MODEL, parts[:1], None, {"promptTokenCount": 9})
    del recall_only["usageMetadata"]  # a chunk that says nothing once recall is out
    agents = response_body("r", MODEL, parts[1:], None, {"promptTokenCount": 9})
    late = {"functionCall": {"name": "recall", "args": {}}, "thoughtSignature": "c2ln"}
    last = response_body("r", MODEL, [late], "STOP", USAGE)
    not_a_chunk = b"data: [DONE]\n\n"  # not Gemini's, but whatever is not a chunk stays as is
    round_events = [sse(recall_only), sse(agents), not_a_chunk, sse(last)]
    stream = GEMINI.stream(None)
    assert feed_all(stream, round_events) == []
    assert stream.release(None) == round_events
    released = stream.release("recall")
    assert len(released) == 3
    # the agent's call, first now, gets the stand-in for the signature taken out
    assert parts_of(released[0]) == [{**parts[1], "thoughtSignature": SKIP_SIGNATURE}]
    assert released[1] is not_a_chunk
    # the last chunk had only a recall call but ends the stream: kept, with no parts
    assert parts_of(released[2]) == []
    assert chunk_of(released[2])["candidates"][0]["finishReason"] == "STOP"
    assert stream.release("run_shell_command")[0] == sse(recall_only)


def test_a_round_without_calls_is_relayed_entirely_as_it_comes() -> None:
    round_events = events("Nothing to recall here, the key is under the mat.")
    stream = GEMINI.stream(None)
    assert feed_all(stream, round_events) == round_events
    assert stream.release(None) == [] and stream.release("recall") == []
    unix = [event.replace(b"\r\n\r\n", b"\n\n") for event in round_events]
    plain = GEMINI.stream(None)
    assert feed_all(plain, unix) == unix
    assert plain.answer() == stream.answer()


def test_a_continuing_round_is_relayed_unchanged_from_its_first_chunk() -> None:
    first = GEMINI.stream(None)
    feed_all(first, events("Let me look.", "recall"))
    second_events = [
        sse({**chunk_of(event), "responseId": "resp-2"}) for event in events("It is under the mat.")
    ]
    second = GEMINI.stream(first)
    assert isinstance(second, GeminiStream) and second is not first
    out = feed_all(second, second_events)
    assert out == second_events and all(a is b for a, b in zip(out, second_events, strict=True))
    said = second.answer()
    assert said["candidates"][0]["content"]["parts"] == [
        {"text": THOUGHT, "thought": True},
        {"text": "It is under the mat."},
    ]
    assert said["responseId"] == "resp-2"


# --- against the test upstream's server -----------------------------------------------------


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream() as server:
        yield server


def streamed(upstream: TestUpstream, request: Mapping[str, Any]) -> list[bytes]:
    url = f"{upstream.root_url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    splitter = EventSplitter()
    found: list[bytes] = []
    with httpx2.stream("POST", url, json=request, timeout=30) as response:
        assert response.status_code == 200
        for data in response.iter_bytes():
            found.extend(splitter.feed(data))
    assert splitter.rest() == b""
    return found


def test_a_recall_round_over_http_continues_into_a_request_gemini_takes(
    upstream: TestUpstream,
) -> None:
    recall = ToolCallSpec(name="recall", arguments={"query": "key"})
    upstream.enqueue(Reply(content="Let me check my notes first.", tool_calls=[recall]))
    upstream.enqueue("It is under the mat.")
    request = offered(body(), tool())
    first = GEMINI.stream(None)
    first_events = streamed(upstream, request)
    relayed = feed_all(first, first_events)
    assert relayed == first_events[:-1] and len(relayed) > 2
    (call,) = GEMINI.calls(first.answer())
    assert (call.name, call.arguments) == ("recall", {"query": "key"})
    assert call.id == "recall#2"  # after the thought and the text

    again = GEMINI.continued(request, first.answer(), [(call.id, "key: under the mat")])
    second = GEMINI.stream(first)
    second_events = streamed(upstream, again)  # the server refuses a request Gemini would
    assert feed_all(second, second_events) == second_events
    said = second.answer()["candidates"][0]["content"]["parts"]
    assert said == [{"text": THOUGHT, "thought": True}, {"text": "It is under the mat."}]
    sent = upstream.requests[-1].body
    assert sent["contents"][-1]["parts"][0]["functionResponse"]["name"] == "recall"
