"""Who may use the proxy, the checks made before it serves, and loops.

- With client keys configured (``--client-key``/``SUMMARIZER_CLIENT_KEYS``), every request but
  ``/healthz``, ``/metrics`` and (with ``--ui``) ``GET /ui`` must carry one of them (401
  ``invalid_api_key`` otherwise), whether or not a server-side key is set. Keys are compared as
  SHA-256 digests, in constant time.
- Every request the proxy forwards carries its hop (``Via: 1.1 summarizer-<random id>``); a
  request arriving with this proxy's own hop came round a loop and gets 508, unforwarded. At
  startup an upstream that is the proxy's own address is refused.
- A request a web page may have made (another origin's, or a body that is not JSON) gets 403,
  so no page open in a browser can spend the server's key (see ``cross_site``).
- Without a credential there is no tenancy (every keyless client shares one namespace): said once
  at startup, and the sessions route answers keyless requests only with ``--sessions-api all``.
- With a server-side key (``SUMMARIZER_UPSTREAM_API_KEY``) and no client keys, whoever reaches
  the port uses that key: the proxy refuses to listen on anything but loopback, and on loopback
  says at startup that any local process can use it.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core.errors import ConfigurationError
from .cross_site import check_content_type, cross_site_refusal, is_cross_site
from .errors import ProxyError, unknown_path
from .headers import check_authorization, credential, credential_namespace, via_names
from .settings import Settings, hash_key

logger = logging.getLogger("context_summarizer.proxy")

OPEN_PATHS = frozenset({"/healthz", "/metrics"})
"""Paths served without a client key."""
UI_PAGE = "/ui"
"""The web page, served without a client key when enabled: it carries no data (its JSON API,
``/ui/api/...``, needs the key like every other path)."""


def key_allowed(digests: Iterable[str], presented: str | None) -> bool:
    """Whether ``presented`` is one of the keys whose digests are ``digests``.

    Every digest is compared, in constant time, so timing says nothing about which one matched
    or how much of it did.
    """
    if not presented:
        return False
    # Always hashed: a client presenting a digest (say, one seen on a command line) must not pass.
    wanted = hash_key(presented).encode()
    matched = False
    for digest in digests:
        matched |= hmac.compare_digest(digest.encode(), wanted)
    return matched


def _addresses(host: str) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The IP addresses ``host`` stands for (none when it cannot be resolved)."""
    try:
        return {ipaddress.ip_address(host.strip("[]").split("%", 1)[0])}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return set()
    out: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for info in infos:
        try:
            out.add(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    return out


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    addresses = _addresses(host)
    return bool(addresses) and all(address.is_loopback for address in addresses)


def server_keys(settings: Settings) -> list[str]:
    """Where the proxy holds a server-side key: ``SUMMARIZER_UPSTREAM_API_KEY`` and each
    ``[[models]]`` entry with an ``api_key_env`` (never the keys themselves)."""
    named = ["SUMMARIZER_UPSTREAM_API_KEY"] if settings.upstream_api_key is not None else []
    named += [f"the key of model {m.name!r}" for m in settings.models if m.api_key is not None]
    return named


def check_exposure(settings: Settings) -> None:
    """Refuse (``ConfigurationError``) a server-side key offered to every host that can connect."""
    keys = server_keys(settings)
    if not keys or settings.client_keys or is_loopback(settings.host):
        return
    raise ConfigurationError(
        f"refusing to listen on {settings.host} with {', '.join(keys)} set and no "
        "client keys: anyone who can reach this port would use the server's key. Say which "
        "clients may use it with --client-key KEY (repeatable) or "
        "SUMMARIZER_CLIENT_KEYS=KEY1,KEY2, or listen on 127.0.0.1"
    )


def upstream_is_self(settings: Settings, port: int, upstream: str | None = None) -> bool:
    """Whether ``upstream`` (by default ``settings.upstream``) is this proxy listening on
    ``port``: the same port, on a loopback, unspecified or this machine's own host."""
    parts = urlsplit(settings.upstream if upstream is None else upstream)
    try:
        upstream_port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    if port == 0 or upstream_port != port:
        return False
    host = (parts.hostname or "").lower()
    own_names = {"localhost", settings.host.lower(), socket.gethostname().lower()}
    if host in own_names:
        return True
    own = _addresses(settings.host) | _addresses(socket.gethostname())
    return any(a.is_loopback or a.is_unspecified or a in own for a in _addresses(host))


def check_not_own_upstream(settings: Settings, port: int) -> None:
    """Refuse (``ConfigurationError``) an upstream (the top-level one, or a ``[[models]]``
    entry's) that is this proxy on ``port`` itself."""
    for index, entry in enumerate(settings.models):
        if entry.upstream is not None and upstream_is_self(settings, port, entry.upstream):
            raise ConfigurationError(
                f"models[{index}].upstream: {entry.upstream} is this proxy itself: it would "
                f"forward every request for {entry.name!r} to itself; point it at the provider",
                problems=((f"models[{index}].upstream", "is this proxy itself"),),
            )
    if not upstream_is_self(settings, port):
        return
    parts = urlsplit(settings.upstream)
    raise ConfigurationError(
        f"the upstream {parts.scheme}://{parts.hostname}:{port} is this proxy itself: it would "
        "forward every request to itself. Point --upstream (or OPENAI_BASE_URL, which serve "
        "falls back to) at the provider, e.g. https://api.openai.com/v1"
    )


def log_startup_notes(settings: Settings) -> None:
    """Say at startup who can use this proxy, and what keyless clients share."""
    keys = server_keys(settings)
    if keys and not settings.client_keys:
        logger.warning(
            "%s set and no client keys are: any local process that can reach %s:%s can use "
            "the server's key (set --client-key or SUMMARIZER_CLIENT_KEYS to require a key)",
            " and ".join(keys) + (" is" if len(keys) == 1 else " are"),
            settings.host,
            settings.port,
        )
    if not settings.client_keys:
        logger.info(
            "clients that send no API key share one namespace (no tenancy without a "
            "credential): each can continue any other keyless client's conversations "
            "(sessions API: %s)",
            settings.sessions_api,
        )


def reader_namespace(request: Request, settings: Settings) -> str:
    """The namespace whose sessions ``request`` may read (``/v1/summarizer/sessions``, ``/ui``);
    ``ProxyError`` refuses it, as ``settings.sessions_api`` says: ``keyed`` (the default)
    refuses a request without a credential (401), ``all`` serves it (keyless clients share one
    namespace), ``off`` answers 404 to everyone, as for a path it does not serve.

    A credential reads only its own namespace, so another tenant's session is the same 404 as a
    missing one.
    """
    mode = settings.sessions_api
    if mode == "off":
        raise unknown_path(request.url.path)
    secret = credential(request.headers)
    if secret is None and mode == "keyed":
        raise ProxyError(
            401,
            "You didn't provide an API key. Sessions belong to the credential that created them, "
            "so reading one needs that credential (the proxy's --sessions-api is 'keyed').",
            code="invalid_api_key",
        )
    return credential_namespace(secret)


class RequestGuard:
    """Plain ASGI middleware answering, before anything is read or forwarded:

    - 508 ``loop_detected`` to a request whose ``Via`` names this proxy (it came round a loop);
    - 403 ``cross_site_request`` to a request a web page of another origin made
      (``cross_site``);
    - 401 ``invalid_api_key`` to an ``Authorization`` header that is not ``Bearer TOKEN``, and,
      with client keys configured, to a request without one of them;
    - 403 ``unsupported_content_type`` to a body that is not JSON (``cross_site``).
    """

    def __init__(self, app: ASGIApp, settings: Settings, hop_name: str) -> None:
        self.app = app
        self.digests = settings.client_keys
        self.hop_name = hop_name.lower()
        self.ui = settings.ui
        self.allowed_origins = settings.allow_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer it with the refusal."""
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            scheme = "https" if scope.get("scheme") == "https" else "http"
            try:
                self.check(headers, scope["path"], scope["method"], scheme=scheme)
            except ProxyError as refusal:
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _is_open(self, path: str, method: str) -> bool:
        if path in OPEN_PATHS:
            return True
        return self.ui and path == UI_PAGE and method in ("GET", "HEAD")

    def check(self, headers: Headers, path: str, method: str, *, scheme: str = "http") -> None:
        """Refuse (``ProxyError``) a request with ``headers`` to ``path`` (over ``scheme``) that
        is not to be served."""
        if self.hop_name in via_names(headers.getlist("via")):
            raise ProxyError(
                508,
                "This request has already passed through this summarizer proxy (its Via header "
                "names it): the proxy's upstream leads back to itself. Point --upstream (or "
                "OPENAI_BASE_URL) at the provider, not at the proxy.",
                type="server_error",
                code="loop_detected",
            )
        if is_cross_site(headers, path, scheme=scheme, allowed=self.allowed_origins):
            raise cross_site_refusal()
        if self._is_open(path, method):
            return
        check_authorization(headers)
        presented = credential(headers)
        if not self.digests or key_allowed(self.digests, presented):
            check_content_type(headers, path)
            return
        problem = "Incorrect API key provided." if presented else "You didn't provide an API key."
        raise ProxyError(
            401,
            f"{problem} This summarizer proxy accepts only the client keys it was started with "
            "(--client-key or SUMMARIZER_CLIENT_KEYS), in an Authorization: Bearer, api-key, "
            "x-api-key or x-goog-api-key header.",
            code="invalid_api_key",
        )
