"""The request body sent upstream: the client's, byte for byte, unless something must change.

Only two things ever change: ``messages`` (when a checkpoint applies) and, on streams,
``stream_options.include_usage`` (so the proxy sees the provider's token count). Every other
field, unknown ones included, reaches the upstream as the client sent it. When only the stream
option is missing, it is spliced into the raw bytes rather than re-serializing the whole body.

Parsing uses orjson (several times faster on large bodies; the proxy parses every request), but
orjson reads integers beyond 64 bits as floats. So whenever a body is re-serialized, its fields
and kept messages are taken from an exact stdlib parse of the client's bytes, never from the
fast parse.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..core.bounded_json import MAX_JSON_DEPTH, NestingTooDeep, deeper_than

_USAGE_OPTION = b'"stream_options":{"include_usage":true},'
__all__ = [
    "MAX_JSON_DEPTH",
    "NestingTooDeep",
    "deeper_than",
    "json_bytes",
    "json_object",
    "kept_lead",
    "outgoing_body",
    "parse_body",
    "parse_body_noting",
    "replaced_body",
    "wants_usage",
]


def json_object(content: bytes, *, exact: bool = False) -> dict[str, Any] | None:
    """``content`` parsed, if it is a JSON object; None if it is anything else, or no JSON, or
    nested past any parser. orjson reads it, or the stdlib where orjson will not (NaN, a lone
    surrogate): the same values, but that orjson reads an integer past 64 bits as a float.
    ``exact``: the stdlib alone, for an object that is written anew."""
    if not exact:
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            pass
        else:
            return data if isinstance(data, dict) else None
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def parse_body(raw: bytes) -> Any:
    """Parse a request body (fast; falls back to the stdlib for what orjson refuses, e.g. NaN
    or a lone surrogate).

    Raises ``NestingTooDeep`` for a body nested deeper than ``MAX_JSON_DEPTH``, and
    ``ValueError`` for invalid JSON.
    """
    return parse_body_noting(raw)[0]


def parse_body_noting(raw: bytes) -> tuple[Any, bool]:
    """``parse_body(raw)``, and whether orjson read it (False: the stdlib fallback did).

    The fast path (``fast_path``) reads a body's new messages with orjson alone, so it only
    builds on bodies orjson read whole: their values are then the same either way.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            value = json.loads(raw)
        except RecursionError:  # orjson stops at 1024 levels, the stdlib near the stack's end
            raise NestingTooDeep from None
        if deeper_than(value, MAX_JSON_DEPTH):
            raise NestingTooDeep from None
        if type(value) is dict or type(value) is list:
            _replace_lone_surrogates(value)
        return value, False
    if deeper_than(value, MAX_JSON_DEPTH):
        raise NestingTooDeep
    return value, True


def _replace_lone_surrogates(value: Any) -> None:
    """Replace, in place, each lone surrogate in the strings of ``value`` with U+FFFD.

    Only what the proxy manages (hashes, counts, summarizes, stores) is changed: what goes
    upstream comes from the client's bytes or from an exact re-parse of them, so the upstream
    still gets ``"\\ud800"`` as sent. Summaries, fact ledgers and checkpoints stay valid UTF-8,
    and tiktoken counts a lone surrogate as U+FFFD anyway. (Object keys are left as they are.)
    """
    stack = [value]
    while stack:
        item = stack.pop()
        pairs: Any = item.items() if type(item) is dict else enumerate(item)
        for key, child in list(pairs):
            if type(child) is str:
                if not child.isascii():
                    try:
                        child.encode("utf-8")
                    except UnicodeEncodeError:
                        item[key] = child.encode("utf-16", "surrogatepass").decode(
                            "utf-16", "replace"
                        )
            elif type(child) is dict or type(child) is list:
                stack.append(child)


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON bytes, whatever it holds (integers past 64 bits, NaN, lone
    surrogates: escaped, as a client itself sends them)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # integers beyond 64 bits, NaN, lone surrogates: the stdlib writes them
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: escaped, as the client itself sent it
            return json.dumps(value, separators=(",", ":")).encode("ascii")


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

    ``messages``: the rewritten messages, or None to keep the client's. Rewritten messages that
    are the client's own objects (from ``body["messages"]``) are sent as the client wrote them.
    """
    needs_usage = stream and not wants_usage(body)
    if messages is None:
        lead = kept_lead(raw, body, stream=stream)
        if lead == (b"", 0):
            return raw
        if lead is not None:
            return lead[0] + raw[lead[1] :]
    exact = json.loads(raw)
    out = dict(exact)
    if messages is not None:
        index = {id(message): i for i, message in enumerate(body.get("messages") or ())}
        originals = exact.get("messages") or []
        out["messages"] = [
            originals[index[id(message)]] if id(message) in index else message
            for message in messages
        ]
    if needs_usage:
        options = out.get("stream_options")
        out["stream_options"] = {
            **(options if isinstance(options, Mapping) else {}),
            "include_usage": True,
        }
    return json_bytes(out)


def kept_lead(raw: bytes, body: Mapping[str, Any], *, stream: bool) -> tuple[bytes, int] | None:
    """How a chat request whose messages are kept goes upstream, as ``(lead, skip)``: its
    bytes are ``lead + raw[skip:]`` (``(b"", 0)``: the client's own bytes; a stream gains
    ``stream_options.include_usage`` at the front, so the proxy sees the usage). None when it
    must be serialized anew (a stream whose ``stream_options`` lacks ``include_usage``)."""
    if not stream or wants_usage(body):
        return b"", 0
    stripped = raw.lstrip()
    if "stream_options" not in body and stripped.startswith(b"{"):
        # The body is an object with at least "model" and "messages", so a key can lead it.
        return b"{" + _USAGE_OPTION, len(raw) - len(stripped) + 1
    return None


def replaced_body(raw: bytes, body: Mapping[str, Any], fields: Mapping[str, Any]) -> bytes:
    """The bytes of the request ``raw`` (parsed as ``body``) with ``fields`` replaced.

    In a replaced list, an item that is the client's own object (``body[key][i]``) is written
    from the exact parse of ``raw``, as the client sent it; every field not replaced likewise.
    """
    exact = json.loads(raw)
    out = dict(exact)
    for key, value in fields.items():
        originals = body.get(key)
        if isinstance(value, list) and isinstance(originals, list):
            index = {id(item): i for i, item in enumerate(originals)}
            exact_items = exact.get(key) or []
            value = [exact_items[index[id(v)]] if id(v) in index else v for v in value]
        out[key] = value
    return json_bytes(out)
