"""The recall tool on the Responses API (``core.recall_responses``): offered, found, continued,
taken out of a response and put back into a later request (``spliced``); and its streamed
rounds (``core.recall_responses_stream``) read from the test upstream's own event streams and
checked by the openai SDK's stream reader."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from openai import omit
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from context_summarizer.core.recall_codec import Held, RecallStream, ToolCall
from context_summarizer.core.recall_responses import (
    RESPONSES,
    calls,
    continued,
    may_offer,
    offered,
    spliced,
    without,
)
from context_summarizer.core.recall_responses_stream import ResponsesStream
from context_summarizer.core.recall_tool import RecallTool, recall_tool
from context_summarizer.core.sse_events import event_json, event_name
from context_summarizer.loaders.prompts import load_prompt_set
from context_summarizer.testing.answers import Answer
from context_summarizer.testing.responses_answers import output_items, response_body, usage_for
from context_summarizer.testing.responses_input import (
    input_items,
    invalid_conversation,
    invalid_request,
)
from context_summarizer.testing.responses_stream import stream_events
from context_summarizer.testing.state import UpstreamState

AGENT_TOOL = {
    "type": "function",
    "name": "bash",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}
REASONING = ["reasoning.encrypted_content"]


def body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "gpt-5-mini",
        "input": [{"role": "user", "content": "go"}],
        "tools": [AGENT_TOOL],
        "stream": True,
        "store": False,
        **fields,
    }


def tool() -> RecallTool:
    made = recall_tool(load_prompt_set(), ["bash"])
    assert made is not None
    return made


def reply(
    upstream: UpstreamState,
    text: str | None,
    *names: str,
    finish: str | None = None,
    request: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The test upstream's response to ``request``: ``text``, then a call of each of ``names``."""
    tool_calls = [
        {
            "id": upstream._next_call_id(),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"query": f"q{i}"})},
        }
        for i, name in enumerate(names)
    ]
    finish = finish or ("tool_calls" if names else "stop")
    answer = Answer(text, tool_calls, finish, 12)
    request = offered(request or body(), tool())
    output = output_items(upstream, request, answer)
    usage = usage_for(40, 0, 12)
    return response_body(upstream._next_id("resp_"), request, output, usage, finish)


def wire(response: dict[str, Any]) -> list[bytes]:
    """The response's stream as OpenAI (and the test upstream) writes it."""
    return [
        f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
        for event in stream_events(response)
    ]


def fed(stream: RecallStream, events: list[bytes]) -> list[list[bytes]]:
    return [stream.feed(event) for event in events]


def payloads(events: list[bytes]) -> list[dict[str, Any]]:
    found = []
    for event in events:
        payload = event_json(event)
        assert payload is not None and event_name(event) == payload["type"]
        found.append(payload)
    return found


def sdk_final(events: list[bytes]) -> Response:
    """The final response the openai SDK's stream reader makes of what the client got (it
    refuses a changed response id, a repeated output index, an unfinished item)."""
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for payload in payloads(events):
        event: Any = construct_type(type_=ResponseStreamEvent, value=payload)
        state.handle_event(event)
    final = state._completed_response
    assert final is not None
    return final


def numbers(events: list[bytes]) -> list[int]:
    return [payload["sequence_number"] for payload in payloads(events)]


# --- the request and the answer -----------------------------------------------------------------


def test_the_tool_goes_after_the_agents_own_which_stay_the_same_objects() -> None:
    original = body()
    sent = offered(original, tool())
    assert sent["tools"][0] is original["tools"][0]
    added = sent["tools"][1]
    assert added == {
        "type": "function",
        "name": "recall",
        "description": tool().description,
        "parameters": dict(tool().parameters),
        "strict": False,
    }
    assert added["parameters"] is not tool().parameters
    assert original["tools"] == [AGENT_TOOL]  # the client's body is not touched
    assert offered({"model": "m", "input": "hi"}, tool())["tools"][0]["name"] == "recall"
    assert invalid_request(sent) is None


def test_the_tool_is_not_offered_where_the_agent_chose_otherwise() -> None:
    assert may_offer(body()) and may_offer({**body(), "tool_choice": "auto"})
    assert not may_offer({**body(), "tool_choice": "none"})
    assert not may_offer({**body(), "tool_choice": "required"})
    assert not may_offer({**body(), "tool_choice": {"type": "function", "name": "bash"}})
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function"}]}
    assert not may_offer({**body(), "tool_choice": allowed})


def test_a_stream_the_upstream_stores_is_not_offered_the_tool() -> None:
    # A streamed loop hands the client the first round's id, stored ending in a recall call.
    assert not may_offer(body(store=True))
    stored = body()
    del stored["store"]  # stored by default
    assert not may_offer(stored) and not RESPONSES.may_offer(stored)
    assert may_offer(body(store=False))
    # not streamed, the client gets the last round's id, whose stored history is whole
    assert may_offer(body(stream=False, store=True)) and may_offer(body(stream=False))


def test_a_request_asking_for_compaction_items_is_not_offered_the_tool() -> None:
    # Its client keeps only the item: no later request holds the turns recall would read.
    compaction = [{"type": "compaction", "compact_threshold": 12_000}]
    assert not may_offer(body(context_management=compaction))
    assert not may_offer(body(stream=False, context_management=[{"type": "compaction"}]))
    assert may_offer(body(context_management=[{"type": "other"}]))
    assert may_offer(body(context_management=None))


def test_calls_are_read_in_order_by_call_id_and_malformed_ones_skipped() -> None:
    response = reply(UpstreamState(), "Looking.", "recall", "bash")
    _, first, second = response["output"]
    response["output"].insert(1, {"type": "function_call", "id": "fc_x", "name": "bash"})
    assert first["call_id"] != first["id"]
    assert calls(response) == [
        ToolCall(first["call_id"], "recall", '{"query": "q0"}'),
        ToolCall(second["call_id"], "bash", '{"query": "q1"}'),
    ]
    assert RESPONSES.calls(response) == calls(response)
    assert calls(reply(UpstreamState(), "Done.")) == [] and calls({}) == []


def test_the_calls_the_client_answers_are_all_read() -> None:
    custom = {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*"}
    shell = {"type": "local_shell_call", "call_id": "c2", "action": {"type": "exec"}}
    spaced = {"type": "function_call", "call_id": "c3", "name": "recall", "namespace": "crm"}
    searched = {"type": "web_search_call", "id": "ws_1", "status": "completed"}
    found = calls({"output": [custom, searched, shell, spaced]})
    assert found == [
        ToolCall("c1", "apply_patch", "*"),
        ToolCall("c2", "local_shell_call", {"type": "exec"}),
        ToolCall("c3", "crm.recall", ""),
    ]
    assert without({"output": [spaced]}, "recall") == {"output": [spaced]}


def test_the_request_continues_with_the_output_and_one_result_per_call() -> None:
    upstream = UpstreamState()
    original = offered(
        body(include=REASONING, store=False, previous_response_id="resp_0", instructions="Be."),
        tool(),
    )
    before = copy.deepcopy(original)
    response = reply(upstream, "Let me look.", "recall", "recall", request=original)
    reasoning, message, first, second = response["output"]
    assert reasoning["type"] == "reasoning"
    results = [(first["call_id"], "found one"), (second["call_id"], "found two")]
    after = continued(original, response, results)
    assert after["input"][0] is original["input"][0]
    assert after["input"][1:5] == [reasoning, message, first, second]
    assert after["input"][5:] == [
        {"type": "function_call_output", "call_id": first["call_id"], "output": "found one"},
        {"type": "function_call_output", "call_id": second["call_id"], "output": "found two"},
    ]
    assert {key: value for key, value in after.items() if key != "input"} == {
        key: value for key, value in original.items() if key != "input"
    }
    assert original == before
    assert invalid_request(after) is None
    assert invalid_conversation(input_items(after)) is None
    # without every result the test upstream refuses it, as OpenAI does
    assert invalid_conversation(input_items(continued(original, response, results[:1])))


def test_a_string_input_becomes_the_users_message() -> None:
    response = reply(UpstreamState(), None, "recall")
    after = continued(body(input="go"), response, [(response["output"][0]["call_id"], "x")])
    assert after["input"][0] == {"role": "user", "content": "go"}
    assert [item["type"] for item in after["input"][1:]] == [
        "function_call",
        "function_call_output",
    ]
    assert invalid_conversation(input_items(after)) is None


def test_recall_calls_are_taken_out_of_a_response_with_the_agents_own() -> None:
    response = reply(UpstreamState(), "Both.", "bash", "recall", "bash")
    before = copy.deepcopy(response)
    shown = without(response, "recall")
    assert [item["type"] for item in shown["output"]] == ["message"] + ["function_call"] * 2
    assert [call.name for call in calls(shown)] == ["bash", "bash"]
    assert shown["output"][1] is response["output"][1]
    assert shown["status"] == "completed" and shown["id"] == response["id"]
    assert response == before


def test_a_response_without_recall_calls_is_itself() -> None:
    response = reply(UpstreamState(), "Done.", "bash")
    assert without(response, "recall") == response
    assert without(response, "recall") is not response
    assert RESPONSES.without(response, "recall") == response


# --- the stream ---------------------------------------------------------------------------------


def test_a_round_without_calls_is_relayed_as_it_comes() -> None:
    response = reply(UpstreamState(), "All done here.")
    events = wire(response)
    stream = RESPONSES.stream(None)
    assert fed(stream, events) == [[event] for event in events]
    assert stream.release("recall") == []
    assert stream.answer() == response
    assert sdk_final(events).output_text == "All done here."


def test_events_are_held_from_the_first_function_call() -> None:
    response = reply(UpstreamState(), "Let me look.", "recall", "bash")
    events = wire(response)
    first_call = next(
        number
        for number, payload in enumerate(payloads(events))
        if payload["type"] == "response.output_item.added"
        and payload["item"]["type"] == "function_call"
    )
    stream = RESPONSES.stream(None)
    sent = fed(stream, events)
    assert sent[:first_call] == [[event] for event in events[:first_call]]
    assert sent[first_call:] == [[]] * (len(events) - first_call)
    assert stream.answer() == response
    assert [call.name for call in calls(stream.answer())] == ["recall", "bash"]


def test_release_of_none_gives_the_held_events_as_they_came() -> None:
    events = wire(reply(UpstreamState(), "Both.", "bash", "recall"))
    stream = RESPONSES.stream(None)
    relayed = [event for sent in fed(stream, events) for event in sent]
    assert relayed + stream.release(None) == events


def test_release_takes_the_recall_call_out_and_closes_the_indexes() -> None:
    response = reply(UpstreamState(), "Both.", "bash", "recall", "bash")
    recall = response["output"][2]
    stream = RESPONSES.stream(None)
    client = [event for sent in fed(stream, wire(response)) for event in sent]
    client += stream.release("recall")
    shown = payloads(client)
    gone = (recall["id"].encode(), f'"{recall["call_id"]}"'.encode())
    assert not any(mark in event for mark in gone for event in client)
    assert sorted({p["output_index"] for p in shown if "output_index" in p}) == [0, 1, 2]
    assert numbers(client) == list(range(len(client)))
    assert shown[-1]["response"] == without(response, "recall")
    assert shown[-1]["response"]["output"][2]["call_id"] == response["output"][3]["call_id"]
    final = sdk_final(client)
    assert [item.type for item in final.output] == ["message", "function_call", "function_call"]
    assert final.id == response["id"]


def test_release_when_only_recall_was_called_leaves_a_plain_answer() -> None:
    response = reply(UpstreamState(), "Checking.", "recall")
    stream = RESPONSES.stream(None)
    client = [event for sent in fed(stream, wire(response)) for event in sent]
    client += stream.release("recall")
    assert not any(b"function_call" in event for event in client)
    assert numbers(client) == list(range(len(client)))
    assert sdk_final(client).output_text == "Checking."


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_continuing_round_continues_the_clients_stream(finish: str) -> None:
    upstream = UpstreamState()
    first = reply(upstream, "Let me look.", "recall")
    second = reply(upstream, "Found it.", finish=finish)
    round_one = RESPONSES.stream(None)
    client = [event for sent in fed(round_one, wire(first)) for event in sent]
    assert [p["type"] for p in payloads(client)][:2] == ["response.created", "response.in_progress"]
    round_two = RESPONSES.stream(round_one)
    client += [event for sent in fed(round_two, wire(second)) for event in sent]
    shown = payloads(client)
    assert [p["type"] for p in shown].count("response.created") == 1
    assert numbers(client) == list(range(len(client)))
    added = [p["output_index"] for p in shown if p["type"] == "response.output_item.added"]
    assert added == [0, 1]
    end = shown[-1]
    assert end["type"] == ("response.completed" if finish == "stop" else "response.incomplete")
    assert end["response"]["id"] == first["id"] != second["id"]
    assert end["response"]["created_at"] == first["created_at"]
    assert end["response"]["output"] == [first["output"][0], second["output"][0]]
    assert end["response"]["usage"] == second["usage"]
    assert round_two.answer() == second  # the loop reads the round's own response
    if finish == "stop":
        final = sdk_final(client)
        assert final.id == first["id"] and final.output_text == "Let me look.Found it."


def test_later_rounds_and_a_release_continue_the_same_way() -> None:
    upstream = UpstreamState()
    rounds = [
        reply(upstream, None, "recall"),
        reply(upstream, "Now this.", "recall"),
        reply(upstream, "Running it.", "recall", "bash"),
    ]
    client: list[bytes] = []
    stream: RecallStream | None = None
    for response in rounds:
        stream = RESPONSES.stream(stream)
        client += [event for sent in fed(stream, wire(response)) for event in sent]
    assert stream is not None
    client += stream.release("recall")
    shown = payloads(client)
    assert numbers(client) == list(range(len(client)))
    end = shown[-1]["response"]
    assert end["id"] == rounds[0]["id"]
    assert [item["type"] for item in end["output"]] == ["message", "message", "function_call"]
    assert end["output"][2]["call_id"] == rounds[2]["output"][2]["call_id"]
    final = sdk_final(client)
    assert final.output_text == "Now this.Running it."
    assert [call.name for call in calls(end)] == ["bash"]


def test_a_stream_cut_short_is_answered_with_the_items_it_finished() -> None:
    response = reply(UpstreamState(), "Let me look.", "recall")
    events = wire(response)[:-1]  # no response.completed
    stream = RESPONSES.stream(None)
    fed(stream, events)
    answer = stream.answer()
    assert answer["id"] == response["id"] and answer["status"] == "in_progress"
    assert answer["output"] == response["output"]
    assert [call.name for call in calls(answer)] == ["recall"]


def test_the_stream_reader_is_the_codecs_own() -> None:
    assert isinstance(RESPONSES.stream(None), ResponsesStream)
    other: Any = object()
    fresh = RESPONSES.stream(other)  # another API's reader is not continued
    events = wire(reply(UpstreamState(), "Hi."))
    assert fed(fresh, events) == [[event] for event in events]
    assert RESPONSES.may_offer(body()) and RESPONSES.offered(body(), tool())["tools"][1]
    response = reply(UpstreamState(), None, "recall")
    assert RESPONSES.continued(body(), response, []) == continued(body(), response, [])


# --- spliced --------------------------------------------------------------------------------------


def held_turn(response: dict[str, Any], *texts: str) -> Held:
    """What the loop holds for ``response``: the agent's call ids, and each recall call's
    result (``texts`` in order)."""
    found = calls(response)
    recalls = [call.id for call in found if call.name == "recall"]
    key = tuple(call.id for call in found if call.name != "recall")
    return Held(key, response, tuple(zip(recalls, texts, strict=True)))


def sent_back(response: dict[str, Any], *outputs: str) -> list[dict[str, Any]]:
    """The client's next input after ``response``: the task, what it was shown (as the SDK
    dumps it), its call outputs, and a new message."""
    shown = copy.deepcopy(without(response, "recall")["output"])
    answered = [
        {"type": "function_call_output", "call_id": item["call_id"], "output": text}
        for item, text in zip(
            [item for item in shown if item["type"] == "function_call"], outputs, strict=True
        )
    ]
    return [{"role": "user", "content": "go"}, *shown, *answered, {"role": "user", "content": "on"}]


def test_a_held_turn_gets_its_recall_calls_back_and_their_outputs_after_them() -> None:
    request = body(include=REASONING)
    response = reply(UpstreamState(), "Both.", "bash", "recall", "bash", request=request)
    _, _, bash_1, recall, bash_2 = response["output"]
    held = held_turn(response, "recalled text")
    client = {**request, "input": sent_back(response, "ok 1", "ok 2")}
    before = copy.deepcopy(client)
    asked: list[tuple[str, ...]] = []

    def find(key: tuple[str, ...]) -> Held | None:
        asked.append(key)
        return held if key == held.key else None

    out = spliced(client, find)
    assert out is not None and client == before
    assert asked == [(bash_1["call_id"], bash_2["call_id"])]
    items = out["input"]
    assert [item.get("type") for item in items] == [
        None,
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "function_call_output",
        None,
    ]
    assert items[3] is client["input"][3] and items[5] is client["input"][4]  # the client's own
    assert items[4] == recall
    assert items[6] == {
        "type": "function_call_output",
        "call_id": recall["call_id"],
        "output": "recalled text",
    }
    assert items[7:] == client["input"][5:]
    assert {k: v for k, v in out.items() if k != "input"} == {
        k: v for k, v in client.items() if k != "input"
    }
    assert invalid_request(out) is None and invalid_conversation(input_items(out)) is None
    # as the loop would have continued it, had the agent's calls been answered there
    assert [i for i in items if i.get("type") == "function_call"] == [bash_1, recall, bash_2]


def test_several_recall_calls_come_back_in_the_answers_order() -> None:
    response = reply(UpstreamState(), None, "recall", "bash", "recall")
    first, bash_call, second = response["output"]
    held = held_turn(response, "one", "two")
    out = spliced({"input": sent_back(response, "ok")}, lambda key: held)
    assert out is not None
    items = out["input"]
    assert items[1:4] == [first, bash_call, second]
    assert [(i["call_id"], i["output"]) for i in items[4:6]] == [
        (first["call_id"], "one"),
        (second["call_id"], "two"),
    ]
    assert items[6]["call_id"] == bash_call["call_id"]
    assert invalid_conversation(input_items(out)) is None


def test_a_turn_is_put_back_once() -> None:
    response = reply(UpstreamState(), None, "recall", "bash")
    held = held_turn(response, "found")
    client = {"input": sent_back(response, "ok")}
    out = spliced(client, lambda key: held)
    assert out is not None
    assert spliced(out, lambda key: held) is None  # its recall calls are there already
    # the same turn sent twice over is put back at its first only (no call id twice)
    twice = {"input": [*client["input"], *client["input"][1:3]]}
    doubled = spliced(twice, lambda key: held)
    assert doubled is not None
    ids = [i["call_id"] for i in doubled["input"] if i.get("type") == "function_call"]
    assert ids.count(held.results[0][0]) == 1


def test_nothing_is_put_back_where_no_run_is_held() -> None:
    response = reply(UpstreamState(), None, "recall", "bash", "bash")
    held = held_turn(response, "found")
    client = {"input": sent_back(response, "ok", "ok")}

    def find(key: tuple[str, ...]) -> Held | None:
        return held if key == held.key else None

    assert spliced(client, lambda key: None) is None
    assert spliced({"input": "go"}, find) is None and spliced({}, find) is None
    swapped = copy.deepcopy(client)
    swapped["input"][1:3] = swapped["input"][2:0:-1]  # another order is another turn
    assert spliced(swapped, find) is None
    apart = copy.deepcopy(client)
    apart["input"].insert(2, apart["input"].pop(3))  # a call, its output, the next call
    assert spliced(apart, find) is None
    assert spliced(client, find) is not None


def test_the_key_counts_every_call_the_client_answers() -> None:
    custom = {"type": "custom_tool_call", "call_id": "c1", "name": "patch", "input": "*"}
    recall = {"type": "function_call", "call_id": "r1", "name": "recall", "arguments": "{}"}
    response = {"id": "resp_1", "output": [custom, recall]}
    held = held_turn(response, "found")
    assert held.key == ("c1",)
    mine = dict(custom)
    answer = {"type": "custom_tool_call_output", "call_id": "c1", "output": "patched"}
    out = RESPONSES.spliced({"input": [mine, answer]}, lambda key: held)
    assert out is not None
    assert out["input"] == [
        mine,
        recall,
        {"type": "function_call_output", "call_id": "r1", "output": "found"},
        answer,
    ]
    assert out["input"][0] is mine
    assert invalid_conversation(input_items(out)) is None
