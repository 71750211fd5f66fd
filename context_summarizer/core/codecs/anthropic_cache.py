"""Anthropic prompt-cache breakpoints, placed for a client that set none. Pure.

Anthropic caches a prompt only up to explicit ``cache_control`` breakpoints (at most 4); a request
reads the longest prefix an earlier one wrote at a breakpoint, looking back up to 20 blocks from
each. A client that sets any breakpoint manages its cache itself: its markers are kept and none
are added. For one that sets none, three are placed where the prefix is stable:

1. the end of the instructions (the last ``system`` block, else the last tool): read by every
   request of every session with the same tools and system prompt;
2. the end of the summary message a compacted conversation starts with: read by every request
   until the next compaction, however many blocks the turns between add;
3. the last block of the newest message: the next request (the same conversation plus its new
   turn) reads everything up to here.

Markers are added to copies: the client's objects are never changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_BREAKPOINTS = 4
"""Anthropic refuses a request with more ``cache_control`` blocks than this."""
EPHEMERAL = {"type": "ephemeral"}

_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
"""Blocks Anthropic does not let a breakpoint sit on."""


def count_breakpoints(body: Mapping[str, Any]) -> int:
    """How many ``cache_control`` markers a Messages request carries (tools, system, blocks and
    the blocks inside tool results)."""
    total = 0
    for tool in _list(body.get("tools")):
        total += _marked(tool)
    for block in _list(body.get("system")):
        total += _marked(block)
    for message in _list(body.get("messages")):
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in _list(content):
            total += _marked(block)
            if isinstance(block, Mapping):
                total += sum(_marked(inner) for inner in _list(block.get("content")))
    return total


def place_breakpoints(
    body: Mapping[str, Any], messages: Sequence[Any], *, summary_first: bool
) -> dict[str, Any]:
    """The ``system``/``tools``/``messages`` fields of ``body`` (with ``messages`` as the
    conversation to send) carrying the managed breakpoints. ``summary_first``: the conversation
    begins with a summary message the proxy wrote."""
    fields: dict[str, Any] = {}
    system = body.get("system")
    tools = body.get("tools")
    if isinstance(system, str) and system:
        fields["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    elif isinstance(system, list) and system and _markable(system[-1]):
        fields["system"] = [*system[:-1], _with_marker(system[-1])]
    elif isinstance(tools, list) and tools and isinstance(tools[-1], Mapping):
        fields["tools"] = [*tools[:-1], _with_marker(tools[-1])]
    out = list(messages)
    targets = {len(out) - 1} if out else set()
    if summary_first and out:
        targets.add(0)
    for index in sorted(targets):
        marked = _marked_message(out[index])
        if marked is not None:
            out[index] = marked
    fields["messages"] = out
    return fields


def _marked_message(message: Any) -> dict[str, Any] | None:
    """A copy of ``message`` with a breakpoint on its last markable block (None: none is)."""
    if not isinstance(message, Mapping):
        return None
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return None
        return {**message, "content": [{"type": "text", "text": content, **_MARK}]}
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        if _markable(content[index]):
            blocks = list(content)
            blocks[index] = _with_marker(content[index])
            return {**message, "content": blocks}
    return None


_MARK = {"cache_control": EPHEMERAL}


def _markable(block: Any) -> bool:
    if not isinstance(block, Mapping) or block.get("type") in _UNMARKABLE:
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def _with_marker(block: Mapping[str, Any]) -> dict[str, Any]:
    return {**block, **_MARK}


def _marked(value: Any) -> int:
    return 1 if isinstance(value, Mapping) and value.get("cache_control") is not None else 0


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
