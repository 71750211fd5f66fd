"""A relay between a proxy and the test upstream that keeps the bytes of every request body it
receives: whole ones (relayed) and ones whose client closed before sending all of it (not
relayed, as any HTTP server drops them). What the upstream was sent, byte for byte."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream


class Recorder(ThreadingHTTPServer):
    """A relay in front of the test upstream keeping the bytes of every request body: whole
    ones (relayed) and ones whose client closed before sending all of it (not relayed)."""

    daemon_threads = True

    def __init__(self, upstream: TestUpstream) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream_port = upstream.port
        self.whole: list[bytes] = []
        self.cut_off: list[bytes] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def do_POST(self) -> None:
        length = int(self.headers["content-length"])
        body = b""
        while len(body) < length:
            piece = self.rfile.read1(length - len(body))
            if not piece:
                self.server.cut_off.append(body)
                self.close_connection = True
                return
            body += piece
        self.server.whole.append(body)
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        try:
            upstream.request("POST", self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            content = answer.read()
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # relayed as it came: a dropped connection
            return
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("content-length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)
        upstream.close()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def recorded_proxy(
    upstream: TestUpstream, folder: Path, *, fast_path: bool
) -> Iterator[tuple[ProxyServer, Recorder]]:
    """A proxy (a 3,000-token window, so that conversations compact) in front of a recorder in
    front of ``upstream``, with the fast path (and the lane) on or off."""
    recorder = Recorder(upstream)
    settings = Settings(
        upstream=recorder.base_url,
        port=0,
        db=folder / "checkpoints.db",
        context_window=3_000,
        keep_recent_tokens=300,
        fast_path=fast_path,
    )
    proxy = ProxyServer(settings).start()
    try:
        yield proxy, recorder
    finally:
        proxy.stop()
        recorder.shutdown()
        recorder.server_close()
