"""The demo's agent loop on Anthropic's Messages API: the real ``anthropic`` SDK, through the
proxy's ``/v1/messages``, against the test upstream's Messages route.

``messages_agent`` yields the same ``create``/``lookup`` pair as the chat clients of ``demo``,
speaking Messages: the history is Anthropic messages, tool calls are ``tool_use`` blocks and their
outputs ``tool_result`` blocks. ``conversation`` and ``texts`` read a recorded Messages request
for the session table (append-only checks and planted facts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..core.errors import ConfigurationError
from ..core.results import CompactionEvent
from ..testing import TestUpstream
from .demo_proxy import demo_proxy

Create = Callable[..., tuple[Any, str | None]]


def anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions tool definitions as Messages ones."""
    return [
        {
            "name": tool["function"]["name"],
            "description": tool["function"].get("description", ""),
            "input_schema": tool["function"]["parameters"],
        }
        for tool in tools
    ]


@contextmanager
def messages_agent(
    upstream: TestUpstream,
    context_window: int,
    record: Callable[[CompactionEvent], None],
    config: dict[str, Any],
) -> Iterator[tuple[Create, Callable[[str], Any]]]:
    """The proxy on a free port and an ``anthropic`` client pointed at it: ``create(system,
    tools, messages, max_tokens, model)`` returns the reply message and the session header."""
    try:
        import anthropic
    except ImportError as exc:  # the SDK is in the dev extra
        raise ConfigurationError(
            "the Messages demo drives the anthropic SDK: pip install anthropic (or "
            "context-summarizer[dev])"
        ) from exc
    with demo_proxy(upstream, context_window, record, config) as proxy:
        client = anthropic.Anthropic(
            base_url=proxy.base_url.removesuffix("/v1"), api_key="demo-key", max_retries=0
        )

        def create(**kwargs: Any) -> tuple[Any, str | None]:
            raw = client.messages.with_raw_response.create(**kwargs)
            return raw.parse(), raw.headers.get("x-summarizer-session")

        def lookup(session: str) -> dict[str, Any] | None:
            found = client.get(
                f"/v1/summarizer/sessions/{session}",
                cast_to=object,
                options={"headers": {"x-api-key": "demo-key"}},
            )
            return found if isinstance(found, dict) else None

        try:
            yield create, lookup
        finally:
            client.close()


def messages_turn(
    create: Create,
    history: list[dict[str, Any]],
    *,
    system: str,
    tools: list[dict[str, Any]],
    model: str,
    max_tokens: int,
    execute: Callable[[str, Any], str],
) -> tuple[bool, str | None]:
    """One agent turn: ask, append the reply and the tool results. Returns whether the agent
    called a tool (the loop goes on) and the session header."""
    reply, session = create(
        model=model, max_tokens=max_tokens, system=system, tools=tools, messages=history
    )
    content = [block.model_dump(exclude_none=True) for block in reply.content]
    history.append({"role": "assistant", "content": content})
    calls = [block for block in content if block["type"] == "tool_use"]
    if calls:
        results = [
            {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": execute(call["name"], call["input"]),
            }
            for call in calls
        ]
        history.append({"role": "user", "content": results})
    return bool(calls), session


def conversation(body: Mapping[str, Any]) -> list[Any]:
    """A recorded Messages request's conversation as its model reads it: breakpoints aside
    (they move between requests), string content as the one text block it stands for."""
    return [_without_markers(message) for message in body.get("messages") or ()]


def _without_markers(value: Any) -> Any:
    if isinstance(value, dict):
        if isinstance(value.get("content"), str) and "role" in value:
            value = {**value, "content": [{"type": "text", "text": value["content"]}]}
        return {k: _without_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_markers(item) for item in value]
    return value


def texts(value: Any) -> list[str]:
    """Every string in a Messages conversation (text blocks, tool results, summaries)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in texts(item)]
    return []
