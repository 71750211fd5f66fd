"""Shared fixtures: conversations built by hand, and the real test upstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    """A test upstream with no window limit, stopped after the test."""
    with TestUpstream() as server:
        yield server
