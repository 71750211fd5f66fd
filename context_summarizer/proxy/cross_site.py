"""Requests a web page made: refused, so that no page open in a browser on the machine can spend
the proxy's upstream key.

A page can make a "simple" cross-origin request without any CORS preflight: a form post, or
``fetch(url, {mode: "no-cors"})``, with a ``text/plain``, ``application/x-www-form-urlencoded`` or
``multipart/form-data`` body. The browser sends it, and the proxy would forward it with the
server's key even though the page never reads the answer. So, on every ``/v1`` route and
``/ui/api``:

- a request with a body must say it is JSON (``application/json``, with any parameters, or
  ``application/*+json``; the openai and anthropic SDKs, httpx's ``json=`` and LiteLLM all do);
  ``multipart/form-data`` is taken only on OpenAI's upload routes (files, uploads, audio,
  images, containers, videos), which the proxy passes through. A body without a
  ``Content-Type`` is refused too (a page can send one: a ``Blob`` body);
- a request the browser marks as coming from another origin is refused: ``Sec-Fetch-Site:
  cross-site`` or ``same-site`` (a page on another port of ``localhost``, or another subdomain,
  is same-site), or, from a browser that sends no ``Sec-Fetch-Site``, an ``Origin`` other than
  the proxy's own (the scheme of the connection, the ``Host`` it came to). ``same-origin`` and
  ``none`` (typed in the address bar) are the proxy's own pages.

Origins listed in ``Settings.allow_origins`` (``--allow-origin``) pass, and get CORS answers
(``AllowedOriginsCors``) so a page there can read them. ``RequestGuard`` asks ``is_cross_site``
first, and ``check_content_type`` once the request's key is accepted (a request without one
gets 401 first). Both refusals are 403 (in the API's error shape: ``ErrorShape`` runs outside
the guard) and are counted like any other answer, in ``summarizer_requests_total{status="403"}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ProxyError

UPLOAD_PATHS = (
    "/v1/files",
    "/v1/uploads/",
    "/v1/audio/",
    "/v1/images/",
    "/v1/containers/",
    "/v1/videos",
)
"""OpenAI's routes that take ``multipart/form-data`` bodies (passed through)."""

_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#@]+")
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def normalize_origin(value: str) -> str:
    """``value`` as browsers write an ``Origin``: lower case, no trailing ``/``, no default
    port. ``ValueError`` unless it is ``scheme://host[:port]``."""
    origin = value.strip().lower().rstrip("/")
    if not _ORIGIN.fullmatch(origin):
        raise ValueError(
            f"{value!r} is not an origin: write scheme://host[:port], e.g. http://localhost:3000"
        )
    scheme = origin.split("://", 1)[0]
    return origin.removesuffix(_DEFAULT_PORTS.get(scheme, "\0"))


def is_guarded(path: str) -> bool:
    """Whether requests to ``path`` are checked: every ``/v1`` route and ``/ui/api``."""
    return path.startswith("/v1/") or path == "/ui/api" or path.startswith("/ui/api/")


def is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` says the body is JSON."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _has_body(headers: Headers) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0").strip() != "0"


def _own_origin(headers: Headers, scheme: str) -> str | None:
    host = headers.get("host")
    if not host:
        return None
    try:
        return normalize_origin(f"{scheme}://{host}")
    except ValueError:
        return None


def _origin(headers: Headers) -> str | None:
    """The request's ``Origin``, normalized (``null`` as is); None when absent or unreadable."""
    origin = headers.get("origin")
    if origin is None or origin.strip().lower() == "null":
        return None if origin is None else "null"
    try:
        return normalize_origin(origin)
    except ValueError:
        return None


def _is_cross_site(headers: Headers, scheme: str, allowed: frozenset[str]) -> bool:
    origin = _origin(headers)
    if origin is not None and origin in allowed:
        return False
    site = headers.get("sec-fetch-site", "").strip().lower()
    if site in ("cross-site", "same-site"):
        return True
    if site in ("same-origin", "none") or "origin" not in headers:
        return False  # the browser's own word, or no mark of a page at all
    return origin is None or origin != _own_origin(headers, scheme)


def is_cross_site(
    headers: Headers, path: str, *, scheme: str = "http", allowed: frozenset[str] = frozenset()
) -> bool:
    """Whether a request to a guarded ``path`` with ``headers`` came from a web page of another
    origin (see the module). ``scheme``: the connection's (``http`` or ``https``); ``allowed``:
    the normalized origins that pass (``Settings.allow_origins``)."""
    return is_guarded(path) and _is_cross_site(headers, scheme, allowed)


def cross_site_refusal() -> ProxyError:
    """The 403 for a request a web page of another origin made."""
    return ProxyError(
        403,
        "This request came from a web page of another origin (its Origin or Sec-Fetch-Site "
        "header says so): the summarizer proxy refuses those, so that no page open in a browser "
        "can use it. Start the proxy with --allow-origin ORIGIN (SUMMARIZER_ALLOW_ORIGINS) to "
        "let the pages of that origin use it.",
        type="permission_error",
        code="cross_site_request",
    )


def check_content_type(headers: Headers, path: str) -> None:
    """``ProxyError`` (a 403) for a request to a guarded ``path`` whose body is not JSON
    (``multipart/form-data`` passes on the upload routes)."""
    content_type = headers.get("content-type")
    if not is_guarded(path) or not _has_body(headers) or is_json(content_type):
        return
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "multipart/form-data" and path.startswith(UPLOAD_PATHS):
        return
    said = f"Content-Type {media}" if media else "no Content-Type"
    raise ProxyError(
        403,
        f"This request's body has {said}; the summarizer proxy takes JSON bodies only: send "
        "Content-Type: application/json (curl -d sends application/x-www-form-urlencoded: "
        "add -H 'Content-Type: application/json'). A body of any other type is what a web "
        "page can send to the proxy without the browser asking it first, so it is refused.",
        code="unsupported_content_type",
    )


class AllowedOriginsCors:
    """Plain ASGI middleware: requests from an allowed origin (preflights included) get CORS
    answers; any other request goes on, untouched, to the guard."""

    def __init__(self, app: ASGIApp, origins: Iterable[str]) -> None:
        self.app = app
        self.origins = frozenset(origins)
        self.cors = CORSMiddleware(
            app,
            allow_origins=sorted(self.origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=[
                "x-summarizer-compacted",
                "x-summarizer-prompt-tokens",
                "x-summarizer-checkpoint",
                "x-summarizer-session",
                "x-summarizer-warning",
            ],
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, with CORS when its origin is allowed."""
        if scope["type"] == "http" and self._allowed(Headers(scope=scope).get("origin")):
            await self.cors(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str | None) -> bool:
        if origin is None:
            return False
        try:
            return normalize_origin(origin) in self.origins
        except ValueError:
            return False
