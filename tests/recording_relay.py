"""A relay between a proxy and the test upstream that keeps the bytes of every request body it
receives: whole ones (relayed) and ones whose client closed before sending all of it (not
relayed, as any HTTP server drops them). What the upstream was sent, byte for byte."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from summarizer.testing import TestUpstream


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
