"""``POST /v1/responses`` through the proxy, with the real ``openai`` SDK (and the OpenAI Agents
SDK's default model class) over real HTTP, against the test upstream's Responses route.

Stateless use (the whole ``input`` each turn) is managed like chat completions: compactions,
nothing refused, every request inside the window, append-only between compactions, summary
requests on the live input, planted facts kept, reasoning items carried byte for byte. A request
whose history the provider keeps (``previous_response_id``) passes through, never silently.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from openai.types.responses import Response

from context_summarizer.cli.demo_messages import texts
from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import RecordedRequest, ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory

MODEL = "gpt-4o-mini"
KEY = "sk-test-responses-0123456789abcdef"


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000) as server:
        yield server


def openai_client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)


def responses_tools(session: CodingSession) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": tool["function"]["name"],
            "description": tool["function"]["description"],
            "parameters": tool["function"]["parameters"],
        }
        for tool in session.tools
    ]


def responses_requests(upstream: TestUpstream, *, summary: bool = False) -> list[RecordedRequest]:
    return [
        r
        for r in upstream.requests
        if r.path.rstrip("/") == "/v1/responses" and r.is_summary == summary
    ]


def input_items(body: dict[str, Any]) -> list[Any]:
    given = body["input"]
    return (
        [{"type": "message", "role": "user", "content": given}] if isinstance(given, str) else given
    )


def run_session(
    proxy: ProxyServer,
    session: CodingSession,
    *,
    steps: int,
    stream: bool = False,
    include_reasoning: bool = False,
    untransformed: bool = False,
) -> list[Any]:
    """An agent loop on ``client.responses``: the whole input each turn (store off).

    ``untransformed``: send through the SDK's generic ``client.post`` (same HTTP stack, the
    answer parsed as the SDK's ``Response``), skipping ``responses.create``'s client-side
    walk of every input item, which grows with the square of a long session's length (about
    20 s over 120 turns here) and is not what the test measures."""
    client = openai_client(proxy)
    items: list[Any] = [{"role": "user", "content": session.task["content"]}]
    for turn in range(steps + 1):
        arguments: dict[str, Any] = {
            "model": MODEL,
            "instructions": session.system["content"],
            "tools": responses_tools(session),
            "input": items,
            "max_output_tokens": 500,
            "store": False,
        }
        if include_reasoning:
            arguments["include"] = ["reasoning.encrypted_content"]
        if stream:
            with client.responses.stream(**arguments) as events:
                response = events.get_final_response()
        elif untransformed:
            response = client.post("/responses", body=arguments, cast_to=Response)
        else:
            response = client.responses.create(**arguments)
        output = [item.model_dump(exclude_none=True) for item in response.output]
        items.extend(output)
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            break
        for call in calls:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": session.execute(turn, call["name"], call["arguments"]),
                }
            )
    return items


def test_a_long_stateless_session_is_compacted_and_never_refused(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=120, seed=13)
    agent = ScriptedToolAgent(session.steps)
    upstream.responder = agent
    proxy = start_proxy(context_window=16_000)
    run_session(proxy, session, steps=120, untransformed=True)
    assert agent.finished

    agents = responses_requests(upstream)
    summaries = responses_requests(upstream, summary=True)
    assert len(agents) == 121
    assert all(r.status == 200 for r in upstream.requests)
    assert len(summaries) >= 2
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= 16_000
    rewritten = 0
    recall_from = []
    for before, after in itertools.pairwise(agents):
        for field in ("instructions", "model", "store", "max_output_tokens"):
            assert after.body[field] == before.body[field]
        old, new = input_items(before.body), input_items(after.body)
        rewritten += new[: len(old)] != old
        if after.body["tools"] != before.body["tools"]:  # the recall tool, from a compaction on
            assert after.body["tools"][:-1] == before.body["tools"]
            assert after.body["tools"][-1]["name"] == "recall" and new[: len(old)] != old
            recall_from.append(after)
    assert rewritten == len(summaries)
    assert len(recall_from) == 1
    for summary in summaries:
        assert summary.body["tool_choice"] == "none" and summary.body["store"] is False
        earlier = [r for r in agents if r.time <= summary.time]
        assert summary.body["tools"] == earlier[-1].body["tools"]  # the cached prefix's
        seen = input_items(earlier[-1].body)
        *conversation, instruction = input_items(summary.body)
        shorter = min(len(seen), len(conversation))
        assert conversation[:shorter] == seen[:shorter]
        assert instruction["role"] == "user"
    final = "\n".join(texts(agents[-1].body["input"]))
    for fact in session.planted:
        assert fact.text in final, fact.text
    read = sum(r.cached_tokens or 0 for r in agents)
    assert read / sum(r.prompt_tokens or 0 for r in agents) > 0.5


def test_streamed_responses_are_relayed_and_compacted(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=40, seed=4)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=8_000)
    items = run_session(proxy, session, steps=40, stream=True)
    assert items[-1].get("type") == "message"
    assert responses_requests(upstream, summary=True)
    assert all(r.status == 200 for r in upstream.requests)
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= 8_000


def test_reasoning_items_travel_byte_for_byte_with_their_turn(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=40, seed=6)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=8_000)
    items = run_session(proxy, session, steps=40, include_reasoning=True)
    sent_reasoning = {json.dumps(i, sort_keys=True) for i in items if i.get("type") == "reasoning"}
    assert sent_reasoning
    assert responses_requests(upstream, summary=True)
    for request in responses_requests(upstream):
        given = input_items(request.body)
        for index, item in enumerate(given):
            if item.get("type") == "reasoning":
                assert json.dumps(item, sort_keys=True) in sent_reasoning
                # The item the reasoning led to follows it (its turn is never split).
                assert index + 1 < len(given)
                assert given[index + 1].get("type") in ("function_call", "message")


def test_previous_response_id_passes_through_with_a_warning(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    upstream.responder = ScriptedToolAgent([], final="hello")
    proxy = start_proxy()
    client = openai_client(proxy)
    first = client.responses.create(model=MODEL, input="Remember the number 4711.")
    raw = client.responses.with_raw_response.create(
        model=MODEL, input="Which number?", previous_response_id=first.id
    )
    assert raw.parse().output_text == "hello"
    assert "previous_response_id" in raw.headers["x-summarizer-warning"]
    assert raw.headers["x-summarizer-compacted"] == "false"
    sent = responses_requests(upstream)[-1]
    assert sent.body["previous_response_id"] == first.id and sent.body["input"] == "Which number?"
    metrics = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'summarizer_unmanaged_requests_total{reason="previous_response_id"} 1.0' in metrics


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        (
            {
                "model": MODEL,
                "input": [{"type": "function_call_output", "call_id": "call_x", "output": "1"}],
            },
            "input[0].call_id",
        ),
        ({"model": MODEL, "input": 7}, "input"),
    ],
)
def test_bad_requests_get_openais_error_shape(
    upstream: TestUpstream, start_proxy: ProxyFactory, body: dict[str, Any], param: str
) -> None:
    proxy = start_proxy()
    answer = httpx2.post(
        f"{proxy.base_url}/responses", json=body, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and error["message"]
    assert not responses_requests(upstream)


@pytest.mark.parametrize("served_by", ["responses", "chat"])
def test_the_agents_sdk_default_model_runs_a_long_session_through_the_proxy(
    upstream: TestUpstream, start_proxy: ProxyFactory, served_by: str
) -> None:
    """Its default model class speaks the Responses API; the upstream has that API, or only
    chat completions (``--responses-upstream chat``)."""
    agents = pytest.importorskip("agents")
    session = CodingSession(turns=60, seed=8)
    scripted = ScriptedToolAgent(session.steps)
    upstream.responder = scripted
    proxy = start_proxy(context_window=16_000, responses_upstream=served_by)
    turn = {"n": 0}

    def tool(name: str) -> Any:
        def run(**arguments: Any) -> str:
            turn["n"] += 1
            return session.execute(turn["n"], name, arguments)

        return run

    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return str(tool("read_file")(path=path))

    @agents.function_tool
    def search(pattern: str) -> str:
        """Search the repository for a pattern."""
        return str(tool("search")(pattern=pattern))

    @agents.function_tool
    def run(command: str) -> str:
        """Run a shell command."""
        return str(tool("run")(command=command))

    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    agents.set_tracing_disabled(True)
    agent = agents.Agent(
        name="coder",
        instructions=session.system["content"],
        tools=[read_file, search, run],
        # The SDK's default model class, the Responses API one, on this client.
        model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
    )
    result = agents.Runner.run_sync(agent, session.task["content"], max_turns=200)
    assert result.final_output == session.steps[-1]  # the script's closing text
    assert scripted.finished
    route = "/v1/responses" if served_by == "responses" else "/v1/chat/completions"
    assert {r.path for r in upstream.requests} == {route}
    assert len([r for r in upstream.requests if not r.is_summary]) >= 61
    assert len([r for r in upstream.requests if r.is_summary]) >= 2
    assert all(r.status == 200 for r in upstream.requests)
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= 16_000


def test_context_management_compaction_for_any_model_round_trips_through_the_client(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    """The OpenAI contract: past ``compact_threshold`` the response carries a compaction item
    before the model's output; the client keeps items from the newest such item on (as OpenAI's
    docs allow); the proxy expands it. Here the item is readable and the model is any model."""
    session = CodingSession(turns=60, seed=21)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=100_000)  # the client's threshold is what triggers
    client = openai_client(proxy)
    items: list[Any] = [{"role": "user", "content": session.task["content"]}]
    compactions: list[dict[str, Any]] = []
    for turn in range(61):
        response = client.responses.create(
            model=MODEL,
            instructions=session.system["content"],
            tools=responses_tools(session),  # type: ignore[arg-type]
            input=items,
            max_output_tokens=500,
            store=False,
            context_management=[{"type": "compaction", "compact_threshold": 12_000}],
        )
        output = [item.model_dump(exclude_none=True) for item in response.output]
        found = [item for item in output if item["type"] == "compaction"]
        if found:
            assert output[0]["type"] == "compaction"  # before the model's output
            compactions.append(found[0])
            items = []  # everything before the newest compaction item is superseded
        items.extend(output)
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            break
        for call in calls:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": session.execute(turn, call["name"], call["arguments"]),
                }
            )
    assert len(compactions) >= 2
    item = compactions[0]
    assert item["id"].startswith("cmp_summarizer_") and item["created_by"] == "summarizer"
    readable = json.loads(item["encrypted_content"].split(":", 1)[1])
    assert readable["summary"] and readable["items"][0]["role"] == "user"
    agents = responses_requests(upstream)
    assert all(r.status == 200 for r in upstream.requests)
    for request in agents:  # the upstream never sees a compaction item: the proxy expands it
        assert not any(i.get("type") == "compaction" for i in input_items(request.body))
    assert max(r.prompt_tokens or 0 for r in agents) <= 12_000 + 2_500
    final = "\n".join(texts(agents[-1].body["input"]))
    for fact in session.planted:
        assert fact.text in final, fact.text


def test_a_streamed_compaction_item_comes_first_and_indices_follow(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=40, seed=22)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=100_000)
    client = openai_client(proxy)
    items: list[Any] = [{"role": "user", "content": session.task["content"]}]
    announced = 0
    for turn in range(41):
        with client.responses.stream(
            model=MODEL,
            instructions=session.system["content"],
            tools=responses_tools(session),  # type: ignore[arg-type]
            input=items,
            max_output_tokens=500,
            store=False,
            context_management=[{"type": "compaction", "compact_threshold": 10_000}],
        ) as stream:
            events = list(stream)
            response = stream.get_final_response()
        numbers = [event.sequence_number for event in events]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        added = [e for e in events if e.type == "response.output_item.added"]
        output = [item.model_dump(exclude_none=True) for item in response.output]
        if output[0]["type"] == "compaction":
            announced += 1
            assert added[0].item.type == "compaction" and added[0].output_index == 0
            assert [e.output_index for e in added] == list(range(len(added)))
            assert len(added) == len(output)
            items = []
        items.extend(output)
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            break
        for call in calls:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": session.execute(turn, call["name"], call["arguments"]),
                }
            )
    assert announced >= 2
    assert all(r.status == 200 for r in upstream.requests)


def test_an_altered_compaction_item_is_refused(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    item = {
        "type": "compaction",
        "id": "cmp_summarizer_x",
        "encrypted_content": "summarizer.compaction.v1:{not json",
    }
    answer = httpx2.post(
        f"{proxy.base_url}/responses",
        json={"model": MODEL, "input": [item, {"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "input[0].encrypted_content"
    assert not responses_requests(upstream)


def test_responses_compact_is_answered_for_any_model_and_its_output_continues(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=30, seed=23)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=100_000)
    items = run_session(proxy, session, steps=12)  # a conversation well under any trigger
    client = openai_client(proxy)
    before = len(upstream.requests)
    compacted = client.responses.compact(
        model=MODEL, input=items, instructions=session.system["content"]
    )
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["compaction"]
    item = compacted.output[0].model_dump(exclude_none=True)
    assert item["created_by"] == "summarizer"
    # The proxy compacted it itself: summary requests upstream (a strict retry may follow a
    # refused first answer), never a compact call.
    sent = upstream.requests[before:]
    assert sent and all(r.path == "/v1/responses" and r.is_summary for r in sent)
    assert compacted.usage.input_tokens > 0
    # The output is the next input: the conversation goes on from it.
    reply = client.responses.create(
        model=MODEL,
        instructions=session.system["content"],
        tools=responses_tools(session),  # type: ignore[arg-type]
        input=[item, {"role": "user", "content": "Go on."}],
        store=False,
    )
    assert reply.status == "completed"
    upstream_input = input_items(responses_requests(upstream)[-1].body)
    assert upstream_input[0] == items[0]  # the task, kept verbatim
    assert not any(i.get("type") == "compaction" for i in upstream_input)
    assert upstream_input[-1] == {"role": "user", "content": "Go on."}


def test_responses_compact_with_nothing_to_compact_returns_the_input(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    given = [{"role": "user", "content": "Say hello."}]
    compacted = openai_client(proxy).responses.compact(model=MODEL, input=given)  # type: ignore[arg-type]
    assert [
        item.model_dump(exclude_none=True, warnings=False) for item in compacted.output
    ] == given
    assert not upstream.requests
