"""The lane: a chat request that extends its conversation's previous body is sent upstream as
its bytes arrive, and answered past the app.

An agent's next request is its previous body plus a turn. When a ``POST /v1/chat/completions``
begins with the bytes of a body the fast path remembers (``FastPath.newest``), the lane opens an
upstream request on that guess and streams the body to it while the client is still sending,
checking each byte of the remembered prefix as it comes. Until the body is proven it holds back
the body's last byte (the upstream cannot act on an unfinished body) and any prefix that ends
like a JSON object (so even a server that took a cut-off body for a whole one could not read
one). Once the whole body is in:

- the fast path reads it (``FastPath.parse``: the same request parsing it whole would give);
- if it extends a body whose request was located with no compaction due (``Settled``), by
  valid text messages whose bytes bound their tokens (a token covers at least one byte) within
  the trigger, on the same route and to the same bytes upstream, the rest goes at once and the
  engine locates it while the upstream works (a bound the count contradicts is counted as
  ``sent_over_bound`` and logged: the next request compacts);
- else the engine locates it first, and the rest goes only if no compaction is due, its route
  is the one the guess opened and the bytes due upstream (``ChatContext.outgoing``) are exactly
  the ones streamed.

The answer is relayed with the full path's own code (``Exchange.answer`` and ``relay``):
usage observed, ``x-summarizer-*`` headers, the activity log. Anything else, at any point (no
remembered body, a differing byte, a body not proven, a compaction due, a rewritten body, a
slow client, a client gone mid-body, an overflow answer), hands the request over to the full
path (the app) with the bytes read so far, and drops the upstream connection, its request
unfinished.

Why: moving a 100k-token body through the app and a client library costs more than the
proxy's own work on it, and the upstream cannot start reading until the proxy has read it all.
Here the two transfers overlap and a request costs little more than its new bytes.

The lane is a plain ASGI callable in front of the app (``front.LaneApp``), on ASGI alone: the
server parses HTTP, frames and flow-controls the answers. ``with_lane`` is all the proxy uses.
Inside, bottom up: the body as the pieces read (``arrived``), the early send's proof
(``bound``), the claimed request and its upstream request (``request``), the answer
(``answer``), the claiming and handing over (``front``). Beside it, the proxy's own HTTP/1.1
server (``http_server``, ``http_connection``), which serves the app with the lane in front
for a fraction of what a general ASGI server spends per request (any ASGI server runs the
lane as well: ``tests/test_lane_http.py`` runs it under uvicorn).
"""

from __future__ import annotations

import logging
import urllib.request

from starlette.types import ASGIApp

from .front import LaneApp
from .services import LaneServices

logger = logging.getLogger("context_summarizer.proxy")

__all__ = ["LaneServices", "with_lane"]


def with_lane(services: LaneServices | None, app: ASGIApp) -> ASGIApp:
    """What the server runs for the proxy ``app``: the lane in front of it, or ``app`` itself
    where the lane cannot run: no ``services`` (the fast path is off, or a custom upstream
    transport is set), or an HTTP proxy is configured in the environment (the full path's
    client goes through it; the lane would not)."""
    if services is None:
        return app
    if {k: v for k, v in urllib.request.getproxies().items() if k != "no"}:
        logger.info("the lane is off: an HTTP proxy is configured in the environment")
        return app
    return LaneApp(app, services)
