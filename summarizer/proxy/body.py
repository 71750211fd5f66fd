"""The request body sent upstream: the client's, byte for byte, unless something must change.

Only two things ever change: ``messages`` (when a checkpoint applies) and, on streams,
``stream_options.include_usage`` (so the proxy sees the provider's token count). Every other
field, unknown ones included, reaches the upstream as the client sent it. When only the stream
option is missing, it is spliced into the raw bytes rather than re-serializing the whole body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

_USAGE_OPTION = b'"stream_options":{"include_usage":true},'


def wants_usage(body: Mapping[str, Any]) -> bool:
    """Whether the client itself asked for the final usage chunk of a stream."""
    options = body.get("stream_options")
    return isinstance(options, Mapping) and options.get("include_usage") is True


def outgoing_body(
    raw: bytes,
    body: Mapping[str, Any],
    *,
    messages: Sequence[Mapping[str, Any]] | None,
    stream: bool,
) -> bytes:
    """The bytes to send upstream for a chat request whose parsed form is ``body``.

    ``messages``: the rewritten messages, or None to keep the client's.
    """
    needs_usage = stream and not wants_usage(body)
    if messages is None and not needs_usage:
        return raw
    stripped = raw.lstrip()
    if messages is None and "stream_options" not in body and stripped.startswith(b"{"):
        # The body is an object with at least "model" and "messages", so a key can lead it.
        return b"{" + _USAGE_OPTION + stripped[1:]
    out = dict(body)
    if messages is not None:
        out["messages"] = list(messages)
    if needs_usage:
        options = out.get("stream_options")
        out["stream_options"] = {
            **(options if isinstance(options, Mapping) else {}),
            "include_usage": True,
        }
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
