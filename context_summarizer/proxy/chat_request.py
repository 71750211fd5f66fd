"""A chat completion request (``POST /v1/chat/completions``) as the proxy sees it: parsed,
checked, who sent it; and its front door."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.effects import Turn
from ..core.recall_chat import CHAT as RECALL_CHAT
from ..core.recall_codec import RecallCodec
from ..core.results import PrepareResult, SummarizeCall
from . import sse
from .apis import CHAT, Api
from .body import outgoing_body, wants_usage
from .errors import ProxyError
from .front_door import FrontDoor
from .managed_request import ParsedRequest, json_object_body_noting, sender
from .remembered import Remembered

if TYPE_CHECKING:
    from .model_routes import ModelRoute
    from .upstream import Upstream


@dataclass
class ChatRequest(ParsedRequest):
    """A parsed, checked chat completion request and who sent it."""

    upstream_path: ClassVar[str] = "/chat/completions"
    api: ClassVar[Api] = CHAT
    recall: ClassVar[RecallCodec | None] = RECALL_CHAT
    by_orjson: bool = False
    """Whether orjson read the whole body (the fast path builds only on such bodies)."""
    remembered: Remembered | None = None
    """The fast path's memory of this body (None: not remembered)."""
    previous: Remembered | None = None
    """The remembered body this one was read from, when the fast path read it."""

    def turn(self) -> Turn:
        """The request as the engine sees it."""
        tools = self.body.get("tools")
        return Turn(
            self.body["messages"],
            self.model,
            tools=tools if isinstance(tools, list) else None,
            session=self.session,
            request=self.body,
            namespace=self.namespace,
        )

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The body to send upstream for ``result``."""
        return outgoing_body(
            self.raw,
            self.body,
            messages=result.messages if result is not None and result.rewritten else None,
            stream=self.stream,
        )

    def summarizer(self, upstream: Upstream, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
        """Summary calls as chat completions to ``route``'s upstream, with the client's
        credentials (or the route's key)."""
        return upstream.chat_summarizer(self.headers, route)

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """A chat completion's ``usage``."""
        return answer.get("usage")

    def event_usage(self, event: bytes) -> Any:
        """A chunk's ``usage``."""
        return sse.usage_of(event)

    def keep_event(self, event: bytes) -> bool:
        """All but the usage-only chunk the proxy asked for and the client did not."""
        return wants_usage(self.body) or not sse.is_usage_only(event)


def parse_chat_request(raw: bytes, headers: Any) -> ChatRequest:
    """The request, or the 400 response saying what is wrong with it."""
    body, by_orjson = json_object_body_noting(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ProxyError(
            400, "'model' is required and must be a string.", param="model", code="invalid_type"
        )
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ProxyError(
            400,
            "'messages' is required and must be an array.",
            param="messages",
            code="invalid_type",
        )
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ProxyError(400, "'tools' must be an array.", param="tools", code="invalid_type")
    who = sender(headers)
    return ChatRequest(raw, body, model, body.get("stream") is True, *who, headers, by_orjson)


FRONT_DOOR = FrontDoor(
    CHAT, ("/v1/chat/completions",), lambda raw, headers, arrival: parse_chat_request(raw, headers)
)
"""OpenAI's Chat Completions, managed."""
