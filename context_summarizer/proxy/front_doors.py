"""The front doors, in one registry: every API the proxy manages, mounted by ``create_app`` and
served by the one endpoint and exchange (``endpoint.serve_managed``, ``exchange.Exchange``).
Adding an API is one module (its request, codec and ``FRONT_DOOR``) and one line here."""

from __future__ import annotations

from . import chat_request, gemini_request, messages_request, responses_trigger
from .front_door import FrontDoor

FRONT_DOORS: tuple[FrontDoor, ...] = (
    chat_request.FRONT_DOOR,
    responses_trigger.FRONT_DOOR,
    messages_request.FRONT_DOOR,
    gemini_request.FRONT_DOOR,
)
