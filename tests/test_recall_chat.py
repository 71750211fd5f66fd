"""The recall tool on chat completions (``core.recall_chat``): offered, found, continued and
taken out of an answer the agent also called its own tools in."""

from __future__ import annotations

import copy
import json
from typing import Any

from context_summarizer.core.recall_chat import (
    ToolCall,
    calls,
    continued,
    may_offer,
    offered,
    without,
)
from context_summarizer.core.recall_tool import recall_tool
from context_summarizer.loaders.prompts import load_prompt_set

AGENT_TOOL = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}},
}


def body() -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "go"}],
        "tools": [AGENT_TOOL],
    }


def completion(*names: str) -> dict[str, Any]:
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"query": f"q{i}"})},
        }
        for i, name in enumerate(names)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if names else "stop",
            }
        ],
    }


def tool() -> Any:
    made = recall_tool(load_prompt_set(), ["bash"])
    assert made is not None
    return made


def test_the_tool_goes_after_the_agents_own_which_stay_the_same_objects() -> None:
    original = body()
    sent = offered(original, tool())
    assert sent["tools"][0] is original["tools"][0]
    assert sent["tools"][1]["function"]["name"] == "recall"
    assert sent["tools"][1]["function"]["parameters"]["properties"]["span"]["type"] == "string"
    assert original["tools"] == [AGENT_TOOL]  # the client's body is not touched
    assert offered({"model": "m", "messages": []}, tool())["tools"][0]["type"] == "function"


def test_the_tool_is_not_offered_where_the_agent_chose_otherwise() -> None:
    assert may_offer(body()) and may_offer({**body(), "tool_choice": "auto", "n": 1})
    assert not may_offer({**body(), "n": 2})
    assert not may_offer({**body(), "tool_choice": "none"})
    assert not may_offer({**body(), "tool_choice": "required"})
    forced = {"type": "function", "function": {"name": "bash"}}
    assert not may_offer({**body(), "tool_choice": forced})


def test_calls_are_read_in_order_and_malformed_ones_skipped() -> None:
    answer = completion("recall", "bash")
    answer["choices"][0]["message"]["tool_calls"].append({"type": "function"})  # no id
    assert calls(answer) == [
        ToolCall("call_0", "recall", '{"query": "q0"}'),
        ToolCall("call_1", "bash", '{"query": "q1"}'),
    ]
    assert calls(completion()) == [] and calls({"choices": []}) == [] and calls({}) == []


def test_the_request_continues_with_the_answer_and_one_result_per_call() -> None:
    original = body()
    answer = completion("recall", "recall")
    after = continued(original, answer, [("call_0", "first"), ("call_1", "second")])
    assistant, *results = after["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": "",  # not null: some servers (llama-cpp-python's) take only a string
        "tool_calls": answer["choices"][0]["message"]["tool_calls"],
    }  # no refusal: null, which a request does not take
    assert results == [
        {"role": "tool", "tool_call_id": "call_0", "content": "first"},
        {"role": "tool", "tool_call_id": "call_1", "content": "second"},
    ]
    assert after["messages"][0] is original["messages"][0]
    assert original["messages"] == [{"role": "user", "content": "go"}]


def test_recall_calls_are_taken_out_of_an_answer_with_the_agents_own() -> None:
    answer = completion("bash", "recall", "bash")
    before = copy.deepcopy(answer)
    shown = without(answer, "recall")
    assert [call.name for call in calls(shown)] == ["bash", "bash"]
    assert [call.id for call in calls(shown)] == ["call_0", "call_2"]
    assert shown["choices"][0]["finish_reason"] == "tool_calls"
    assert answer == before


def test_an_answer_left_with_no_call_ends_as_stop() -> None:
    shown = without(completion("recall"), "recall")
    assert "tool_calls" not in shown["choices"][0]["message"]
    assert shown["choices"][0]["finish_reason"] == "stop"
    plain = completion()
    assert without(plain, "recall") == plain
