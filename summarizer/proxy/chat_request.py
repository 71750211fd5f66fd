"""A chat completion request as the proxy sees it: parsed, checked, and who sent it; and the
``x-summarizer-*`` headers and SSE comment that tell the client what was done with it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from starlette.responses import Response

from ..core.effects import Turn
from ..core.results import PrepareResult, SummarizeCall
from . import sse
from .body import NestingTooDeep, outgoing_body, parse_body_noting, wants_usage
from .errors import error_response
from .headers import SESSION_HEADER, credential, credential_namespace, invalid_session_header

if TYPE_CHECKING:
    from .fast_path import Remembered
    from .model_routes import ModelRoute
    from .state import ProxyState


class ManagedRequest(Protocol):
    """A parsed request of a context-managed API, as the exchange drives it: what the engine
    sees of it, the body to send for a result, and how its answers report usage."""

    @property
    def upstream_path(self) -> str:
        """The upstream route, after the upstream's base URL (``/chat/completions``; a class
        attribute, or per request where the URL names the model, as Gemini's does)."""
        ...

    api: ClassVar[str]
    """Whose API it is: ``"openai"``, ``"anthropic"`` or ``"gemini"`` (how an upstream key is
    sent)."""
    rewrites_answers: ClassVar[bool]
    """Whether ``rewrite_answer`` may write a whole answer anew: it is then read exactly."""
    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    namespace: str
    session: str | None
    headers: Any

    def turn(self) -> Turn:
        """The request as the engine sees it."""
        ...

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The body to send upstream for ``result`` (None: forwarded unmanaged)."""
        ...

    def summarizer(self, state: ProxyState, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
        """Performs this request's summary calls against ``route``'s upstream, in its API."""
        ...

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """The usage of a whole answer, as ``{"prompt_tokens": N, ...}`` (or None)."""
        ...

    def event_usage(self, event: bytes) -> Any:
        """The usage an SSE event of a streamed answer reports (as above), or None."""
        ...

    def keep_event(self, event: bytes) -> bool:
        """Whether an event that reported usage is relayed to the client."""
        ...

    def rewrite_answer(self, answer: dict[str, Any], result: PrepareResult | None) -> bool:
        """Change a whole success answer in place for ``result``; whether anything changed."""
        ...

    def event_rewriter(self, result: PrepareResult | None) -> Callable[[bytes], bytes] | None:
        """Rewrites each event of a streamed answer for ``result`` (None: relayed as is)."""
        ...

    def comment_event(self, comment: bytes) -> bytes:
        """What the client is sent for an SSE comment of the proxy's own (the keepalives and
        the outcome line of a stream opened before its compaction ended)."""
        ...


@dataclass
class ParsedRequest:
    """What every managed request has: its bytes, their parse, its model and whether it streams,
    and who sent it (the credential's namespace, the session it names)."""

    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    namespace: str
    session: str | None
    headers: Any
    rewrites_answers: ClassVar[bool] = False

    def keep_event(self, event: bytes) -> bool:
        """Whether an event that reported usage is relayed (by default, every one)."""
        return True

    def rewrite_answer(self, answer: dict[str, Any], result: PrepareResult | None) -> bool:
        """Change a whole answer for ``result``; by default it is relayed as written."""
        return False

    def event_rewriter(self, result: PrepareResult | None) -> Callable[[bytes], bytes] | None:
        """Rewrites a streamed answer's events; by default they are relayed as written."""
        return None

    def comment_event(self, comment: bytes) -> bytes:
        """An SSE comment of the proxy's own, as the client is sent it: by default, as is."""
        return comment


def json_object_body(raw: bytes) -> dict[str, Any] | Response:
    """A request body parsed as a JSON object, or the 400 (in the client's API's shape) saying
    why it is not one."""
    return json_object_body_noting(raw)[0]


def json_object_body_noting(raw: bytes) -> tuple[dict[str, Any] | Response, bool]:
    """``json_object_body(raw)``, and whether orjson read the body (see ``parse_body_noting``)."""
    try:
        body, by_orjson = parse_body_noting(raw)
    except NestingTooDeep as exc:
        return error_response(400, str(exc), code="nested_too_deeply"), False
    except ValueError:
        return error_response(
            400,
            "We could not parse the JSON body of your request. The body must be valid JSON.",
            code="invalid_json",
        ), False
    if not isinstance(body, dict):
        return error_response(
            400, "The request body must be a JSON object.", code="invalid_type"
        ), False
    return body, by_orjson


Sender = tuple[str, str | None]
"""Who sent a request: its credential's namespace and the ``X-Summarizer-Session`` it names."""


def sender(headers: Any) -> Sender | Response:
    """Who sent a request: its credential's namespace and the session it names; or the 400 for
    an invalid ``X-Summarizer-Session``."""
    if (bad_session := invalid_session_header(headers)) is not None:
        return bad_session
    return credential_namespace(credential(headers)), headers.get(SESSION_HEADER) or None


@dataclass
class ChatRequest(ParsedRequest):
    """A parsed, checked chat completion request and who sent it."""

    upstream_path: ClassVar[str] = "/chat/completions"
    api: ClassVar[str] = "openai"
    front_door: ClassVar[str] = "chat"
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

    def summarizer(self, state: ProxyState, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
        """Summary calls as chat completions to ``route``'s upstream, with the client's
        credentials (or the route's key)."""
        return state.summarizer_for(self.headers, route)

    def answer_usage(self, answer: Mapping[str, Any]) -> Any:
        """A chat completion's ``usage``."""
        return answer.get("usage")

    def event_usage(self, event: bytes) -> Any:
        """A chunk's ``usage``."""
        return sse.usage_of(event)

    def keep_event(self, event: bytes) -> bool:
        """All but the usage-only chunk the proxy asked for and the client did not."""
        return wants_usage(self.body) or not sse.is_usage_only(event)


def parse_chat_request(raw: bytes, headers: Any) -> ChatRequest | Response:
    """The request, or the 400 response saying what is wrong with it."""
    body, by_orjson = json_object_body_noting(raw)
    if isinstance(body, Response):
        return body
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return error_response(
            400, "'model' is required and must be a string.", param="model", code="invalid_type"
        )
    messages = body.get("messages")
    if not isinstance(messages, list):
        return error_response(
            400,
            "'messages' is required and must be an array.",
            param="messages",
            code="invalid_type",
        )
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return error_response(400, "'tools' must be an array.", param="tools", code="invalid_type")
    who = sender(headers)
    if isinstance(who, Response):
        return who
    return ChatRequest(raw, body, model, body.get("stream") is True, *who, headers, by_orjson)


def truth_comment(result: PrepareResult | None) -> bytes:
    """The SSE comment that says, after the keepalives of an early-opened stream, what its
    headers could not: whether the request was compacted, its checkpoint and its estimate."""
    if result is None:
        return sse.comment("summarizer: compacted=false checkpoint= prompt_tokens=")
    return sse.comment(
        f"summarizer: compacted={'true' if result.compacted else 'false'} "
        f"checkpoint={result.checkpoint_id or ''} "
        f"prompt_tokens={result.report.estimated_tokens}"
    )


def summarizer_headers(result: PrepareResult | None) -> dict[str, str]:
    """The ``x-summarizer-*`` response headers for ``result`` (None: not managed)."""
    if result is None:
        return {
            "x-summarizer-compacted": "false",
            "x-summarizer-prompt-tokens": "",
            "x-summarizer-checkpoint": "",
        }
    return {
        "x-summarizer-compacted": "true" if result.compacted else "false",
        "x-summarizer-prompt-tokens": str(result.report.estimated_tokens),
        "x-summarizer-checkpoint": result.checkpoint_id or "",
        "x-summarizer-session": result.session,
    }
