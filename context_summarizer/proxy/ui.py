"""``/ui``: a read-only web page of what the proxy did, off unless ``Settings.ui``.

- ``GET /ui``: one self-contained page (``ui.html``, vanilla JS and inline SVG, no external URL
  of any kind), sent with a strict Content-Security-Policy whose script and style hashes are
  computed from the page itself. It carries no data, so it loads without a client key.
- ``GET /ui/api/sessions`` and ``GET /ui/api/sessions/{id}``: the JSON the page reads, under the
  sessions API's credential rules (``access.reader_namespace``): a credential sees only its own
  namespace's sessions, another tenant's session is the same 404 as a missing one, and a
  namespace appears only as its label.

The page takes its key from the URL fragment (``/ui#key=...``, which browsers never send) or a
key field, keeps it in ``sessionStorage`` and sends it as ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
from dataclasses import dataclass
from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.session_view import row_json, view_json
from ..stores import ActivityLog, Store
from ..stores.session_views import load_session_view
from .access import UI_PAGE, reader_namespace
from .errors import ProxyError
from .settings import Settings

PAGE_FILE = "ui.html"

_COMMON_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class Page:
    """The page's bytes and the headers it is sent with."""

    body: bytes
    headers: dict[str, str]


def _inline(html: str, tag: str) -> str:
    """The text of the page's one inline ``<tag>`` element (exactly as the browser hashes it)."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    if html.count(opening) != 1 or html.count(closing) != 1:
        raise ValueError(f"{PAGE_FILE} must hold exactly one {opening} element")
    return html.split(opening, 1)[1].split(closing, 1)[0]


def _source_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def content_security_policy(html: str) -> str:
    """The page's policy: nothing but its own inline script and style (by hash), fetches to this
    origin, and ``data:`` images; no frames, forms, plugins or base URL."""
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {_source_hash(_inline(html, 'script'))}",
            f"style-src {_source_hash(_inline(html, 'style'))}",
            "connect-src 'self'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


@functools.cache
def page() -> Page:
    """The page, read once from the package."""
    html = (resources.files(__package__) / PAGE_FILE).read_text(encoding="utf-8")
    headers = {
        **_COMMON_HEADERS,
        "Content-Security-Policy": content_security_policy(html),
        "X-Frame-Options": "DENY",
    }
    return Page(body=html.encode("utf-8"), headers=headers)


async def ui_page(request: Request) -> Response:
    """``GET /ui``: the page (no data in it; the data comes from ``/ui/api``)."""
    served = page()
    return Response(served.body, media_type="text/html; charset=utf-8", headers=served.headers)


def _activity(store: Store) -> ActivityLog | None:
    return store if isinstance(store, ActivityLog) else None


async def ui_sessions(request: Request, *, store: Store, settings: Settings) -> Response:
    """``GET /ui/api/sessions``: the caller's sessions, newest activity first."""
    namespace = reader_namespace(request, settings)
    log = _activity(store)
    rows = await asyncio.to_thread(log.list_sessions, namespace) if log is not None else []
    return JSONResponse(
        {"object": "list", "data": [row_json(row) for row in rows]},
        headers=_COMMON_HEADERS,
    )


async def ui_session(request: Request, *, store: Store, settings: Settings) -> Response:
    """``GET /ui/api/sessions/{id}``: one of the caller's sessions: its requests, and each
    compaction's summaries with what they replaced (when recorded)."""
    namespace = reader_namespace(request, settings)
    session = request.path_params["session"]
    view = await asyncio.to_thread(load_session_view, store, namespace, session)
    if view is None:
        raise ProxyError(
            404,
            f"No session {session!r} for this credential.",
            code="session_not_found",
            headers=_COMMON_HEADERS,
        )
    return JSONResponse(view_json(view), headers=_COMMON_HEADERS)


def ui_routes(store: Store, settings: Settings) -> list[Route]:
    """The routes of ``/ui`` (registered only when it is enabled), reading ``store``."""
    sessions = functools.partial(ui_sessions, store=store, settings=settings)
    session = functools.partial(ui_session, store=store, settings=settings)
    return [
        Route(UI_PAGE, ui_page, methods=["GET"]),
        Route(f"{UI_PAGE}/api/sessions", sessions, methods=["GET"]),
        Route(f"{UI_PAGE}/api/sessions/{{session:path}}", session, methods=["GET"]),
    ]
