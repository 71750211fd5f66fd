"""The OpenAI-compatible HTTP proxy: ``create_app(settings)`` and the server that runs it.

Nothing is built at import: the app, its store, HTTP client and metrics come from
``create_app``. Importing ``context_summarizer.proxy`` imports neither starlette nor uvicorn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .server import ProxyServer, serve

__all__ = ["ProxyServer", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("ProxyServer", "serve"):
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
