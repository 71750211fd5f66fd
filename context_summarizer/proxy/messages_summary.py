"""A Messages conversation's summary call, as a Messages request, and its answer read.

The engine's summary call (its view of the conversation plus one user instruction) becomes the
client's own Messages request: same model, system, tools and thinking settings, the conversation's
kept messages as the client's own objects with the same managed breakpoints, plus one user text
block and ``tool_choice: {"type": "none"}``. The prefix the provider cached for the previous
request serves this one too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.results import SummaryOutcome
from .body import json_object

_NOT_COPIED = frozenset(
    {"messages", "stream", "max_tokens", "tool_choice", "stop_sequences", "metadata"}
)
"""Client fields a summary request does not reuse: it has its own conversation end and cap."""
_STOP_REASONS = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}


def summary_cap(chat_body: Mapping[str, Any], default: int = 1024) -> int:
    """The summary's token cap in the engine's summary call."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = chat_body.get(key)
        if type(value) is int:
            return value
    return default


def messages_summary_body(
    client: Mapping[str, Any], wire: Mapping[str, Any], chat_body: Mapping[str, Any]
) -> dict[str, Any]:
    """The Messages request for a summary call: ``client``'s request with ``wire`` (the
    ``system``/``tools``/``messages`` fields of the conversation the engine summarizes) and the
    instruction (the last message of ``chat_body``) appended as one user text block."""
    instruction = chat_body["messages"][-1]
    body = {key: value for key, value in client.items() if key not in _NOT_COPIED}
    body.update(wire)
    body["messages"] = [
        *body["messages"],
        {"role": "user", "content": [{"type": "text", "text": str(instruction["content"])}]},
    ]
    body["model"] = chat_body.get("model", client.get("model"))
    cap = summary_cap(chat_body)
    thinking = client.get("thinking")
    if isinstance(thinking, Mapping) and type(thinking.get("budget_tokens")) is int:
        cap += thinking["budget_tokens"]  # max_tokens must exceed the thinking budget
    body["max_tokens"] = cap
    if client.get("tools"):
        body["tool_choice"] = {"type": "none"}
    return body


def messages_summary_outcome(content: bytes, latency: float) -> SummaryOutcome:
    """The summary in a Messages answer: its text blocks joined; the whole prompt
    (``input_tokens`` and both cache figures) as ``prompt_tokens``."""
    message = json_object(content, exact=True)
    if message is None or not isinstance(message.get("content"), list):
        return SummaryOutcome(
            error="upstream answered with something that is not a message", latency_s=latency
        )
    blocks = [b for b in message["content"] if isinstance(b, Mapping)]
    texts = [b.get("text") for b in blocks if b.get("type") == "text"]
    found = message.get("usage")
    usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    parts = [
        tokens(usage.get(key))
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ]
    stop = message.get("stop_reason")
    return SummaryOutcome(
        text="".join(t for t in texts if isinstance(t, str)) if blocks else None,
        finish_reason=_STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None,
        prompt_tokens=sum(p or 0 for p in parts) if parts[0] is not None else None,
        cached_tokens=parts[1],
        completion_tokens=tokens(usage.get("output_tokens")),
        tool_called=any(b.get("type") == "tool_use" for b in blocks),
        latency_s=latency,
    )


def tokens(value: Any) -> int | None:
    """A usage figure, or None unless it is a non-negative int."""
    return value if type(value) is int and value >= 0 else None
