"""A request of a context-managed API as the exchange drives it (``ManagedRequest``), what every
front door's request has (``ParsedRequest``), who sent it, and the ``x-summarizer-*`` headers and
SSE comment that tell the client what was done with it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..core.effects import Turn
from ..core.recall_codec import RecallCodec
from ..core.results import PrepareResult, SummarizeCall
from . import sse
from .apis import Api
from .body import NestingTooDeep, json_bytes, parse_body_noting
from .errors import ProxyError
from .headers import SESSION_HEADER, check_session_header, credential, credential_namespace

if TYPE_CHECKING:
    from .model_routes import ModelRoute
    from .upstream import Upstream


class ManagedRequest(Protocol):
    """A parsed request of a context-managed API, as the exchange drives it: what the engine
    sees of it, the body to send for a result, and how its answers report usage."""

    @property
    def upstream_path(self) -> str:
        """The upstream route, after the upstream's base URL (``/chat/completions``; a class
        attribute, or per request where the URL names the model, as Gemini's does)."""
        ...

    api: ClassVar[Api]
    """Its API: the label it is counted and logged under, how an upstream key is sent."""
    rewrites_answers: ClassVar[bool]
    """Whether ``rewrite_answer`` may write a whole answer anew: it is then read exactly."""
    recall: ClassVar[RecallCodec | None]
    """The recall tool in this API's shapes (None: the tool is never offered here)."""
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

    def replace_body(self, body: dict[str, Any]) -> None:
        """Take ``body`` (this request with held recall exchanges put back) as the request."""
        ...

    def outgoing(self, result: PrepareResult | None) -> bytes:
        """The body to send upstream for ``result`` (None: forwarded unmanaged)."""
        ...

    def summarizer(self, upstream: Upstream, route: ModelRoute) -> Callable[[SummarizeCall], Any]:
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
    recall: ClassVar[RecallCodec | None] = None

    def keep_event(self, event: bytes) -> bool:
        """Whether an event that reported usage is relayed (by default, every one)."""
        return True

    def replace_body(self, body: dict[str, Any]) -> None:
        """Take ``body`` (this request with held recall exchanges put back) as the request;
        ``InvalidConversation`` when it cannot be read as one (it is then left as it was)."""
        self.body = body
        self.raw = json_bytes(body)

    def rewrite_answer(self, answer: dict[str, Any], result: PrepareResult | None) -> bool:
        """Change a whole answer for ``result``; by default it is relayed as written."""
        return False

    def event_rewriter(self, result: PrepareResult | None) -> Callable[[bytes], bytes] | None:
        """Rewrites a streamed answer's events; by default they are relayed as written."""
        return None

    def comment_event(self, comment: bytes) -> bytes:
        """An SSE comment of the proxy's own, as the client is sent it: by default, as is."""
        return comment


def json_object_body(raw: bytes) -> dict[str, Any]:
    """A request body parsed as a JSON object; ``ProxyError`` (a 400) saying why it is not one."""
    return json_object_body_noting(raw)[0]


def json_object_body_noting(raw: bytes) -> tuple[dict[str, Any], bool]:
    """``json_object_body(raw)``, and whether orjson read the body (see ``parse_body_noting``)."""
    try:
        body, by_orjson = parse_body_noting(raw)
    except NestingTooDeep as exc:
        raise ProxyError(400, str(exc), code="nested_too_deeply") from None
    except ValueError:
        raise ProxyError(
            400,
            "We could not parse the JSON body of your request. The body must be valid JSON.",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise ProxyError(400, "The request body must be a JSON object.", code="invalid_type")
    return body, by_orjson


Sender = tuple[str, str | None]
"""Who sent a request: its credential's namespace and the ``X-Summarizer-Session`` it names."""


def sender(headers: Any) -> Sender:
    """Who sent a request: its credential's namespace and the session it names; ``ProxyError``
    (a 400) for an invalid ``X-Summarizer-Session``."""
    check_session_header(headers)
    return credential_namespace(credential(headers)), headers.get(SESSION_HEADER) or None


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
