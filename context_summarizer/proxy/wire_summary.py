"""Summary calls in the client's own API (Messages, Responses), sent to the upstream as raw HTTP.

The engine asks for a summary as a Chat Completions body: its view of the conversation plus one
user instruction. The request object (``SummaryWire``) turns that into its API's request on the
client's own conversation (so the provider's cache serves the prefix) and reads the answer; this
client sends it with the client's headers and retries.

Retries follow the chat summary client's policy (``library.upstream.retry_policy``'s limits):
429, 529 and other 5xx, timeouts and dropped connections, honouring ``retry-after``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import httpx2
from tenacity import AsyncRetrying, retry_if_exception

from ..core.recall_codec import RecallCodec
from ..core.results import SummarizeCall, SummaryOutcome
from ..library.upstream import retry_policy

if TYPE_CHECKING:
    from .apis import Api
    from .model_routes import ModelRoute
    from .upstream import Upstream

_NOT_FOR_SUMMARY = ("content-type", "accept", "accept-encoding", "content-length")


class _Refused(Exception):
    """The upstream answered the summary request with an error status."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__(f"upstream returned HTTP {response.status_code}")
        self.response = response
        self.status_code = response.status_code


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx2.TransportError):
        return True
    return isinstance(exc, _Refused) and (exc.status_code == 429 or exc.status_code >= 500)


class SummaryWire(Protocol):
    """A request of an API whose summary calls go upstream in that API."""

    api: ClassVar[Api]

    @property
    def upstream_path(self) -> str:
        """The route summary requests go to, after the upstream's base URL."""
        ...

    @property
    def headers(self) -> Any:
        """The client's request headers (its credential among them)."""
        ...

    def summary_body(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        """The upstream request for the engine's summary call (a Chat Completions body: the
        conversation it sees plus one user instruction)."""
        ...

    def summary_outcome(self, content: bytes, latency: float) -> SummaryOutcome:
        """The summary (or the error) in the upstream's answer ``content``."""
        ...


class WireSummaryClient:
    """Performs ``SummarizeCall``s for one request, in its own API, against its route's
    upstream."""

    def __init__(
        self,
        upstream: Upstream,
        request: SummaryWire,
        route: ModelRoute,
        recall: RecallCodec | None = None,
    ) -> None:
        self._upstream = upstream
        self._request = request
        self._route = route
        self._recall = recall
        """Offers the recall tool in a summary body when the call says its conversation's
        requests are offered it (``SummarizeCall.recall``)."""
        self._policy = {**retry_policy(), "retry": retry_if_exception(_retryable)}

    async def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        """Perform ``call``; never raises for an upstream failure or an unreadable answer."""
        started = time.monotonic()
        failures: list[str] = []
        summary = self._request.summary_body(call.body)
        if call.recall is not None and self._recall is not None:
            summary = self._recall.offered(summary, call.recall)
        body = json.dumps(summary).encode()
        upstream = self._upstream
        headers = [
            *upstream.forward_headers(
                self._request.headers,
                drop=_NOT_FOR_SUMMARY,
                key_header=self._request.api.key_header,
                route=self._route,
            ),
            ("content-type", "application/json"),
        ]
        url = self._route.url(self._request.upstream_path)
        try:
            async for attempt in AsyncRetrying(**self._policy):
                with attempt:
                    try:
                        response = await upstream.http.post(url, content=body, headers=headers)
                    except httpx2.TransportError as exc:
                        failures.append(
                            "timeout" if isinstance(exc, httpx2.TimeoutException) else "unreachable"
                        )
                        raise
                    if response.status_code >= 400:
                        failures.append(str(response.status_code))
                        raise _Refused(response)
        except _Refused as exc:
            return _failed(f"upstream returned HTTP {exc.status_code}", failures, started)
        except httpx2.TimeoutException:
            return _failed("upstream timed out", failures, started)
        except httpx2.TransportError:
            return _failed("could not connect to upstream", failures, started)
        outcome = self._request.summary_outcome(response.content, time.monotonic() - started)
        if outcome.error is not None:
            failures.append("invalid_response")
        return outcome.model_copy(update={"failed_attempts": failures})


def _failed(error: str, failures: list[str], started: float) -> SummaryOutcome:
    return SummaryOutcome(
        error=error, failed_attempts=failures, latency_s=time.monotonic() - started
    )
