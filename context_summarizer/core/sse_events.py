"""Server-sent events read and written whole, for the pure codecs that rewrite a stream (the
recall loop's): an event's name and JSON payload, and an event built from them. Pure."""

from __future__ import annotations

import json
from typing import Any


def event_name(event: bytes) -> str | None:
    """The ``event:`` field of an SSE event, or None when it has none."""
    for line in event.splitlines():
        if line.startswith(b"event:"):
            return line[6:].strip().decode("utf-8", "replace")
    return None


def event_payload(event: bytes) -> bytes:
    """The ``data:`` payload of an event (several data lines joined by newlines)."""
    lines = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines)


def event_json(event: bytes) -> dict[str, Any] | None:
    """The ``data:`` payload parsed as a JSON object, or None (no data, ``[DONE]``, not an
    object)."""
    data = event_payload(event)
    if not data.startswith(b"{"):
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def build_event(payload: Any, name: str | None = None) -> bytes:
    """An SSE event carrying ``payload`` as compact JSON, with an ``event:`` line when
    ``name`` is given."""
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return data if name is None else f"event: {name}\n".encode() + data
