"""The recall tool loop through the proxy on Gemini's ``generateContent``, with the real
``google-genai`` SDK against the test upstream's Gemini API (Google's validation, each turn's
calls answered one for one, thought signatures checked as Gemini 3 does): offered only once the
conversation has a compaction, recall calls answered and the model asked again (streamed or
not), recall beside the agent's call held for the next request and put back into it, another
tenant never given it, and the rounds bounded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types

from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import Reply, ScriptedToolAgent, TestUpstream, ToolCallSpec

from .conftest import ProxyFactory
from .gemini_support import KEY, NO_AUTO, gemini_client, gemini_requests, merged

MODEL = "gemini-3-pro-preview"
OTHER_KEY = "gemini-test-key-bravo-0123456789"
SHELL = "run_shell_command"
TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name=SHELL,
                description="Run a shell command.",
                parameters_json_schema={
                    "type": "object",
                    "properties": {"cmd": {"type": "string"}},
                },
            )
        ]
    )
]
NEEDLE = "src/billing/module_2.py raised ValueError: bad total 2"


@pytest.fixture
def agent() -> ScriptedToolAgent:
    return ScriptedToolAgent([])


@pytest.fixture
def upstream(agent: ScriptedToolAgent) -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=agent) as server:
        yield server


def start(start_proxy: ProxyFactory, upstream: TestUpstream) -> ProxyServer:
    """A proxy whose upstream is the test upstream's Gemini API."""
    return start_proxy(upstream=f"{upstream.root_url}/v1beta")


def config(*, thinking: bool) -> types.GenerateContentConfig:
    """The agent's tool, calls left to the caller, thoughts asked for when ``thinking``."""
    return types.GenerateContentConfig(
        tools=TOOLS,  # type: ignore[arg-type]
        automatic_function_calling=NO_AUTO,
        thinking_config=types.ThinkingConfig(include_thoughts=True) if thinking else None,
    )


def text(value: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=value)])


def history(turns: int = 12, size: int = 900) -> list[types.Content]:
    """A tool-using conversation of about ``turns * 2 * size`` tokens (calls without ids, as
    an older model gave them), ending on a question."""
    contents = [text("Fix the failing invoice test.")]
    for turn in range(turns):
        call = types.FunctionCall(name=SHELL, args={"cmd": f"t {turn}"})
        contents.append(types.Content(role="model", parts=[types.Part(function_call=call)]))
        body = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        body += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        result = types.FunctionResponse(name=SHELL, response={"output": body})
        contents.append(types.Content(role="user", parts=[types.Part(function_response=result)]))
    contents.append(text("Go on."))
    return contents


def agent_bodies(upstream: TestUpstream) -> list[dict[str, Any]]:
    """The bodies of the agent's generate requests the upstream answered, in order."""
    return [r.body for r in gemini_requests(upstream)]


def declared(body: dict[str, Any]) -> list[str]:
    return [d["name"] for tool in body.get("tools") or () for d in tool["functionDeclarations"]]


def recall(query: str, call_id: str | None = None) -> ToolCallSpec:
    return ToolCallSpec(name="recall", arguments={"query": query}, id=call_id)


def shell(call_id: str = "fc-shell-9") -> ToolCallSpec:
    return ToolCallSpec(name=SHELL, arguments={"cmd": "pytest"}, id=call_id)


def ask(
    client: genai.Client, contents: list[types.Content], *, stream: bool, thinking: bool = True
) -> tuple[types.Content, dict[str, str]]:
    """The model content the client reads (a stream's parts merged) and the proxy's headers
    (of a stream: none, as the SDK gives them only for a whole answer)."""
    asked = config(thinking=thinking)
    if stream:
        chunks = list(
            client.models.generate_content_stream(model=MODEL, contents=contents, config=asked)
        )
        parts = [
            part
            for chunk in chunks
            if chunk.candidates and chunk.candidates[0].content
            for part in chunk.candidates[0].content.parts or ()
        ]
        return types.Content(role="model", parts=merged(parts)), {}
    answer = client.models.generate_content(model=MODEL, contents=contents, config=asked)
    assert answer.candidates and answer.candidates[0].content is not None
    assert answer.candidates[0].finish_reason == types.FinishReason.STOP
    headers = answer.sdk_http_response.headers if answer.sdk_http_response else None
    return answer.candidates[0].content, dict(headers or {})


def said_text(content: types.Content) -> str:
    return "".join(p.text or "" for p in content.parts or () if not p.thought)


def function_names(part: dict[str, Any]) -> list[str]:
    """The names of a wire part's function call or response."""
    return [part[key]["name"] for key in ("functionCall", "functionResponse") if key in part]


def call_names(content: types.Content) -> list[str]:
    return [p.function_call.name or "" for p in content.parts or () if p.function_call]


def test_no_tool_before_a_compaction(start_proxy: ProxyFactory, upstream: TestUpstream) -> None:
    proxy = start(start_proxy, upstream)
    said, headers = ask(gemini_client(proxy), history(turns=2), stream=False)
    assert said_text(said) == "done" and headers["x-summarizer-compacted"] == "false"
    (sent,) = agent_bodies(upstream)
    assert declared(sent) == [SHELL]
    assert "recall" not in json.dumps(sent)


@pytest.mark.parametrize("stream", [False, True])
def test_recall_alone_is_answered_and_the_model_asked_again(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(content="Let me check.", tool_calls=[recall("module_2.py")])]
    agent.final = "The error was bad total 2."
    proxy = start(start_proxy, upstream)
    said, headers = ask(gemini_client(proxy), history(), stream=stream)
    assert not call_names(said)
    assert said_text(said).endswith("The error was bad total 2.")
    if stream:  # the first round's text was relayed as it came, before its call was held
        assert said_text(said) == "Let me check.The error was bad total 2."
    else:
        assert headers["x-summarizer-compacted"] == "true"
        assert headers["x-summarizer-recall-rounds"] == "1"
        assert headers["x-summarizer-recall-calls"] == "1"
    first, second = agent_bodies(upstream)[-2:]
    assert declared(first) == [SHELL, "recall"]
    assert declared(second) == declared(first)
    summaries = [c for c in first["contents"] if "span-" in json.dumps(c)]
    assert len(summaries) == 1 and "`recall` tool" in json.dumps(summaries[0])
    assert second["contents"][: len(first["contents"])] == first["contents"]
    model, answered = second["contents"][len(first["contents"]) :]
    assert model["role"] == "model"
    (call,) = [p["functionCall"] for p in model["parts"] if "functionCall" in p]
    assert call == {"name": "recall", "args": {"query": "module_2.py"}}  # no id: none given
    (response,) = answered["parts"]
    assert answered["role"] == "user" and set(response["functionResponse"]) == {
        "name",
        "response",
    }
    assert response["functionResponse"]["name"] == "recall"
    assert NEEDLE in response["functionResponse"]["response"]["result"]


@pytest.mark.parametrize("stream", [False, True])
def test_recall_beside_the_agents_call_waits_for_the_next_request(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(tool_calls=[recall("module_2.py", "fc-recall-1"), shell()])]
    agent.final = "Fixed."
    proxy = start(start_proxy, upstream)
    client = gemini_client(proxy)
    contents = history()
    said, _ = ask(client, contents, stream=stream)
    assert call_names(said) == [SHELL]
    (part,) = [p for p in said.parts or () if p.function_call]
    assert part.function_call and part.function_call.id == "fc-shell-9"
    assert len(agent_bodies(upstream)) == 1  # not asked again: the client runs its call first

    output = types.FunctionResponse(id="fc-shell-9", name=SHELL, response={"output": "1 failed"})
    follow = [
        *contents,
        said,
        types.Content(role="user", parts=[types.Part(function_response=output)]),
    ]
    answer, _ = ask(client, follow, stream=False)
    assert said_text(answer) == "Fixed."
    sent = agent_bodies(upstream)[-1]["contents"]
    at = next(
        i
        for i, c in enumerate(sent)
        if c["role"] == "model" and sum("functionCall" in p for p in c["parts"]) == 2
    )
    calls = [p for p in sent[at]["parts"] if "functionCall" in p]
    assert [p["functionCall"]["id"] for p in calls] == ["fc-recall-1", "fc-shell-9"]
    assert "thoughtSignature" in calls[0]  # the recall call's own, as the model signed it
    recalled, theirs = sent[at + 1]["parts"]
    assert recalled["functionResponse"]["id"] == "fc-recall-1"
    assert NEEDLE in recalled["functionResponse"]["response"]["result"]
    assert theirs["functionResponse"] == {
        "id": "fc-shell-9",
        "name": SHELL,
        "response": {"output": "1 failed"},
    }
    assert sent[at + 2 :] == []  # the client's turn is the last

    # Another tenant sending the same turn does not get the held result.
    ask(gemini_client(proxy, OTHER_KEY), follow, stream=False)
    assert upstream.requests[-1].headers["x-goog-api-key"] == OTHER_KEY
    other = agent_bodies(upstream)[-1]["contents"]
    assert "fc-recall-1" not in json.dumps(other)
    assert {name for c in other for p in c["parts"] for name in function_names(p)} == {SHELL}
    assert upstream.requests[0].headers["x-goog-api-key"] == KEY


@pytest.mark.parametrize("stream", [False, True])
def test_rounds_are_bounded_and_the_last_answer_is_one_gemini_takes_back(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(tool_calls=[recall(f"module_{i}.py", f"fc-r{i}")]) for i in range(5)]
    agent.final = "Fixed."
    proxy = start(start_proxy, upstream)
    client = gemini_client(proxy)
    contents = history()
    said, headers = ask(client, contents, stream=stream)
    if not stream:
        assert headers["x-summarizer-recall-rounds"] == "4"
    bodies = agent_bodies(upstream)
    assert len(bodies) == 5
    last = bodies[-1]["contents"][-1]["parts"][-1]["functionResponse"]
    assert "last recall this turn allows" in last["response"]["result"]
    assert not call_names(said)
    # The fifth round's recall call taken out leaves its thought: the content is not empty.
    assert said.parts and all(p.thought for p in said.parts)

    # The client carries the answer in its history: the next request is one Gemini takes.
    answer, _ = ask(client, [*contents, said, text("Go on.")], stream=False)
    assert said_text(answer) == "Fixed."
    assert upstream.requests[-1].status == 200


@pytest.mark.parametrize("stream", [False, True])
def test_rounds_are_bounded_and_an_answer_without_thoughts_keeps_a_part(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(tool_calls=[recall(f"module_{i}.py", f"fc-r{i}")]) for i in range(5)]
    agent.final = "Fixed."
    proxy = start(start_proxy, upstream)
    client = gemini_client(proxy)
    contents = history()
    said, _ = ask(client, contents, stream=stream, thinking=False)
    assert len(agent_bodies(upstream)) == 5 and not call_names(said)
    assert said.parts  # today: [], all the fifth round said was its recall call
    answer, _ = ask(client, [*contents, said, text("Go on.")], stream=False, thinking=False)
    assert said_text(answer) == "Fixed."
