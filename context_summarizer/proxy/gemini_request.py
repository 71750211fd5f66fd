"""A Gemini API request (``POST /v1beta/models/{model}:generateContent``, and
``:streamGenerateContent?alt=sse``) as the proxy sees it: parsed, checked, decoded for the engine,
and written back with the engine's conversation; and its summary call, as a ``generateContent``
request on the same conversation (``gemini_summary``).

The model is the URL's, and so is streaming (the ``:streamGenerateContent`` method); only
``contents`` ever changes. It goes upstream to ``/models/{model}:{method}`` under the route's base
URL, which for Google ends in ``/v1beta`` (``https://generativelanguage.googleapis.com/v1beta``).
Usage is ``usageMetadata``: ``promptTokenCount`` is the whole prompt, cached part included
(``cachedContentTokenCount``). A streamed answer repeats the prompt's count on every chunk; only
the last (the one with a ``finishReason``) is final, and only it is observed.

A request naming ``cachedContent`` continues a conversation whose beginning the provider keeps:
it goes upstream unchanged, with the warning header, a log line and
``summarizer_unmanaged_requests_total{reason="cachedContent"}`` saying so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qs

from starlette.routing import Match
from starlette.types import Scope

from ..core.codecs import Decoded
from ..core.codecs.gemini import GeminiCodec
from ..core.effects import Turn
from ..core.errors import HistoryNotInRequest, InvalidConversation
from ..core.recall_codec import RecallCodec
from ..core.recall_gemini import GEMINI as RECALL_GEMINI
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome
from . import sse
from .apis import GEMINI, Api
from .body import replaced_body
from .errors import ProxyError, unknown_path
from .front_door import Arrival, FrontDoor
from .gemini_summary import gemini_summary_body, gemini_summary_outcome
from .managed_request import ParsedRequest, json_object_body, sender
from .messages_summary import tokens
from .routing import StrictRoute
from .wire_summary import WireSummaryClient

if TYPE_CHECKING:
    from .model_routes import ModelRoute
    from .upstream import Upstream

CODEC = GeminiCodec()
GENERATE = "generateContent"
STREAM = "streamGenerateContent"
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
"""What a model in the path may be called (``gemini-2.5-flash``, ``gemini-2.0-flash-001``):
nothing that could reach another upstream path once put in the URL."""


@dataclass
class GeminiRequest(ParsedRequest):
    """A parsed, checked generateContent request, decoded for the engine, and who sent it."""

    api: ClassVar[Api] = GEMINI
    recall: ClassVar[RecallCodec | None] = RECALL_GEMINI
    decoded: Decoded | None = None
    """None when the history is not all in the request (``unmanaged`` says why)."""
    unmanaged: str | None = None

    @property
    def upstream_path(self) -> str:
        """``/models/{model}:generateContent``, or ``:streamGenerateContent?alt=sse``."""
        if self.stream:
            return f"/models/{self.model}:{STREAM}?alt=sse"
        return f"/models/{self.model}:{GENERATE}"

    def turn(self) -> Turn:
        """The request as the engine sees it (``maxOutputTokens`` is the reply's reserve)."""
        if self.decoded is None:
            raise HistoryNotInRequest(self.unmanaged or "cachedContent")
        config = self.body.get("generationConfig", self.body.get("generation_config"))
        cap = None
        if isinstance(config, Mapping):
            cap = config.get("maxOutputTokens", config.get("max_output_tokens"))
        return Turn(
            self.decoded.messages,
            self.model,
            tools=self.decoded.tools,
            session=self.session,
            request={"max_tokens": cap} if type(cap) is int else {},
            namespace=self.namespace,
        )

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The client's body, with ``contents`` rewritten when a checkpoint applies."""
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
        """Summary calls as generateContent requests on this conversation, to ``route``'s
        upstream with the client's headers."""
        return WireSummaryClient(upstream, _SummaryWire(self), route, self.recall)

    def summary_body(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        """The generateContent request for the engine's summary call (``gemini_summary``)."""
        assert self.decoded is not None
        contents = CODEC.encode(self.decoded, list(chat_body["messages"][:-1]))["contents"]
        return gemini_summary_body(self.body, contents, chat_body)

    def summary_outcome(self, content: bytes, latency: float) -> SummaryOutcome:
        """The summary in a generateContent answer."""
        return gemini_summary_outcome(content, latency)

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """A ``GenerateContentResponse``'s ``usageMetadata`` as the whole prompt."""
        return prompt_usage(answer.get("usageMetadata"))

    def event_usage(self, event: bytes) -> Any:
        """The usage of a stream's last chunk (the one with a ``finishReason``); every other
        chunk's is a running figure, not observed."""
        if b"finishReason" not in event or b"usageMetadata" not in event:
            return None
        data = sse.event_object(event)
        candidates = data.get("candidates") if data is not None else None
        if not isinstance(candidates, list) or not any(
            isinstance(c, Mapping) and c.get("finishReason") for c in candidates
        ):
            return None
        assert data is not None
        return prompt_usage(data.get("usageMetadata"))

    def comment_event(self, comment: bytes) -> bytes:
        """A blank line instead of an SSE comment: the Gemini SDKs read a line that is neither
        ``data:`` nor blank as a JSON chunk (Python) or stall on it (JavaScript), and skip
        blank lines. Such a stream's outcome is not said beyond its headers (``pending``)."""
        return b"\n"


@dataclass
class _SummaryWire:
    """A request's summary calls as ``WireSummaryClient`` sends them: always the whole answer
    (``:generateContent``), whether or not the agent's request streams."""

    request: GeminiRequest
    api: ClassVar[Api] = GEMINI

    @property
    def upstream_path(self) -> str:
        """``/models/{model}:generateContent``."""
        return f"/models/{self.request.model}:{GENERATE}"

    @property
    def headers(self) -> Any:
        """The client's headers."""
        return self.request.headers

    def summary_body(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        """The request's summary body."""
        return self.request.summary_body(chat_body)

    def summary_outcome(self, content: bytes, latency: float) -> SummaryOutcome:
        """The summary in the answer."""
        return gemini_summary_outcome(content, latency)


def prompt_usage(usage: Any) -> dict[str, Any] | None:
    """``usageMetadata`` as ``{"prompt_tokens": promptTokenCount, "cached_tokens": ...}``,
    plus ``"completion_tokens": candidatesTokenCount`` when reported (thoughts left out, as a
    summary's are)."""
    if not isinstance(usage, Mapping):
        return None
    cached = tokens(usage.get("cachedContentTokenCount")) or 0
    found = {"prompt_tokens": usage.get("promptTokenCount"), "cached_tokens": cached}
    completion = tokens(usage.get("candidatesTokenCount"))
    if completion is not None:
        found["completion_tokens"] = completion
    return found


def parse_gemini_request(
    raw: bytes, headers: Any, *, model: str, method: str, query: str = ""
) -> GeminiRequest:
    """The request to ``model``'s ``method`` (``query``: the URL's); ``ProxyError`` (a 400, in
    Google's error shape) says what is wrong with it."""
    if not MODEL_NAME.fullmatch(model):
        raise ProxyError(400, f"Invalid model name in the path: {model[:64]!r}.")
    stream = method == STREAM
    if stream and parse_qs(query).get("alt") != ["sse"]:
        raise ProxyError(
            400,
            "This summarizer proxy relays streamGenerateContent as server-sent events only: "
            "add ?alt=sse (as the google-genai SDKs and Gemini CLI do).",
        )
    body = json_object_body(raw)
    if "tools" in body and not isinstance(body["tools"], list):
        raise ProxyError(400, "Invalid value at 'tools': expected a list of tools.")
    who = sender(headers)
    decoded: Decoded | None = None
    unmanaged: str | None = None
    if body.get("cachedContent") or body.get("cached_content"):
        unmanaged = "cachedContent"
    else:
        try:
            decoded = CODEC.decode(body)
        except InvalidConversation as exc:
            raise ProxyError(400, str(exc), param=exc.param) from None
    return GeminiRequest(
        raw, body, model, stream, *who, headers, decoded=decoded, unmanaged=unmanaged
    )


class GeminiRoute(StrictRoute):
    """A route of Gemini's two generate methods on a model (``.../models/{target}``): any other
    path under it (``:countTokens``, an OpenAI model's ``/v1/models/{id}``) is not its own and
    goes on to the next route; a method other than POST gets a 405 here."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """A generate method's path (whatever the HTTP method, as ``StrictRoute``); else none."""
        if not str(scope.get("path", "")).endswith((f":{GENERATE}", f":{STREAM}")):
            return Match.NONE, {}
        return super().matches(scope)


def _parse(raw: bytes, headers: Any, arrival: Arrival) -> GeminiRequest:
    model, _, method = str(arrival.params["target"]).rpartition(":")
    if not model or method not in (GENERATE, STREAM):
        raise unknown_path(f"/models/{arrival.params['target']}")
    return parse_gemini_request(raw, headers, model=model, method=method, query=arrival.query)


FRONT_DOOR = FrontDoor(
    GEMINI, ("/v1beta/models/{target}", "/v1/models/{target}"), _parse, route=GeminiRoute
)
"""Google's Gemini ``generateContent`` and ``streamGenerateContent?alt=sse``, managed (and under
``/v1``, the Python SDK's default version, sent to the same upstream route); Gemini's other
paths get a 404: the top-level upstream may be another provider's, which must not receive a
Google key."""
