"""Which pass-through paths may go upstream: only those that stay under the upstream's base path.

The client's path is forwarded as it was written (still percent-encoded), so ``%3F`` stays part
of a name and never starts a query. Before that, every segment is decoded and checked: a path
with a ``.`` or ``..`` segment (however encoded), an encoded ``/`` or ``\\``, a backslash, an
empty segment or a control character is refused, because the upstream (or a server in front of
it) may resolve it to a route outside ``/v1``, where the server-side key would be sent too.
"""

from __future__ import annotations

from urllib.parse import quote_from_bytes, unquote

PREFIX = "/v1"

_DECODE_ROUNDS = 3
"""Segments are decoded this many times over, so a double-encoded ``%252e%252e`` is refused
too (some servers decode twice)."""

# What may stay unencoded in a forwarded path: RFC 3986 pchar plus "/" and "%" (escapes are kept
# as the client wrote them). Anything else (non-ASCII bytes, spaces) is percent-encoded.
_SAFE = "/%:@!$&'()*+,;=-._~"


class UnsafePath(ValueError):
    """A pass-through path that could resolve outside the upstream's base path."""


def _decodings(segment: str) -> list[str]:
    """``segment`` and its successive percent-decodings, until nothing changes."""
    out = [segment]
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(out[-1], errors="surrogateescape")
        if decoded == out[-1]:
            break
        out.append(decoded)
    return out


def _check_segment(segment: str) -> None:
    for form in _decodings(segment):
        if "/" in form or "\\" in form:
            raise UnsafePath("it has an encoded '/' or a '\\' in a segment")
        if form.split(";", 1)[0] in (".", ".."):
            raise UnsafePath("it has a '.' or '..' segment")
        if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in form):
            raise UnsafePath("it has a control character")


def upstream_path(raw_path: bytes) -> str:
    """The part of ``raw_path`` after ``/v1``, still encoded, safe to append to the upstream URL.

    ``raw_path`` is the request target's path exactly as received (ASGI ``raw_path``). Raises
    ``UnsafePath`` for anything that could leave the base path.
    """
    path = quote_from_bytes(raw_path, safe=_SAFE)
    if not path.startswith(PREFIX + "/"):
        raise UnsafePath(f"it does not start with {PREFIX}/ as written")
    rest = path[len(PREFIX) :]
    segments = rest.split("/")[1:]
    for index, segment in enumerate(segments):
        if not segment and index != len(segments) - 1:  # a trailing "/" is fine
            raise UnsafePath("it has an empty segment")
        _check_segment(segment)
    return rest
