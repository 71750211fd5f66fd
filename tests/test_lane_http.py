"""The lane (``context_summarizer.proxy.lane``) over raw HTTP/1.1 on a real socket: a body arriving
in pieces and departing from the remembered one anywhere, a client slower than the body read
timeout, one gone mid-body or mid-answer, ``Expect: 100-continue``, pipelined requests, bodies
the lane leaves to the app (chunked, a browser's), and another HTTP implementation under it.

A relay in front of the test upstream keeps every request body it receives, whole or cut off:
whatever the lane gives up, the upstream receives the body once, as the client sent it, and
what the lane had streamed of it never reads as JSON.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.app import create_app
from context_summarizer.proxy.lane import with_lane
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Fault, TestUpstream, summary_responder

from .recording_relay import Recorder
from .test_lane import answer_text, metric, parses

MODEL = "gpt-4o-mini"
KEY = "sk-lane-http"
ORIGIN = "http://localhost:3000"
TIMEOUT = 1.0
"""The proxy's body read timeout, in seconds."""


@dataclass
class Rig:
    upstream: TestUpstream
    recorder: Recorder
    proxy: ProxyServer

    def count(self, outcome: str) -> float:
        return metric(self.proxy, "summarizer_lane_requests_total", outcome)

    def requests(self, status: str) -> float:
        text = httpx2.get(self.proxy.base_url.removesuffix("/v1") + "/metrics").text
        for line in text.splitlines():
            if line.startswith(f'summarizer_requests_total{{route="chat",status="{status}"}} '):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with TestUpstream(responder=summary_responder) as upstream:
        recorder = Recorder(upstream)
        settings = Settings(
            upstream=recorder.base_url,
            port=0,
            db=tmp_path_factory.mktemp("lane-http") / "checkpoints.db",
            context_window=4_000_000,
            body_read_timeout=TIMEOUT,
            allow_origins=frozenset({ORIGIN}),
        )
        try:
            with ProxyServer(settings) as proxy:
                yield Rig(upstream, recorder, proxy)
        finally:
            recorder.shutdown()
            recorder.server_close()


def session(name: str, turns: int = 3, size: int = 30_000) -> list[bytes]:
    """An agent's successive bodies, each the previous plus a turn, about ``size`` bytes of
    text per turn (so that a body arrives in many pieces)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful agent. " + "a" * size},
        {"role": "user", "content": f"Fix the invoices of {name}."},
    ]
    out = []
    for turn in range(turns):
        out.append(json.dumps({"messages": messages, "model": MODEL, "max_tokens": 16}).encode())
        messages = [
            *messages,
            {"role": "assistant", "content": f"step {turn} " + "b" * size},
            {"role": "user", "content": f"go on {turn}"},
        ]
    return out


def warm(rig: Rig, name: str, turns: int = 3) -> bytes:
    """Send all but the last body of a session (the lane learns them); the last is returned."""
    bodies = session(name, turns)
    for raw in bodies[:-1]:
        reply = httpx2.post(
            f"{rig.proxy.base_url}/chat/completions",
            content=raw,
            headers=headers(name),
            timeout=60,
        )
        assert reply.status_code == 200
    return bodies[-1]


def headers(name: str) -> dict[str, str]:
    return {
        "authorization": f"Bearer {KEY}",
        "content-type": "application/json",
        "x-summarizer-session": name,
    }


def head(name: str, length: int | None, *extra: str) -> bytes:
    """A chat request's head, with ``Content-Length`` (None: chunked)."""
    lines = ["POST /v1/chat/completions HTTP/1.1", "host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers(name).items()]
    lines.append("transfer-encoding: chunked" if length is None else f"content-length: {length}")
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


def connect(rig: Rig) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", rig.proxy.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def send_in_pieces(sock: socket.socket, raw: bytes, pause: float, pieces: int = 12) -> None:
    size = -(-len(raw) // pieces)
    for start in range(0, len(raw), size):
        sock.sendall(raw[start : start + size])
        time.sleep(pause)


def read_answer(sock: socket.socket, buffer: bytearray) -> httpx2.Response:
    """One whole (``Content-Length``) answer read off ``sock``; what follows stays in
    ``buffer``."""
    while b"\r\n\r\n" not in buffer:
        piece = sock.recv(65536)
        assert piece, "the proxy closed the connection"
        buffer += piece
    top, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    fields = [tuple(part.strip() for part in line.split(":", 1)) for line in lines]
    length = int(dict((k.lower(), v) for k, v in fields)["content-length"])
    while len(rest) < length:
        piece = sock.recv(65536)
        assert piece, "the proxy closed the connection"
        rest += piece
    buffer[:] = rest[length:]
    return httpx2.Response(int(status_line.split()[1]), headers=fields, content=rest[:length])


def sent_as_is(rig: Rig, before: int, raw: bytes) -> None:
    """The upstream received ``raw`` once, whole, since ``before``; and nothing the lane cut
    off reads as JSON."""
    assert rig.recorder.whole[before:] == [raw]
    assert not [cut for cut in rig.recorder.cut_off if parses(cut)]


def departed(raw: bytes, share: float) -> bytes:
    """``raw`` with one letter of its conversation's text changed at about ``share`` of its
    length: the same JSON shape, another conversation from there."""
    at = max(int(len(raw) * share), raw.index(b'"content"') + 10)
    at = min(i for i in (raw.find(b"a", at), raw.find(b"b", at)) if i >= 0)
    return raw[:at] + (b"c" if raw[at : at + 1] == b"a" else b"d") + raw[at + 1 :]


@pytest.mark.parametrize(  # the remembered body is the first 2/3
    ("share", "pieces"), [(0.0, 12), (0.002, 12), (0.3, 12), (0.6, 12), (0.3, 1)]
)
def test_a_body_departing_anywhere_is_handed_over_with_what_was_read(
    rig: Rig, share: float, pieces: int
) -> None:
    name = f"depart-{share}-{pieces}"
    raw = departed(warm(rig, name), share)
    handed, before = rig.count("handed_over"), len(rig.recorder.whole)
    with connect(rig) as sock:
        sock.sendall(head(name, len(raw)))
        send_in_pieces(sock, raw, pause=0.005, pieces=pieces)
        reply = read_answer(sock, bytearray())
    assert reply.status_code == 200 and answer_text(reply)
    assert rig.count("handed_over") == handed + 1
    sent_as_is(rig, before, raw)


def test_a_client_slower_than_the_read_timeout_is_handed_over_and_answered(rig: Rig) -> None:
    raw = warm(rig, "slow")
    handed, taken, before = rig.count("handed_over"), rig.count("taken"), len(rig.recorder.whole)
    with connect(rig) as sock:
        sock.sendall(head("slow", len(raw)))
        send_in_pieces(sock, raw, pause=TIMEOUT * 0.7, pieces=3)  # each within the timeout
        reply = read_answer(sock, bytearray())
    assert reply.status_code == 200 and answer_text(reply)
    assert (rig.count("handed_over"), rig.count("taken")) == (handed + 1, taken)
    sent_as_is(rig, before, raw)


def test_a_client_gone_mid_body_is_handed_over_and_counted_as_499(rig: Rig) -> None:
    raw = warm(rig, "gone")
    handed, gone, before = rig.count("handed_over"), rig.requests("499"), len(rig.recorder.whole)
    with connect(rig) as sock:
        sock.sendall(head("gone", len(raw)) + raw[: len(raw) // 2])
        time.sleep(0.2)
    deadline = time.monotonic() + 5
    while rig.requests("499") == gone and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rig.requests("499") == gone + 1
    assert rig.count("handed_over") == handed + 1
    assert rig.recorder.whole[before:] == []
    assert not [cut for cut in rig.recorder.cut_off if parses(cut)]


def test_a_client_gone_mid_answer_leaves_the_lane_serving(rig: Rig) -> None:
    raw = warm(rig, "leaves")
    taken, answered = rig.count("taken"), rig.requests("200")
    rig.upstream.inject(Fault(kind="delay", seconds=1.0, match="agent"))
    with connect(rig) as sock:
        sock.sendall(head("leaves", len(raw)) + raw)
        time.sleep(0.3)  # the lane waits for the upstream's answer
    time.sleep(1.2)
    assert (rig.count("taken"), rig.requests("200")) == (taken, answered)  # nobody to answer
    with connect(rig) as sock:
        sock.sendall(head("leaves", len(raw)) + raw)
        reply = read_answer(sock, bytearray())
    assert reply.status_code == 200 and answer_text(reply)
    assert rig.count("taken") == taken + 1


def test_expect_100_continue_is_answered_and_the_lane_takes_the_body(rig: Rig) -> None:
    raw = warm(rig, "expect")
    taken = rig.count("taken")
    with connect(rig) as sock:
        sock.sendall(head("expect", len(raw), "expect: 100-continue"))
        interim = bytearray()
        while b"\r\n\r\n" not in interim:
            interim += sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 ")
        sock.sendall(raw)
        rest = interim[interim.index(b"\r\n\r\n") + 4 :]
        reply = read_answer(sock, rest)
    assert reply.status_code == 200 and answer_text(reply)
    assert rig.count("taken") == taken + 1


def test_pipelined_requests_on_the_lane_are_answered_in_order(rig: Rig) -> None:
    bodies = session("pipelined", turns=4)
    warm(rig, "pipelined", turns=3)
    taken = rig.count("taken")
    health = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    with connect(rig) as sock:
        sock.sendall(
            head("pipelined", len(bodies[2])) + bodies[2] + health
            + head("pipelined", len(bodies[3])) + bodies[3]
        )  # fmt: skip
        buffer = bytearray()
        replies = [read_answer(sock, buffer) for _ in range(3)]
    assert [reply.status_code for reply in replies] == [200, 200, 200]
    assert answer_text(replies[0]) and answer_text(replies[2])
    assert replies[1].json() == {"status": "ok"}
    assert rig.count("taken") == taken + 2


def test_a_chunked_body_is_left_to_the_app(rig: Rig) -> None:
    raw = warm(rig, "chunked")
    taken, handed, before = rig.count("taken"), rig.count("handed_over"), len(rig.recorder.whole)
    half = len(raw) // 2
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (raw[:half], raw[half:]))
    with connect(rig) as sock:
        sock.sendall(head("chunked", None) + chunks + b"0\r\n\r\n")
        reply = read_answer(sock, bytearray())
    assert reply.status_code == 200 and answer_text(reply)
    assert (rig.count("taken"), rig.count("handed_over")) == (taken, handed)
    assert [json.loads(body) for body in rig.recorder.whole[before:]] == [json.loads(raw)]


def test_a_browsers_request_is_left_to_the_app_and_gets_its_cors_answer(rig: Rig) -> None:
    raw = warm(rig, "browser")
    taken = rig.count("taken")
    reply = httpx2.post(
        f"{rig.proxy.base_url}/chat/completions",
        content=raw,
        headers={**headers("browser"), "origin": ORIGIN},
        timeout=60,
    )
    assert reply.status_code == 200 and answer_text(reply)
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    assert rig.count("taken") == taken


def test_the_lane_runs_under_another_http_implementation(tmp_path: Path) -> None:
    # Only ASGI: another server (uvicorn, on h11) serves it as the proxy's own does.
    with TestUpstream(responder=summary_responder) as upstream:
        settings = Settings(
            upstream=upstream.base_url, port=0, db=tmp_path / "c.db", context_window=4_000_000
        )
        app = create_app(settings)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            config = uvicorn.Config(
                with_lane(app.state.proxy.lane, app), http="h11", log_config=None, lifespan="on"
            )
            server = uvicorn.Server(config)
            thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
            thread.start()
            try:
                deadline = time.monotonic() + 20
                while not server.started:
                    assert thread.is_alive() and time.monotonic() < deadline, "not serving"
                    time.sleep(0.01)
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                for stream in (False, True):
                    for raw in session(f"h11-{stream}", turns=3, size=2_000):
                        if stream:
                            raw = raw.replace(
                                b'"max_tokens": 16', b'"max_tokens": 16, "stream": true'
                            )
                        reply = httpx2.post(
                            url, content=raw, headers=headers(f"h11-{stream}"), timeout=60
                        )
                        assert reply.status_code == 200 and answer_text(reply)
                text = httpx2.get(f"http://127.0.0.1:{port}/metrics").text
            finally:
                server.should_exit = True
                thread.join(timeout=15)
    assert 'summarizer_lane_requests_total{outcome="taken"} 4.0' in text
