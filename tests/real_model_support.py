"""What the real-model tests share: a recording relay in front of llama.cpp, its log read back,
and a scripted tool-using session driven through any OpenAI client.

The relay is a plain HTTP forwarder on 127.0.0.1: every request the proxy or the wrapped client
sends to the model passes through it unchanged and is recorded (body, status, time), so a test
sees exactly what reached the model. A summary request is forwarded streamed and answered whole:
its time to first token is measured, to compare with a cold control.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2

from context_summarizer.testing.responders import is_summary_request
from context_summarizer.testing.scenario import CodingSession


@dataclass
class Relayed:
    """One request that went through the relay."""

    path: str
    body: dict[str, Any]
    status: int
    seconds: float
    answer: dict[str, Any] | None
    first_token_s: float | None = None
    """For a summary request: seconds until the model's first token."""

    @property
    def summary(self) -> bool:
        """Whether this was a summary request (``tool_choice`` "none", instruction last)."""
        return is_summary_request(self.body)


def first_token(url: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """POST ``body`` to ``url`` streamed: seconds to the first token, and the answer put back
    together as the chat completion a non-streamed request gets (``usage`` from the last chunk
    when the server sends one)."""
    started = time.monotonic()
    seen: float | None = None
    text: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] | None = None
    last: dict[str, Any] = {}
    streamed = {**body, "stream": True}
    with httpx2.stream("POST", url, json=streamed, timeout=1_800) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            last = chunk
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    seen = seen if seen is not None else time.monotonic() - started
                    text.append(piece)
                finish = choice.get("finish_reason") or finish
    answer = {
        "id": last.get("id", "chatcmpl-relay"),
        "object": "chat.completion",
        "created": last.get("created", int(time.time())),
        "model": last.get("model", body.get("model")),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(text)},
                "finish_reason": finish or "stop",
            }
        ],
    }
    if usage is not None:
        answer["usage"] = usage
    return (seen if seen is not None else time.monotonic() - started), answer


@dataclass
class RecordingRelay:
    """Forwards ``/v1/*`` to ``target`` (llama.cpp's base URL) and records every exchange.

    A summary request is forwarded streamed (and answered whole, as it was asked), so its time
    to first token is measured where the model produced it.
    """

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
                response = httpx2.get(self._url(), timeout=60)
                self._answer(response.status_code, response.content)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if len(raw) < length:
                    # A body the proxy's lane streamed on a guess and gave up unfinished: it
                    # goes again whole, and no upstream acts on this one.
                    self.close_connection = True
                    return
                body = json.loads(raw)
                started = time.monotonic()
                entry = Relayed(self.path, body, 0, 0.0, None)
                if entry.summary and not body.get("stream"):
                    entry.first_token_s, entry.answer = first_token(self._url(), body)
                    entry.status, content = 200, json.dumps(entry.answer).encode()
                else:
                    response = httpx2.post(
                        self._url(),
                        content=raw,
                        headers={"content-type": "application/json"},
                        timeout=1_800,
                    )
                    entry.status, content = response.status_code, response.content
                    try:
                        entry.answer = response.json()
                    except ValueError:
                        entry.answer = None
                entry.seconds = time.monotonic() - started
                relay.log.append(entry)
                self._answer(entry.status, content)

            def _url(self) -> str:
                return relay.target.rstrip("/") + self.path.removeprefix("/v1")

            def _answer(self, status: int, content: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


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
