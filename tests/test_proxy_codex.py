"""What Codex CLI's built-in OpenAI provider needs of the proxy: its compaction (a Responses
request whose input ends with ``{"type": "compaction_trigger"}``) answered with exactly one
compaction item, and its WebSocket attempt on ``/v1/responses`` refused with 426 (the status on
which Codex falls back to HTTP at once), through the real ``openai`` SDK and real sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from context_summarizer.testing import ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory
from .test_proxy_responses import (
    KEY,
    MODEL,
    input_items,
    openai_client,
    responses_requests,
    responses_tools,
    run_session,
)

TRIGGER = {"type": "compaction_trigger"}
CODEX_HEADERS = {"x-codex-beta-features": "remote_compaction_v2"}


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000) as server:
        yield server


def user_messages(items: list[Any]) -> list[Any]:
    """What Codex keeps before the compaction item: the conversation's user messages."""
    return [i for i in items if i.get("role") == "user" and i.get("type", "message") == "message"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_compaction_trigger_gets_exactly_one_compaction_item_and_the_conversation_goes_on(
    upstream: TestUpstream, start_proxy: ProxyFactory, stream: bool
) -> None:
    session = CodingSession(turns=30, seed=31)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=100_000)
    items = run_session(proxy, session, steps=12)  # well under any trigger: Codex asks
    client = openai_client(proxy)
    before = len(upstream.requests)
    arguments: dict[str, Any] = {
        "model": MODEL,
        "instructions": session.system["content"],
        "tools": responses_tools(session),
        "input": [*items, TRIGGER],
        "store": False,
        "extra_headers": CODEX_HEADERS,
    }
    if stream:
        with client.responses.stream(**arguments) as events:
            seen = list(events)
            response = events.get_final_response()
        done = [e.item for e in seen if e.type == "response.output_item.done"]
        assert [item.type for item in done] == ["compaction"]  # what Codex counts
        assert seen[-1].type == "response.completed"
        numbers = [e.sequence_number for e in seen]
        assert numbers == list(range(len(seen)))
    else:
        response = client.responses.create(**arguments)
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["compaction"]
    item = response.output[0].model_dump(exclude_none=True)
    assert item["created_by"] == "summarizer" and item["id"].startswith("cmp_summarizer_")
    readable = json.loads(item["encrypted_content"].split(":", 1)[1])
    assert readable["summary"]  # compacted: a summary stands for the older turns
    # The proxy compacted it itself: only summary requests went upstream, never the trigger.
    sent = upstream.requests[before:]
    assert sent and all(r.is_summary for r in sent)
    # Compacting now is a compaction like any other: the summary gets the usual allowance (the
    # 2,000-token cap), never its floor, where a model's summary is cut off and asked again.
    assert all(r.body["max_output_tokens"] == 2_000 for r in sent), [
        r.body["max_output_tokens"] for r in sent
    ]
    assert not any(i.get("type") == "compaction_trigger" for r in sent for i in r.body["input"])
    # Codex's next input: the user messages it retains, the item, the new turn.
    reply = client.responses.create(
        model=MODEL,
        instructions=session.system["content"],
        tools=responses_tools(session),  # type: ignore[arg-type]
        input=[*user_messages(items), item, {"role": "user", "content": "Go on."}],  # type: ignore[list-item]
        store=False,
    )
    assert reply.status == "completed"
    upstream_input = input_items(responses_requests(upstream)[-1].body)
    assert upstream_input == [*readable["items"], {"role": "user", "content": "Go on."}]
    assert upstream_input[0] == items[0]  # the task, kept verbatim


def test_a_trigger_with_nothing_to_compact_still_gets_one_item_standing_for_the_input(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    client = openai_client(proxy)
    given = [{"role": "user", "content": "Say hello."}]
    response = client.responses.create(model=MODEL, input=[*given, TRIGGER])  # type: ignore[list-item]
    assert [item.type for item in response.output] == ["compaction"]
    assert not upstream.requests
    item = response.output[0].model_dump(exclude_none=True)
    client.responses.create(model=MODEL, input=[item, {"role": "user", "content": "Again."}])  # type: ignore[list-item]
    assert responses_requests(upstream)[-1].body["input"] == [
        *given,
        {"role": "user", "content": "Again."},
    ]


def test_a_websocket_upgrade_on_responses_is_refused_with_426(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    """Codex falls back to HTTP on 426 at once, on any other refusal after five reconnects."""
    sync_client = pytest.importorskip("websockets.sync.client")
    exceptions = pytest.importorskip("websockets.exceptions")
    proxy = start_proxy()
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    with pytest.raises(exceptions.InvalidStatus) as refused:
        sync_client.connect(url, additional_headers={"Authorization": f"Bearer {KEY}"})
    answer = refused.value.response
    assert answer.status_code == 426
    assert json.loads(answer.body)["error"]["code"] == "websocket_not_supported"
    assert not upstream.requests


def test_an_upgrade_request_the_server_did_not_upgrade_is_refused_with_426(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    """Without a WebSocket library uvicorn hands the upgrade request on as a plain GET: the same
    426, never forwarded upstream."""
    proxy = start_proxy()
    answer = httpx2.get(
        f"{proxy.base_url}/responses",
        headers={"Upgrade": "websocket", "Authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 426
    assert answer.json()["error"]["code"] == "websocket_not_supported"
    assert not upstream.requests
    plain = httpx2.get(f"{proxy.base_url}/models", headers={"Authorization": f"Bearer {KEY}"})
    assert plain.status_code != 426  # an ordinary GET is still passed through
