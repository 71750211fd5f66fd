"""Which headers cross the proxy, and the namespace a credential maps to.

A credential is never stored or logged: only ``credential_namespace`` (a keyed SHA-256 of it)
leaves this module, and it scopes every stored checkpoint.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from .errors import ProxyError

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
"""RFC 9110 §7.6.1 connection-specific headers, never forwarded."""

_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
_NOT_RELAYED = _NOT_FORWARDED | {"date"}
"""The server the proxy runs on dates every answer itself: the upstream's ``Date`` would be a
second one."""
CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key", "x-goog-api-key")
"""Where OpenAI, Azure OpenAI, Anthropic-style and Gemini clients put their key."""
SESSION_HEADER = "x-summarizer-session"
SESSION_NAME_MAX = 128
"""The longest session name ``X-Summarizer-Session`` may carry."""
_SESSION_NAME = re.compile(rf"[A-Za-z0-9._:@/-]{{1,{SESSION_NAME_MAX}}}")
ANONYMOUS = "anonymous"


def _connection_scoped(pairs: list[tuple[str, str]]) -> set[str]:
    """The headers a ``Connection`` header names: scoped to this hop too (RFC 9110 §7.6.1)."""
    return {
        token.strip().lower()
        for name, value in pairs
        if name == "connection"
        for token in value.split(",")
    }


def request_headers(
    headers: Iterable[tuple[str, str]],
    *,
    upstream_api_key: str | None = None,
    drop: Iterable[str] = (),
    via: str | None = None,
    key_header: str = "authorization",
) -> list[tuple[str, str]]:
    """The client's headers to send upstream.

    Hop-by-hop headers (and those the ``Connection`` header names), ``Host``, ``Content-Length``
    and our own ``x-summarizer-*`` are dropped. With ``upstream_api_key`` the client's credential
    headers are replaced by ``Authorization: Bearer <key>`` (or the key as ``key_header``, e.g.
    Anthropic's ``x-api-key``, Gemini's ``x-goog-api-key``). ``via`` (this proxy's hop, e.g.
    ``1.1 summarizer-<id>``) is appended to the client's ``Via`` as one header.
    """
    pairs = [(name.lower(), value) for name, value in headers]
    skip = _NOT_FORWARDED | _connection_scoped(pairs) | {d.lower() for d in drop}
    if upstream_api_key is not None:
        skip |= set(CREDENTIAL_HEADERS)
    if via is not None:
        skip |= {"via"}
    out = [
        (name, value)
        for name, value in pairs
        if name not in skip and not name.startswith("x-summarizer-")
    ]
    if via is not None:
        hops = [value.strip() for name, value in pairs if name == "via" and value.strip()]
        out.append(("via", ", ".join([*hops, via])))
    if upstream_api_key is not None:
        bearer = key_header == "authorization"
        out.append((key_header, f"Bearer {upstream_api_key}" if bearer else upstream_api_key))
    return out


def via_names(values: Iterable[str]) -> set[str]:
    """The ``received-by`` names of ``Via`` header values (``1.1 name, 1.0 other`` -> names)."""
    names = set()
    for value in values:
        for hop in value.split(","):
            parts = hop.split()
            if len(parts) >= 2:
                names.add(parts[1].lower())
    return names


def response_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's response headers to relay (hop-by-hop, length and date dropped)."""
    pairs = [(name.lower(), value) for name, value in headers]
    skip = _NOT_RELAYED | _connection_scoped(pairs)
    return [(name, value) for name, value in pairs if name not in skip]


def decoded_response_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``response_headers`` for a body relayed as read, decoded: ``Content-Encoding`` dropped
    too."""
    return {k: v for k, v in response_headers(headers) if k != "content-encoding"}


def credential(headers: Mapping[str, str]) -> str | None:
    """The client's credential: the token of ``Authorization: Bearer TOKEN``, else the value of
    ``api-key``, else of ``x-api-key``, else of ``x-goog-api-key`` (Gemini's); None without one.
    An ``Authorization`` header of any other form is no credential (``check_authorization``
    refuses the request)."""
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name)
        if not value:
            continue
        if name != "authorization":
            return value.strip()
        token = _bearer_token(value)
        if token is not None:
            return token
    return None


def _bearer_token(value: str) -> str | None:
    """The token of an ``Authorization`` value ``Bearer TOKEN`` (any case), or None."""
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def check_authorization(headers: Mapping[str, str]) -> None:
    """``ProxyError`` (a 401) for an ``Authorization`` header that is not ``Bearer TOKEN`` (a
    bare key, ``Basic ...``, ``Bearer`` alone); the value is never quoted back.

    Such a request is refused rather than served keyless: served, it would land in the
    namespace every keyless client shares, while its sender believes it has its own.
    """
    value = headers.get("authorization")
    if not value or _bearer_token(value) is not None:
        return
    raise ProxyError(
        401,
        "The Authorization header must be 'Bearer YOUR_KEY'. This summarizer proxy takes a key "
        "only as Authorization: Bearer, api-key, x-api-key or x-goog-api-key.",
        code="invalid_api_key",
    )


def credential_namespace(secret: str | None) -> str:
    """The namespace of a credential: a keyed hash, so checkpoints never hold the key itself."""
    if not secret:
        return ANONYMOUS
    digest = hashlib.sha256(b"summarizer-namespace\x00" + secret.encode()).hexdigest()
    return "key-" + digest[:32]


def check_session_header(headers: Mapping[str, str]) -> None:
    """``ProxyError`` (a 400) for an ``X-Summarizer-Session`` that is not a valid session name
    (``check_session_name``); an empty header counts as none."""
    value = headers.get(SESSION_HEADER)
    if value:
        check_session_name(value, "The X-Summarizer-Session header", param=SESSION_HEADER)


def check_session_name(value: str, where: str, *, param: str) -> None:
    """``ProxyError`` (a 400) unless ``value`` is a session name: 1 to ``SESSION_NAME_MAX``
    characters of ``A-Z a-z 0-9 . _ : @ / -``. ``where`` names it in the message; the value
    is never quoted back (it may be long, or hold anything)."""
    if _SESSION_NAME.fullmatch(value):
        return
    bad_length = not value or len(value) > SESSION_NAME_MAX
    raise ProxyError(
        400,
        f"{where} must be 1 to {SESSION_NAME_MAX} characters of "
        "letters, digits and . _ : @ / - (got "
        + (f"{len(value)} characters)." if bad_length else "another character)."),
        param=param,
        code="invalid_value",
    )
