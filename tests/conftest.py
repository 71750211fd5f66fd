"""Shared fixtures: conversations built by hand, and the real test upstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from summarizer.testing import TestUpstream


def tool_turn(call_id: str, name: str, args: str, output: str) -> list[dict[str, Any]]:
    """An assistant tool call and its result."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def message_from_stream(chunks: Iterable[Any]) -> dict[str, Any]:
    """The assistant message a stream of ``chat.completion.chunk`` objects adds up to."""
    content = ""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = tc.id or entry["id"]
            if tc.function:
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls.values()
        ]
    return message


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    """A test upstream with no window limit, stopped after the test."""
    with TestUpstream() as server:
        yield server
