"""``FrontDoor``: one context-managed API of the proxy, as the app mounts it.

A front door is its ``Api`` (label, error shape, key header, paths), the routes it manages and
how it reads a request arriving there (``parse``: the body, its headers and where it arrived, to
a ``ManagedRequest``; a ``ProxyError``, a 4xx, says what is wrong with it). What the request then
is to the exchange (its codec, usage reader, summary wire) is the ``ManagedRequest``'s. Every
front door is served by the one endpoint (``endpoint.serve_managed``) and ``exchange.Exchange``;
the registry is ``front_doors.FRONT_DOORS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import Response
from starlette.routing import Route

from .apis import Api
from .managed_request import ManagedRequest
from .routing import StrictRoute

if TYPE_CHECKING:
    from .exchange_services import ExchangeServices
    from .settings import Settings


@dataclass(frozen=True, slots=True)
class Arrival:
    """Where a request arrived: its route's path parameters (Gemini's model is in the path),
    and the proxy's settings and compaction key, which some front doors read it with."""

    params: Mapping[str, Any]
    query: str
    """The URL's query string."""
    settings: Settings
    compaction_key: bytes


class DoorAnswer(ABC):
    """A request its front door answers itself (a Responses compaction trigger), with the
    services an exchange has."""

    @abstractmethod
    async def answer(self, services: ExchangeServices) -> Response:
        """The answer; ``ProxyError`` for a failure to answer in the API's error shape."""


Parse = Callable[[bytes, Any, Arrival], ManagedRequest | DoorAnswer]
"""Reads a request body (with its headers and arrival) as a request to manage, or answers it
itself (a Responses compaction trigger); ``ProxyError`` (a 4xx) says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class FrontDoor:
    """One managed API: its ``Api``, its routes (``POST``, Starlette path patterns, mounted as
    ``route``: by default a ``StrictRoute``, which answers any other method with a 405) and its
    ``parse``."""

    api: Api
    routes: tuple[str, ...]
    parse: Parse
    route: type[Route] = StrictRoute
