"""Server-sent events, as relayed by the proxy: split a byte stream into whole events.

Pure: no I/O. Events are passed on byte for byte as soon as they are complete; the only one ever
held back is the usage-only chunk a client did not ask for (``stream_options.include_usage``).
"""

from __future__ import annotations

from typing import Any

from ..core.sse_events import build_event, event_payload
from .body import json_object

_BOUNDARIES = (b"\r\n\r\n", b"\n\n", b"\r\r")


class EventSplitter:
    """Accumulates bytes and returns the complete events (each with its blank-line terminator)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Events completed by ``chunk``, in order."""
        self._buffer += chunk
        events: list[bytes] = []
        while True:
            end = -1
            size = 0
            for boundary in _BOUNDARIES:
                found = self._buffer.find(boundary)
                if found != -1 and (end == -1 or found < end):
                    end, size = found, len(boundary)
            if end == -1:
                return events
            events.append(self._buffer[: end + size])
            self._buffer = self._buffer[end + size :]

    def rest(self) -> bytes:
        """Whatever is left when the stream ends (an unterminated event, if any)."""
        rest, self._buffer = self._buffer, b""
        return rest


event_data = event_payload
"""The ``data:`` payload of an event (several data lines joined by newlines)."""


def event_object(event: bytes) -> dict[str, Any] | None:
    """The ``data:`` payload of an event parsed as a JSON object, or None."""
    return json_object(event_data(event), exact=True)


def usage_chunk(event: bytes) -> dict[str, Any] | None:
    """The chunk an event carries, when it reports a ``usage`` object (read, never written
    anew: ``json_object``'s quick read), else None (cheap for the chunks that have none)."""
    if b'"usage"' not in event or b'"usage":null' in event or b'"usage": null' in event:
        return None
    data = event_data(event)
    if not data.startswith(b"{"):
        return None
    chunk = json_object(data)
    return chunk if chunk is not None and isinstance(chunk.get("usage"), dict) else None


def usage_of(event: bytes) -> dict[str, Any] | None:
    """The ``usage`` object of a chunk event, or None (cheap for the chunks that have none)."""
    chunk = usage_chunk(event)
    return None if chunk is None else chunk["usage"]


def is_usage_only(event: bytes) -> bool:
    """Whether the event is the final usage chunk (``choices: []`` plus ``usage``)."""
    chunk = usage_chunk(event)
    return chunk is not None and not chunk.get("choices")


def comment(text: str) -> bytes:
    """An SSE comment line (ignored by clients; keeps idle connections open)."""
    return f": {text}\n\n".encode()


def data_event(payload: Any) -> bytes:
    """A ``data:`` event carrying ``payload`` as JSON."""
    return build_event(payload)
