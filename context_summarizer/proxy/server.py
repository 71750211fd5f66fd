"""Running the proxy: ``serve`` (the ``summarizer serve`` command) and ``ProxyServer``.

Both serve the app, the lane in front of it (``lane.with_lane``), on the proxy's own HTTP/1.1
server (``lane.http_server``). ``ProxyServer`` runs it on a background thread on a free
127.0.0.1 port, for the demo, the tests and the benchmarks: a real server on a real socket,
started and stopped in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.results import CompactionEvent
from ..loaders.tokenizers import load_encoding
from ..stores import Store
from .access import check_exposure, check_not_own_upstream
from .app import create_app
from .banner import banner_lines, print_banner
from .errors import shaped_error
from .lane import with_lane
from .lane.http_cycle import closing_answer
from .lane.http_server import HttpServer, listening_socket, new_event_loop
from .settings import Settings

logger = logging.getLogger("context_summarizer.proxy")

STARTUP_FAILURE = 3
"""``serve``'s exit status when the server cannot start (the port is taken)."""


def check_tokenizers() -> None:
    """Load the default encodings now, so a machine without them fails at start, not later.

    Raises ``TokenizerUnavailable`` (saying how to fix it); the proxy never guesses counts.
    """
    for name in ("o200k_base", "cl100k_base"):
        load_encoding(name)


def tune_gc_for_serving() -> None:
    """Tune the garbage collector of a process that only serves the proxy.

    Each request parses a conversation into thousands of containers, and the caches keep recent
    ones alive, so the default thresholds run full collections over a large heap every few
    requests: about a millisecond per 100k-token request. Objects alive at start (modules,
    encodings, schemas) are frozen out of collection, and young collections run less often.
    Only ``serve`` calls this; a library user's process is left alone.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def serve(settings: Settings, *, upstream_note: str = "", ui_fragment: str = "") -> None:
    """Serve the proxy on ``settings.host:settings.port`` until interrupted; the startup banner
    (``upstream_note`` follows the upstream there) is printed once the port is listening.

    Raises ``ConfigurationError`` before binding when the settings would expose the server-side
    key (``access.check_exposure``) or when the upstream is this proxy's own address. Exits with
    ``STARTUP_FAILURE`` after one error line, and no banner, when the port cannot be bound.
    """
    from .logs import configure_logging

    configure_logging(settings.log_format, settings.log_level)
    check_exposure(settings)
    check_not_own_upstream(settings, settings.port)
    check_tokenizers()
    sock = _listen(settings)
    try:
        app = create_app(settings)
    except BaseException:
        sock.close()
        raise
    lines = banner_lines(settings, upstream_note=upstream_note, ui_fragment=ui_fragment)
    print_banner(settings, lines)
    tune_gc_for_serving()
    server = HttpServer(
        with_lane(app.state.proxy.lane, app),
        idle_timeout=settings.idle_connection_timeout,
        header_timeout=settings.body_read_timeout,
        access_log=True,
        refusal=refusal,
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, server.stop)
        logger.info("serving on http://%s:%d", _host_in_url(settings.host), settings.port)
        await server.serve([sock], grace=30)

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    except RuntimeError as exc:
        logger.error("%s", exc)
        sys.exit(STARTUP_FAILURE)
    finally:
        sock.close()
        loop.close()


def _listen(settings: Settings) -> socket.socket:
    """The listening socket of ``settings.host:settings.port``; when it cannot be bound, one
    error line saying why and what to do, and exit ``STARTUP_FAILURE``."""
    try:
        return listening_socket(settings.host, settings.port)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        hint = ""
        if exc.errno == errno.EADDRINUSE:
            hint = " (another process is listening there: stop it, or pick another --port)"
        logger.error("cannot listen on %s:%d: %s%s", settings.host, settings.port, reason, hint)
        sys.exit(STARTUP_FAILURE)


def refusal(path: str, status: int, message: str) -> bytes:
    """The answers the HTTP server writes on its own (a head it cannot parse, too large or too
    slow; an app that failed before answering): JSON in the shape of ``path``'s API."""
    body = json.dumps(shaped_error(path, status, message)).encode()
    return closing_answer(status, b"application/json", body)


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class ProxyServer:
    """The proxy on a background thread: ``with ProxyServer(settings) as proxy: proxy.base_url``.

    ``settings.host``/``port`` are used as given (port 0: a free one).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        access_log: bool = False,
    ) -> None:
        self.settings = settings
        self.app = create_app(settings, store=store, on_compaction=on_compaction)
        self._access_log = access_log
        self._server: HttpServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = 0

    def start(self, timeout: float = 20.0) -> ProxyServer:
        """Bind, start serving and wait until the server accepts connections."""
        if self._server is not None:
            return self
        check_exposure(self.settings)
        check_tokenizers()
        sock = listening_socket(self.settings.host, self.settings.port)
        try:
            check_not_own_upstream(self.settings, int(sock.getsockname()[1]))
        except BaseException:
            sock.close()
            raise
        self._socket = sock
        self.port = int(sock.getsockname()[1])
        loop = self._loop = new_event_loop()
        server = self._server = HttpServer(
            with_lane(self.app.state.proxy.lane, self.app),
            idle_timeout=self.settings.idle_connection_timeout,
            header_timeout=self.settings.body_read_timeout,
            access_log=self._access_log,
            refusal=refusal,
        )
        errors: list[BaseException] = []

        def run() -> None:
            try:
                loop.run_until_complete(server.serve([sock], grace=5))
            except BaseException as exc:  # reported by start()
                errors.append(exc)
            finally:
                loop.close()

        self._thread = threading.Thread(
            target=run, name=f"summarizer-proxy:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started.is_set():
            if errors or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"the proxy failed to start: {errors[0] if errors else '?'}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("the proxy did not start in time")
            time.sleep(0.01)
        return self

    def flush_writes(self, timeout: float = 10.0) -> bool:
        """Wait until what the proxy writes to the store after its answers (the activity log,
        usage observations for the shared calibration) is written: what a process that starts
        over the store after a graceful stop sees."""
        writer = self.app.state.proxy.activity
        return writer is None or writer.flush(timeout)

    def stop(self) -> None:
        """Stop serving and wait for the thread (idempotent)."""
        server, self._server = self._server, None
        loop, self._loop = self._loop, None
        if server is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed since: the server is stopped
                loop.call_soon_threadsafe(server.stop)
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``: what an OpenAI client's ``base_url`` takes."""
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"http://{host}:{self.port}/v1"

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
