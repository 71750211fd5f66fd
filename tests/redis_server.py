"""A real ``redis-server`` (Debian's package) on a free 127.0.0.1 port, for the Redis store's
tests: started in a temporary folder, stopped (and restartable on the same folder and port).

Without ``/usr/bin/redis-server`` the tests that need it skip, unless ``CI=true``: CI must run
them, so there a missing server fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REDIS_SERVER = "/usr/bin/redis-server"


def redis_server_path() -> str:
    """The redis-server binary; skip the test without one (fail it under ``CI=true``)."""
    found = REDIS_SERVER if os.path.exists(REDIS_SERVER) else shutil.which("redis-server")
    if found is None:
        reason = f"{REDIS_SERVER} is not installed (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process on 127.0.0.1 serving from ``folder``.

    ``durable``: append-only file on, fsynced on every write (what the fleet runs); otherwise
    nothing is persisted (fast).
    """

    def __init__(self, folder: Path, *, durable: bool = False, port: int | None = None) -> None:
        self.binary = redis_server_path()
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.durable = durable
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING."""
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.durable
            else ["--appendonly", "no"]
        )
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--save",
                "",
                *persistence,
                "--logfile",
                str(self.folder / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not self._answers():
            if self.process.poll() is not None:
                log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited: {log}")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM: a clean shutdown) and wait for it to exit."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def flush(self) -> None:
        """Delete every key (between tests sharing the server)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            assert sock.recv(64).startswith(b"+OK")
