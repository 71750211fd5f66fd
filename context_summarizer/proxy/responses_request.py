"""A Responses API request (``POST /v1/responses``) as the proxy sees it: parsed, checked,
decoded for the engine, and written back with the engine's conversation; and its summary call,
as a Responses request on the same conversation.

Only ``input`` ever changes. A request whose history the provider keeps (``previous_response_id``,
``conversation``, item references) cannot be counted or compacted: it goes upstream unchanged,
with the warning header, a log line and ``summarizer_unmanaged_requests_total`` saying so.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.codecs.responses import ResponsesCodec, ResponsesDecoded, history_at_provider
from ..core.codecs.responses_chat import chat_request, dumps, response_from_completion
from ..core.codecs.responses_chat_stream import ChatStreamTranslator
from ..core.codecs.responses_compaction import (
    BadCompactionItem,
    compaction_item,
    expand,
)
from ..core.effects import Turn
from ..core.errors import HistoryNotInRequest, InvalidConversation
from ..core.recall_codec import RecallCodec
from ..core.recall_responses import RESPONSES as RECALL_RESPONSES
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome
from . import sse
from .apis import RESPONSES, Api
from .body import json_object, replaced_body
from .errors import ProxyError
from .managed_request import ParsedRequest, json_object_body, sender
from .messages_summary import summary_cap, tokens
from .responses_events import CompactionAnnouncer
from .wire_summary import WireSummaryClient

if TYPE_CHECKING:
    from .model_routes import ModelRoute
    from .upstream import Upstream

CODEC = ResponsesCodec()

_NOT_COPIED = frozenset(
    {
        "input",
        "stream",
        "stream_options",
        "max_output_tokens",
        "tool_choice",
        "previous_response_id",
        "conversation",
        "context_management",
        "background",
        "store",
        "text",  # a structured-output format would bind the summary to the agent's schema
        "prompt",
        "metadata",
    }
)
"""Client fields a summary request does not reuse."""
_USAGE_EVENTS = (b"response.completed", b"response.incomplete", b"response.failed")


@dataclass
class ResponsesRequest(ParsedRequest):
    """A parsed, checked Responses request, decoded for the engine, and who sent it."""

    upstream_path: ClassVar[str] = "/responses"
    api: ClassVar[Api] = RESPONSES
    recall: ClassVar[RecallCodec | None] = RECALL_RESPONSES
    rewrites_answers: ClassVar[bool] = True
    decoded: ResponsesDecoded | None
    """None when the history is not in the request (``unmanaged`` says why)."""
    unmanaged: str | None = None
    compact_threshold: int | None = None
    """``context_management``'s compaction threshold, when the client asked for compaction."""
    compaction_key: bytes = b""
    """The server's secret its compaction items are signed with
    (``ProxyServices.compaction_key``)."""

    def turn(self) -> Turn:
        """The request as the engine sees it (``max_output_tokens`` is the reply's reserve)."""
        if self.decoded is None:
            raise HistoryNotInRequest(self.unmanaged or "previous_response_id")
        return Turn(
            self.decoded.messages,
            self.model,
            tools=self.decoded.tools,
            session=self.session,
            request=self.body,
            namespace=self.namespace,
            compact_threshold=self.compact_threshold,
        )

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The client's body, with ``input`` rewritten when a checkpoint applies."""
        if result is None or not result.rewritten or self.decoded is None:
            return self.raw
        fields = CODEC.encode(self.decoded, list(result.messages))
        return replaced_body(self.raw, self.body, fields)

    def replace_body(self, body: dict[str, Any]) -> None:
        """The new body (held recall exchanges put back), decoded again for the engine."""
        decoded = CODEC.decode(body) if self.decoded is not None else None
        super().replace_body(body)
        self.decoded = decoded

    def summarizer(self, upstream: Upstream, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
        """Summary calls as Responses requests on this conversation, to ``route``'s upstream
        with the client's headers."""
        return WireSummaryClient(upstream, self, route, self.recall)

    def summary_body(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        """The client's request (model, instructions, tools, reasoning settings) with the
        conversation the engine summarizes plus the instruction as one user message,
        ``tool_choice: "none"``, the summary cap, and ``store: false``."""
        assert self.decoded is not None
        live = CODEC.encode(self.decoded, list(chat_body["messages"][:-1]))["input"]
        if isinstance(live, str):
            live = [{"type": "message", "role": "user", "content": live}]
        instruction = str(chat_body["messages"][-1]["content"])
        body = {key: value for key, value in self.body.items() if key not in _NOT_COPIED}
        body["model"] = chat_body.get("model", self.model)
        body["input"] = [*live, {"type": "message", "role": "user", "content": instruction}]
        if self.body.get("tools"):
            body["tool_choice"] = "none"
        body["max_output_tokens"] = max(16, summary_cap(chat_body))
        body["store"] = False
        return body

    def summary_outcome(self, content: bytes, latency: float) -> SummaryOutcome:
        """The summary in a Responses answer: the text of its message items."""
        return responses_summary_outcome(content, latency)

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """A response's usage as ``{"prompt_tokens", "cached_tokens", "completion_tokens"}``."""
        return prompt_usage(answer.get("usage"))

    def event_usage(self, event: bytes) -> Any:
        """The usage of the final event (``response.completed`` and its failed twins)."""
        if b'"usage"' not in event or not any(name in event for name in _USAGE_EVENTS):
            return None
        data = sse.event_object(event)
        response = data.get("response") if data is not None else None
        return prompt_usage(response.get("usage")) if isinstance(response, dict) else None

    def announced(self, result: PrepareResult | None) -> dict[str, Any] | None:
        """The compaction item to put before the model's output: when the client asked for
        compaction (``context_management``) and this request was compacted."""
        return None if self.compact_threshold is None else self.announced_item(result)

    def announced_item(self, result: PrepareResult | None) -> dict[str, Any] | None:
        """The compaction item standing for ``result``'s input, if it was compacted."""
        if result is None or not result.compacted or self.decoded is None:
            return None
        compacted = CODEC.encode(self.decoded, list(result.messages))["input"]
        if isinstance(compacted, str):
            compacted = [{"type": "message", "role": "user", "content": compacted}]
        written = (m for m in result.messages if id(m) not in self.decoded.origins)
        summary = next((m for m in written if m.get("role") == "user"), None)
        text = summary.get("content") if summary is not None else None
        readable = text if isinstance(text, str) else ""
        return self.sealed(readable, compacted, result.checkpoint_id)

    def sealed(self, summary: str, kept: list[Any], checkpoint_id: str | None) -> dict[str, Any]:
        """A compaction item for ``kept``, signed for this request's namespace."""
        return compaction_item(
            summary, kept, checkpoint_id, key=self.compaction_key, namespace=self.namespace
        )

    def rewrite_answer(self, answer: dict[str, Any], result: PrepareResult | None) -> bool:
        """Put the announced compaction item first in a whole answer's ``output``; whether
        anything changed."""
        item = self.announced(result)
        if item is None or not isinstance(answer.get("output"), list):
            return False
        answer["output"] = [item, *answer["output"]]
        return True

    def event_rewriter(self, result: PrepareResult | None) -> Callable[[bytes], bytes] | None:
        """For a streamed answer: the events, with the announced compaction item added first
        (``stream_events.CompactionAnnouncer``); None when there is none to announce."""
        item = self.announced(result)
        return None if item is None else CompactionAnnouncer(item)


def prompt_usage(usage: Any) -> dict[str, Any] | None:
    """Responses ``usage`` as ``{"prompt_tokens": input_tokens, "cached_tokens": ...,
    "completion_tokens": output_tokens}``."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return {
        "prompt_tokens": usage.get("input_tokens"),
        "cached_tokens": tokens(cached) or 0,
        "completion_tokens": tokens(usage.get("output_tokens")),
    }


def responses_summary_outcome(content: bytes, latency: float) -> SummaryOutcome:
    """The summary in a Responses answer (text of its ``message`` items; ``length`` when it
    stopped at ``max_output_tokens``)."""
    response = json_object(content, exact=True)
    if response is None or not isinstance(response.get("output"), list):
        return SummaryOutcome(
            error="upstream answered with something that is not a response", latency_s=latency
        )
    items = [item for item in response["output"] if isinstance(item, Mapping)]
    texts: list[str] = []
    for item in items:
        if item.get("type") == "message" and isinstance(item.get("content"), list):
            for part in item["content"]:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    incomplete = response.get("incomplete_details")
    cut = isinstance(incomplete, Mapping) and incomplete.get("reason") == "max_output_tokens"
    found = response.get("usage")
    usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return SummaryOutcome(
        text="".join(texts) if items else None,
        finish_reason="length" if cut else "stop",
        prompt_tokens=tokens(usage.get("input_tokens")),
        cached_tokens=tokens(cached),
        completion_tokens=tokens(usage.get("output_tokens")),
        tool_called=any(item.get("type") == "function_call" for item in items),
        latency_s=latency,
    )


def parse_responses_request(
    raw: bytes, headers: Any, *, key: bytes, chat_upstream: bool = False
) -> ResponsesRequest:
    """The request; ``ProxyError`` (a 400) says what is wrong with it.
    ``key``: the server's secret compaction items are signed and verified with;
    ``chat_upstream``: the upstream speaks chat completions only (a translated request)."""
    body = json_object_body(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProxyError(
            400,
            "Missing required parameter: 'model'.",
            param="model",
            code="missing_required_parameter",
        )
    who = sender(headers)
    decoded: ResponsesDecoded | None = None
    unmanaged: str | None = None
    threshold = compaction_threshold(body.get("context_management"))
    if isinstance(body.get("input"), list):
        try:
            expanded = expand(body["input"], key=key, namespace=who[0])
        except BadCompactionItem as exc:
            raise ProxyError(400, str(exc), param=exc.param, code=exc.code) from None
        if expanded is not None:  # what the upstream reads; the client's bytes cannot go
            raw = replaced_body(raw, body, {"input": expanded.items})
            body = {**body, "input": expanded.items}
    if history_at_provider(body):
        unmanaged = next(
            (key for key in ("previous_response_id", "conversation") if body.get(key)),
            "item_reference",
        )
    elif "input" not in body:
        unmanaged = "no_input"  # a stored prompt or the like: nothing to manage
    else:
        try:
            decoded = CODEC.decode(body)
        except InvalidConversation as exc:
            raise ProxyError(400, str(exc), param=exc.param, code="invalid_value") from None
    if chat_upstream and decoded is None:
        raise ProxyError(
            400,
            f"This proxy serves the Responses API from a chat-completions upstream, which keeps "
            f"no conversation: '{unmanaged}' cannot be used; send the whole input.",
            param=unmanaged if unmanaged != "no_input" else "input",
            code="unsupported_parameter",
        )
    kind = TranslatedResponsesRequest if chat_upstream else ResponsesRequest
    extra = {"response_id": f"resp_{secrets.token_hex(12)}"} if chat_upstream else {}
    return kind(
        raw,
        body,
        model,
        body.get("stream") is True,
        *who,
        headers,
        decoded=decoded,
        unmanaged=unmanaged,
        compact_threshold=threshold,
        compaction_key=key,
        **extra,
    )


def compaction_threshold(entries: Any) -> int | None:
    """The ``compact_threshold`` of a ``context_management`` compaction entry (None: the client
    did not ask for compaction). An entry without a threshold asks for the proxy's own."""
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("type") == "compaction":
            value = entry.get("compact_threshold")
            return value if type(value) is int and value > 0 else 1 << 62
    return None


@dataclass
class TranslatedResponsesRequest(ResponsesRequest):
    """A Responses request served by a chat-completions-only upstream
    (``Settings.responses_upstream == "chat"``): sent as a chat completion, answered as a
    Response (``core.codecs.responses_chat``), summary calls as chat completions."""

    recall: ClassVar[RecallCodec | None] = None
    """Not offered: the upstream answers chat completions (the Responses codec would read them
    wrong)."""

    upstream_path: ClassVar[str] = "/chat/completions"
    response_id: str = ""

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The chat completion request for the engine's conversation."""
        assert self.decoded is not None
        messages = result.messages if result is not None else self.decoded.messages
        return dumps(chat_request(self.body, messages, self.decoded.tools)).encode()

    def summarizer(self, upstream: Upstream, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
        """Summary calls as chat completions (the engine's own body), to ``route``'s upstream
        with the client's headers."""
        return upstream.chat_summarizer(self.headers, route)

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """A chat completion's ``usage``."""
        return answer.get("usage")

    def event_usage(self, event: bytes) -> Any:
        """A chunk's ``usage``."""
        return sse.usage_of(event)

    def rewrite_answer(self, answer: dict[str, Any], result: PrepareResult | None) -> bool:
        """The completion becomes the Response (the compaction item first, when announced)."""
        response = response_from_completion(self.body, answer, self.response_id)
        item = self.announced(result)
        if item is not None:
            response["output"] = [item, *response["output"]]
        answer.clear()
        answer.update(response)
        return True

    def event_rewriter(self, result: PrepareResult | None) -> Callable[[bytes], bytes] | None:
        """Each chunk becomes the Responses events it makes."""
        translator = ChatStreamTranslator(self.body, self.response_id)
        item = self.announced(result)
        announce = None if item is None else CompactionAnnouncer(item)

        def rewrite(event: bytes) -> bytes:
            data = sse.event_data(event).strip()
            if not data:
                return b""  # a comment or keepalive: the client has its own
            if data == b"[DONE]":
                events = translator.finish()
            else:
                chunk = json_object(data, exact=True)
                if chunk is None:
                    return b""
                if isinstance(chunk.get("error"), dict):
                    return b"event: error\ndata: " + data + b"\n\n"
                events = translator.feed(chunk)
            out = [
                b"event: " + e["type"].encode() + b"\ndata: " + dumps(e).encode() + b"\n\n"
                for e in events
            ]
            if announce is not None:
                out = [announce(piece) for piece in out]
            return b"".join(out)

        return rewrite
