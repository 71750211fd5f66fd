"""Injected faults at work: the answer a request gets for the :class:`Fault` it drew.

A fault that replaces the answer (``"drop"``, ``"body"``, ``"status"``, ``"rate_limit"``) is
answered here; the others (``"delay"``, ``"bad_usage"``, ``"reset"``) only wait here, and the
endpoint alters its normal answer for them.
"""

from __future__ import annotations

import time
from typing import Any

from .faults import (
    Fault,
    anthropic_fault_body,
    default_fault_body,
    google_fault_body,
    rate_limit_body,
    retry_headers,
)
from .transport import _Dropped, _Exchange


def answer_fault(
    handler: _Exchange, fault: Fault, body: Any, *, stream: bool = False, api: str | None = None
) -> bool:
    """Apply ``fault``'s delay, and answer for it unless it alters a normal answer.

    ``api="messages"``: an error answer is Anthropic's (its body, and a ``request-id`` header);
    ``api="gemini"``: Google's.
    """
    api = api or handler._api
    time.sleep(max(0.0, fault.seconds))
    headers: dict[str, str] = {}
    request_id = None
    if api == "messages":
        request_id = handler.upstream._next_id("req_test")
        headers["request-id"] = request_id
    if fault.kind == "drop":
        handler._record(body, None, fault="drop", stream=stream, api=api)
        raise _Dropped
    if fault.kind == "body":
        handler._record(body, fault.answer_status(), fault="body", stream=stream, api=api)
        handler._send_bytes(
            fault.answer_status(), fault.content, fault.content_type, headers=headers
        )
        return True
    if fault.kind in ("status", "rate_limit"):
        status = fault.answer_status()
        payload = fault.body
        if payload is None and api == "messages":
            payload = anthropic_fault_body(status, request_id)
        elif payload is None and api == "gemini":
            payload = google_fault_body(status)
        elif payload is None:
            payload = (
                rate_limit_body(str(body.get("model")), fault.retry_after)
                if fault.kind == "rate_limit"
                else default_fault_body(status)
            )
        handler._record(body, status, fault=fault.kind, stream=stream, api=api)
        handler._send_json(status, payload, {**retry_headers(fault.retry_after), **headers})
        return True
    return False
