"""A Messages API request (``POST /v1/messages``) as the proxy sees it: parsed, checked, decoded
for the engine, and written back with the engine's conversation and the managed cache breakpoints.

Usage comes back in Anthropic's terms; the engine calibrates on the whole prompt, which Anthropic
reports in three parts: ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.codecs import Decoded
from ..core.codecs.anthropic import AnthropicCodec
from ..core.codecs.anthropic_cache import count_breakpoints, place_breakpoints
from ..core.effects import Turn
from ..core.errors import InvalidConversation
from ..core.recall_codec import RecallCodec
from ..core.recall_messages import MESSAGES as RECALL_MESSAGES
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome
from . import sse
from .apis import MESSAGES, Api
from .body import replaced_body
from .errors import ProxyError
from .front_door import Arrival, FrontDoor
from .managed_request import ParsedRequest, json_object_body, sender
from .messages_summary import messages_summary_body, messages_summary_outcome, tokens
from .wire_summary import WireSummaryClient

if TYPE_CHECKING:
    from .model_routes import ModelRoute
    from .upstream import Upstream

CODEC = AnthropicCodec()
_COUNTED = ("model", "system", "tools", "tool_choice", "thinking")
"""The fields ``/messages/count_tokens`` takes besides ``messages``."""


@dataclass
class MessagesRequest(ParsedRequest):
    """A parsed, checked Messages request, decoded for the engine, and who sent it."""

    upstream_path: ClassVar[str] = "/messages"
    api: ClassVar[Api] = MESSAGES
    recall: ClassVar[RecallCodec | None] = RECALL_MESSAGES
    decoded: Decoded
    client_breakpoints: int
    manage_breakpoints: bool = True
    """Whether breakpoints are placed when the client set none (``Settings.cache_breakpoints``)."""

    def turn(self) -> Turn:
        """The request as the engine sees it (``max_tokens`` is the reply's reserve)."""
        return Turn(
            self.decoded.messages,
            self.model,
            tools=self.decoded.tools,
            session=self.session,
            request=self.body,
            namespace=self.namespace,
        )

    def wire_fields(self, messages: list[Any]) -> dict[str, Any]:
        """``system``/``tools``/``messages`` for the chat ``messages`` the engine chose: the
        client's own objects for what it kept, plus our breakpoints if the client set none."""
        fields = CODEC.encode(self.decoded, messages)
        if self.client_breakpoints or not self.manage_breakpoints:
            return fields
        wire = fields["messages"]
        summary_first = bool(wire) and not any(wire[0] is item for item in self.decoded.items)
        return place_breakpoints(self.body, wire, summary_first=summary_first)

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The body to send upstream: the client's, unless managed (a rewritten conversation,
        or the managed breakpoints)."""
        managed = self.manage_breakpoints and not self.client_breakpoints
        if result is None or (not result.rewritten and not managed):
            return self.raw
        messages = result.messages if result.rewritten else self.decoded.messages
        return replaced_body(self.raw, self.body, self.wire_fields(list(messages)))

    def count_tokens_body(self, result: PrepareResult) -> dict[str, Any]:
        """The ``/messages/count_tokens`` request for what ``result`` would send."""
        fields = self.wire_fields(list(result.messages))
        body = {key: self.body[key] for key in _COUNTED if key in self.body}
        return {**body, **fields}

    def replace_body(self, body: dict[str, Any]) -> None:
        """The new body (held recall exchanges put back), decoded again for the engine."""
        decoded = CODEC.decode(body)
        super().replace_body(body)
        self.decoded = decoded

    def summarizer(self, upstream: Upstream, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
        """Summary calls as Messages requests on this conversation, to ``route``'s upstream with
        the client's headers."""
        return WireSummaryClient(upstream, self, route, self.recall)

    def summary_body(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        """The Messages request for the engine's summary call (``messages_summary``)."""
        wire = self.wire_fields(list(chat_body["messages"][:-1]))
        return messages_summary_body(self.body, wire, chat_body)

    def summary_outcome(self, content: bytes, latency: float) -> SummaryOutcome:
        """The summary in a Messages answer."""
        return messages_summary_outcome(content, latency)

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """A message's usage as the whole prompt, and its output tokens."""
        usage = answer.get("usage")
        found = prompt_usage(usage)
        if found is not None and isinstance(usage, Mapping):
            found["completion_tokens"] = tokens(usage.get("output_tokens"))
        return found

    def event_usage(self, event: bytes) -> Any:
        """The usage of ``message_start`` (the prompt is reported there, once), and the final
        output count of ``message_delta``, alone (``answers.reports_prompt``: it is only
        counted, its prompt figures, if any, being those ``message_start`` reported)."""
        if b"message_start" in event:
            data = sse.event_object(event)
            message = data.get("message") if data is not None else None
            return prompt_usage(message.get("usage")) if isinstance(message, dict) else None
        if b"message_delta" in event:
            data = sse.event_object(event)
            if data is None or data.get("type") != "message_delta":
                return None
            usage = data.get("usage")
            output = tokens(usage.get("output_tokens")) if isinstance(usage, Mapping) else None
            return None if output is None else {"completion_tokens": output}
        return None


def prompt_usage(usage: Any) -> dict[str, Any] | None:
    """Anthropic's ``usage`` as ``{"prompt_tokens": whole prompt, "cached_tokens": read}``."""
    if not isinstance(usage, Mapping):
        return None
    parts = [
        usage.get(key)
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ]
    if type(parts[0]) is not int:
        return {"prompt_tokens": parts[0]}  # judged (and refused) by the proxy's usage check
    total = sum(part for part in parts if type(part) is int and part > 0)
    cached = parts[1] if type(parts[1]) is int else 0
    return {"prompt_tokens": total, "cached_tokens": cached}


def parse_messages_request(
    raw: bytes, headers: Any, *, manage_breakpoints: bool = True
) -> MessagesRequest:
    """The request, or the 400 (in Anthropic's error shape) saying what is wrong with it."""
    body = json_object_body(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProxyError(400, "model: Field required")
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 1:
        raise ProxyError(400, "max_tokens: Field required, an integer of at least 1")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ProxyError(400, "tools: Input should be a valid list")
    try:
        decoded = CODEC.decode(body)
    except InvalidConversation as exc:
        raise ProxyError(400, str(exc), param=exc.param) from None
    who = sender(headers)
    return MessagesRequest(
        raw,
        body,
        model,
        body.get("stream") is True,
        *who,
        headers,
        decoded=decoded,
        client_breakpoints=count_breakpoints(body),
        manage_breakpoints=manage_breakpoints,
    )


def _parse(raw: bytes, headers: Any, arrival: Arrival) -> MessagesRequest:
    managed = arrival.settings.cache_breakpoints == "managed"
    return parse_messages_request(raw, headers, manage_breakpoints=managed)


FRONT_DOOR = FrontDoor(MESSAGES, ("/v1/messages",), _parse)
"""Anthropic's Messages, managed (``/v1/messages/count_tokens`` passes through)."""
