"""OpenAI-style error bodies: ``{"error": {"message", "type", "param", "code"}}``.

Messages are written here, never copied from a request's headers, so no credential can leak.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response


def error_payload(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """The error object clients of the OpenAI API expect."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A JSON error response with ``status``."""
    body = json.dumps(error_payload(message, type=type, param=param, code=code))
    return Response(body, status_code=status, media_type="application/json", headers=headers)
