"""The demo's agent loop on OpenAI's Responses API: the real ``openai`` SDK's
``client.responses``, the whole input each turn, through the proxy's ``/v1/responses`` against the
test upstream's Responses route.

``responses_agent`` yields the same ``create``/``lookup`` pair as the other demo clients;
``responses_turn`` runs one agent turn on an input item list; ``conversation`` reads a recorded
request for the session table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import openai

from ..core.results import CompactionEvent
from ..testing import TestUpstream
from .demo_proxy import demo_proxy, session_lookup

Create = Callable[..., tuple[Any, str | None]]


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions tool definitions as Responses ones."""
    return [{"type": "function", **tool["function"]} for tool in tools]


@contextmanager
def responses_agent(
    upstream: TestUpstream,
    context_window: int,
    record: Callable[[CompactionEvent], None],
    config: dict[str, Any],
) -> Iterator[tuple[Create, Callable[[str], Any]]]:
    """The proxy on a free port and an ``openai`` client pointed at it: ``create(**kwargs)``
    returns the response and the session header."""
    with demo_proxy(upstream, context_window, record, config) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="demo-key", max_retries=0)

        def create(**kwargs: Any) -> tuple[Any, str | None]:
            raw = client.responses.with_raw_response.create(**kwargs)
            return raw.parse(), raw.headers.get("x-summarizer-session")

        try:
            yield create, session_lookup(client)
        finally:
            client.close()


def responses_turn(
    create: Create,
    items: list[Any],
    *,
    instructions: str,
    tools: list[dict[str, Any]],
    model: str,
    max_tokens: int,
    execute: Callable[[str, Any], str],
) -> tuple[bool, str | None]:
    """One agent turn: ask with the whole input, append the output items and the function call
    outputs. Returns whether the agent called a tool and the session header."""
    response, session = create(
        model=model,
        instructions=instructions,
        tools=tools,
        input=items,
        max_output_tokens=max_tokens,
        store=False,
    )
    output = [item.model_dump(exclude_none=True) for item in response.output]
    items.extend(output)
    calls = [item for item in output if item["type"] == "function_call"]
    for call in calls:
        items.append(
            {
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": execute(call["name"], call["arguments"]),
            }
        )
    return bool(calls), session


def conversation(body: Mapping[str, Any]) -> list[Any]:
    """A recorded Responses request's input as an item list (a string input is one message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given or ())
