"""What the real-model tests share: a recording relay in front of llama.cpp, its log read back,
and a scripted tool-using session driven through any OpenAI client.

The relay is a plain HTTP forwarder on 127.0.0.1: every request the proxy or the wrapped client
sends to the model passes through it unchanged and is recorded (body, status, time), so a test
sees exactly what reached the model. llama-cpp-python prints, per request, how much of the prompt
its KV cache already held and how long the rest took to read ("prompt eval time"): that is the
time to first token, read back here for each recorded request in order.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2

from summarizer.testing.responders import is_summary_request
from summarizer.testing.scenario import CodingSession


@dataclass
class Relayed:
    """One request that went through the relay."""

    path: str
    body: dict[str, Any]
    status: int
    seconds: float
    answer: dict[str, Any] | None

    @property
    def summary(self) -> bool:
        """Whether this was a summary request (``tool_choice`` "none", instruction last)."""
        return is_summary_request(self.body)


@dataclass
class RecordingRelay:
    """Forwards ``/v1/*`` to ``target`` (llama.cpp's base URL) and records every exchange."""

    target: str
    log: list[Relayed] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> RecordingRelay:
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self._forward(self.rfile.read(length))

            def _forward(self, raw: bytes | None) -> None:
                url = relay.target.rstrip("/") + self.path.removeprefix("/v1")
                started = time.monotonic()
                response = httpx2.request(
                    "POST" if raw is not None else "GET",
                    url,
                    content=raw,
                    headers={"content-type": "application/json"},
                    timeout=1_800,
                )
                seconds = time.monotonic() - started
                if raw is not None:
                    try:
                        answer = response.json()
                    except ValueError:
                        answer = None
                    relay.log.append(
                        Relayed(self.path, json.loads(raw), response.status_code, seconds, answer)
                    )
                self.send_response(response.status_code)
                self.send_header("content-type", response.headers.get("content-type", ""))
                self.send_header("content-length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


_GENERATE = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


@dataclass(frozen=True)
class Evaluation:
    """What llama.cpp logged for one request: prompt tokens its cache held, tokens it read, and
    the milliseconds reading them took (the time to first token, less the HTTP hop)."""

    cached: int
    evaluated: int
    prompt_ms: float


def evaluations(log_text: str) -> list[Evaluation]:
    """The ``Evaluation`` of each completed request, in order, from llama.cpp's output.

    A request whose whole prompt was cached logs no ``prefix-match`` line (it reports one token
    evaluated): such blocks are read as fully cached.
    """
    found: list[Evaluation] = []
    pending: tuple[int, int] | None = None
    for line in log_text.splitlines():
        if (match := _GENERATE.search(line)) is not None:
            pending = (int(match.group(1)), int(match.group(2)))
        elif (match := _PROMPT_EVAL.search(line)) is not None:
            cached, _ = pending if pending is not None else (0, 0)
            found.append(Evaluation(cached, int(match.group(2)), float(match.group(1))))
            pending = None
    return found


Send = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Any]
"""Sends one agent request (messages, tools) and returns the SDK's response."""


@dataclass
class SessionRun:
    """What driving a scripted session produced."""

    responses: list[Any] = field(default_factory=list)
    seconds: float = 0.0


def drive_session(session: CodingSession, send: Send, *, turns: int) -> SessionRun:
    """Drive ``turns`` agent turns of ``session``: each request is sent with ``send`` and its
    answer ignored, then the script's own tool call is appended with the tool's output (so the
    conversation is the same whatever the model says).

    The assistant's tool-call messages carry ``content: ""``: llama-cpp-python's server refuses
    ``null`` there with a 500 (a real agent talking to it must do the same).
    """
    messages: list[dict[str, Any]] = [session.system, session.task]
    run = SessionRun()
    started = time.monotonic()
    steps = session.steps
    for turn in range(turns):
        run.responses.append(send(messages, session.tools))
        calls = steps[turn]
        specs = [calls] if isinstance(calls, tuple) else list(calls)  # type: ignore[arg-type]
        tool_calls = [
            {
                "id": f"call_{turn}_{index}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for index, (name, arguments) in enumerate(specs)
        ]
        messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
        for call in tool_calls:
            output = session.execute(turn, call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    run.seconds = time.monotonic() - started
    return run


def agent_requests(log: list[Relayed]) -> Iterator[Relayed]:
    """The agent's requests (not summary requests) in the relay's log."""
    return (entry for entry in log if not entry.summary)
