"""``POST /v1/summarizer/sessions/{id}/compact``: compact a session at its next request.

The proxy keeps no conversation between requests (each request carries its whole history), so
"compact now" for a session is an ask kept in the store (``stores.compaction_asks``): the
session's next request is compacted whatever its size, with the ask's instructions, by
whichever replica serves it; the ask is then cleared. The body is optional:
``{"instructions": "..."}``. Only the session's own credential may ask (the same rules as
reading it: ``--sessions-api``); a session is named as ``X-Summarizer-Session`` names one, or as
the ``X-Summarizer-Session`` response header gave it.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..stores import Store
from ..stores.compaction_asks import CompactionAsks
from .access import reader_namespace
from .controls import checked_instructions
from .errors import ProxyError
from .headers import check_session_name
from .intake import whole_body
from .managed_request import json_object_body
from .settings import Settings

_MAX_ASK_BODY = 64 * 1024


async def ask_compaction(request: Request, *, store: Store, settings: Settings) -> Response:
    """Record the ask (202), or refuse it: an invalid session name or body (400), a store that
    keeps no asks (501), the caller's credential as for reading sessions (401, 404)."""
    namespace = reader_namespace(request, settings)
    session = request.path_params["session"]
    check_session_name(session, "The session in the path", param="session")
    raw = await whole_body(request, _MAX_ASK_BODY, settings.body_read_timeout)
    instructions = None
    if raw.strip():
        body = json_object_body(raw)
        unknown = sorted(set(body) - {"instructions"})
        if unknown:
            raise ProxyError(
                400,
                f"Unknown field {unknown[0]!r}: only 'instructions' is read.",
                code="unknown_field",
            )
        instructions = checked_instructions(body.get("instructions"), "instructions")
    if not isinstance(store, CompactionAsks):
        raise ProxyError(
            501, "This proxy's store keeps no compaction asks.", code="not_implemented"
        )
    await asyncio.to_thread(store.ask_compaction, namespace, session, instructions)
    return JSONResponse(
        {
            "object": "summarizer.compaction_ask",
            "session": session,
            "status": "pending",
            "instructions": instructions,
            "detail": "The session's next request is compacted, whatever its size.",
        },
        status_code=202,
    )
