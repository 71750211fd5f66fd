"""Servers the benchmarks run in their own processes, as users run them."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx2

SERVER_IDLE_SECONDS = 65
"""How long both proxies keep an idle client connection (``summarizer serve``'s default)."""
CLIENT_IDLE_SECONDS = 30.0
"""How long the benchmark's clients keep one: shorter than every server's, so that no request
is sent on a connection its server is closing ("Server disconnected without sending a
response"), however long ``wait_until_idle`` waited before a burst."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_ready(
    process: subprocess.Popen[bytes], url: str, *, name: str, timeout: float
) -> None:
    """Poll ``url`` until it answers 200; raise if ``process`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx2.get(url, timeout=5).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        if process.poll() is not None:
            raise RuntimeError(
                f"{name} exited with status {process.returncode} before it was ready"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} was not ready after {timeout:.0f} s")
        time.sleep(0.05)


@contextmanager
def running(
    command: Sequence[str],
    *,
    ready_url: str,
    name: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    log: Path | None = None,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` (in ``cwd`` when given) until the block ends; yields once ``ready_url``
    answers 200.

    Its output goes to ``log`` when given, else to this process's.
    """
    with contextlib.ExitStack() as stack:
        output = stack.enter_context(log.open("wb")) if log is not None else None
        yield stack.enter_context(_process(command, ready_url, name, env, timeout, output, cwd))


@contextmanager
def _process(
    command: Sequence[str],
    ready_url: str,
    name: str,
    env: Mapping[str, str] | None,
    timeout: float,
    output: IO[bytes] | None,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        list(command), env={**os.environ, **(env or {})}, stdout=output, stderr=output, cwd=cwd
    )
    try:
        wait_until_ready(process, ready_url, name=name, timeout=timeout)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def serve_process(
    upstream: str,
    *,
    context_window: int,
    db: Path | None = None,
    extra: Sequence[str] = (),
    tree: Path | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``summarizer serve`` in a subprocess on a free port; yields its ``/v1`` URL and process.

    The checkpoint store is ``db`` when given, else a SQLite file in a temporary folder. The
    code is this checkout's, or the source tree ``tree``'s (an earlier commit's, run in this
    environment: ``benchmarks.checkout``).
    """
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        command = [
            sys.executable, "-m", "context_summarizer.cli", "serve",
            "--upstream", upstream, "--port", str(port),
            "--db", str(db or Path(folder) / "checkpoints.db"),
            "--context-window", str(context_window), "--log-level", "warning", *extra,
        ]  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        env = None if tree is None else {"PYTHONPATH": str(tree)}
        name = "summarizer serve" if tree is None else f"summarizer serve from {tree}"
        with running(command, ready_url=f"{base}/healthz", name=name, env=env, cwd=tree) as process:
            yield f"{base}/v1", process


@contextmanager
def upstream_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test upstream (``benchmarks.upstream``) in its own process; yields its ``/v1`` URL
    and the process."""
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.upstream", "--port", str(port)]
    base = f"http://127.0.0.1:{port}/v1"
    with running(command, ready_url=f"{base}/models", name="test upstream") as process:
        yield base, process


@contextmanager
def passthrough_process(upstream: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The receive-and-forward floor (``benchmarks.passthrough``) in front of ``upstream``, in
    its own process; yields its ``/v1`` URL and the process."""
    with _floor_process("benchmarks.passthrough", upstream, "/healthz", "pass-through floor") as it:
        yield it


@contextmanager
def relay_process(upstream: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The bytes floor (``benchmarks.relay``, a TCP relay) in front of ``upstream``, in its own
    process; yields its ``/v1`` URL and the process."""
    with _floor_process("benchmarks.relay", upstream, "/v1/models", "relay floor") as it:
        yield it


@contextmanager
def _floor_process(
    module: str, upstream: str, ready_path: str, name: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    command = [sys.executable, "-m", module, "--upstream", upstream, "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with running(command, ready_url=f"{base}{ready_path}", name=name) as process:
        yield f"{base}/v1", process


def proc_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field (``VmRSS``, ``VmHWM``...), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (Linux ``/proc``), in bytes."""
    return proc_kib(pid, "VmRSS") * 1024


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(
    pids: Sequence[int], *, share: float = 0.05, window: float = 0.25, timeout: float = 20
) -> None:
    """Wait until every process in ``pids`` uses under ``share`` of a core over ``window``
    seconds (at most ``timeout``): a server can go on working after it answers, and that work
    must not be billed to the next measurement."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(window)
        used = [cpu_seconds(pid) - start for pid, start in zip(pids, before, strict=True)]
        if max(used) <= share * window:
            return
