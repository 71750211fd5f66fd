"""Idle connections: the proxy keeps a client's open longer than the client itself would, and
drops its own upstream ones before a uvicorn-served upstream closes them.

When both ends of a keep-alive connection give up on it after the same idle time (httpx and
uvicorn: 5 s), a request sent at that moment meets "Server disconnected without sending a
response". The side that sends must always be the one that gives up first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import openai._constants
import uvicorn

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream

from .conftest import wait_until_serving

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _answered(sock: socket.socket) -> bool:
    """Send one health check on ``sock``; whether a whole 200 answer came back on it."""
    try:
        sock.sendall(HEALTH)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(4096)
            if not chunk:
                return False
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.lower().splitlines()
            if line.startswith(b"content-length:")
        )
        while len(body) < length:
            chunk = sock.recv(4096)
            if not chunk:
                return False
            body += chunk
    except OSError:
        return False
    return received.startswith(b"HTTP/1.1 200")


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    """Whether the other end closes ``sock`` within ``within`` seconds (nothing sent)."""
    sock.settimeout(within)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_an_idle_client_connection_stays_open_for_the_set_time_then_closes() -> None:
    with (
        TestUpstream() as upstream,
        ProxyServer(
            Settings(upstream=upstream.base_url, port=0, db=":memory:", idle_connection_timeout=2)
        ) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock,
    ):
        assert _answered(sock)
        time.sleep(1.0)
        assert _answered(sock), "closed before idle_connection_timeout"
        started = time.monotonic()
        assert _closed_by_peer(sock, within=5.0)
        assert 1.5 <= time.monotonic() - started <= 4.0


def test_serve_reads_the_idle_connection_timeout_from_the_environment(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    with TestUpstream() as upstream:
        env = {**os.environ, "SUMMARIZER_IDLE_CONNECTION_TIMEOUT": "1"}
        command = [
            sys.executable, "-m", "context_summarizer.cli", "serve", "--port", str(port),
            "--upstream", upstream.base_url, "--db", str(tmp_path / "c.db"),
        ]  # fmt: skip
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}")
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                assert _answered(sock)
                started = time.monotonic()
                assert _closed_by_peer(sock, within=5.0)
                assert time.monotonic() - started <= 3.0
        finally:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=30)


def test_the_default_outlasts_the_openai_sdks_idle_expiry() -> None:
    sdk_expiry = openai._constants.DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert sdk_expiry is not None
    assert Settings().idle_connection_timeout > sdk_expiry + 30


def test_the_proxy_drops_idle_upstream_connections_before_uvicorn_would() -> None:
    uvicorn_keep_alive = uvicorn.Config(app=None).timeout_keep_alive
    with (
        TestUpstream() as upstream,
        ProxyServer(Settings(upstream=upstream.base_url, port=0, db=":memory:")) as proxy,
        httpx2.Client(base_url=proxy.base_url, timeout=30) as client,
    ):

        def ask() -> None:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
            client.post("/chat/completions", json=body).raise_for_status()

        ask()
        time.sleep(0.5)
        ask()
        assert upstream.connections_opened == 1, "a connection idle for 0.5 s was not reused"
        time.sleep(uvicorn_keep_alive - 0.7)
        ask()
        assert upstream.connections_opened == 2, (
            f"a connection idle for {uvicorn_keep_alive - 0.7} s was reused: a uvicorn upstream "
            "may be closing it at that very moment"
        )
