"""A streamed answer on the lane (``context_summarizer.proxy.lane.answer``) reaches the client as
the full path sends it, through a stream broken off, one that stalls past the read timeout, a
client too slow to keep up and a client that leaves, and the lane serves the next request
after each.

Over real HTTP: a proxy with the lane and one without, in front of one test upstream.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Fault, Reply, TestUpstream, summary_responder

from .test_lane import answer_text, metric

MODEL = "gpt-4o-mini"
HEADERS = {"authorization": "Bearer sk-lane-stream", "content-type": "application/json"}


@dataclass
class Sides:
    upstream: TestUpstream
    lane: ProxyServer
    full: ProxyServer


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sides]:
    with TestUpstream(responder=summary_responder) as upstream, ExitStack() as stack:
        proxies = []
        for fast in (True, False):
            folder = tmp_path_factory.mktemp(f"lane-stream-{fast}")
            settings = Settings(
                upstream=upstream.base_url,
                port=0,
                db=folder / "checkpoints.db",
                fast_path=fast,
                upstream_timeout=1.0,
                context_window=4_000_000,
            )
            proxy = ProxyServer(settings).start()
            stack.callback(proxy.stop)
            proxies.append(proxy)
        yield Sides(upstream, *proxies)


def bodies(session: str, turns: int, max_tokens: int = 16) -> list[bytes]:
    """An agent's successive streamed bodies: each the previous plus an answer and a reply."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": f"Fix the invoices of {session}."},
    ]
    out = []
    for turn in range(turns):
        body = {
            "messages": list(messages),
            "model": MODEL,
            "max_tokens": max_tokens,
            "stream": True,
        }
        out.append(json.dumps(body, separators=(",", ":")).encode())
        messages.append({"role": "assistant", "content": f"step {turn} done"})
        messages.append({"role": "user", "content": f"go on {turn}"})
    return out


def taken(proxy: ProxyServer) -> float:
    """Requests the lane answered itself."""
    return metric(proxy, "summarizer_lane_requests_total", "taken")


def post(proxy: ProxyServer, raw: bytes, session: str) -> httpx2.Response:
    headers = {**HEADERS, "x-summarizer-session": session}
    with httpx2.Client(timeout=60) as client:
        return client.post(f"{proxy.base_url}/chat/completions", content=raw, headers=headers)


def events(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON payloads of a streamed answer's events."""
    assert response.headers["content-type"].startswith("text/event-stream")
    return [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")
    ]


def streamed_text(response: httpx2.Response) -> str:
    """The assistant's text of an answer that must be a stream."""
    assert response.headers["content-type"].startswith("text/event-stream")
    return answer_text(response)


def same_events(lane: httpx2.Response, full: httpx2.Response) -> bool:
    """Whether two streamed answers carry the same events (each upstream answer has its own
    ``id`` and ``created``)."""

    def kept(response: httpx2.Response) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in payload.items() if k not in ("id", "created")}
            for payload in events(response)
        ]

    return kept(lane) == kept(full)


def warm(sides: Sides, session: str, turns: int, max_tokens: int = 16) -> list[bytes]:
    """Send all but the last of a session's bodies to both proxies; the last is returned with
    the others, for the lane to take."""
    sent = bodies(session, turns, max_tokens)
    for raw in sent[:-1]:
        for proxy in (sides.lane, sides.full):
            assert post(proxy, raw, session).status_code == 200
    return sent


def both(sides: Sides, raw: bytes, session: str, fault: Fault | Reply) -> list[httpx2.Response]:
    """``raw`` to each proxy, the upstream set to answer it with ``fault`` each time."""
    replies = []
    for proxy in (sides.lane, sides.full):
        if isinstance(fault, Fault):
            sides.upstream.inject(fault)
        else:
            sides.upstream.enqueue(fault)
        replies.append(post(proxy, raw, session))
    return replies


def test_a_stream_broken_off_on_the_lane_ends_as_the_full_paths_does(sides: Sides) -> None:
    sent = warm(sides, "broken", 3)
    before = taken(sides.lane)
    lane, full = both(sides, sent[-1], "broken", Fault(kind="reset", events=2, match="agent"))
    assert taken(sides.lane) == before + 1
    assert lane.status_code == full.status_code == 200
    assert same_events(lane, full)
    assert events(lane)[-1]["error"]["code"] == "stream_interrupted"
    assert len(events(lane)) == 3  # the two events sent, then the error
    # The broken connection is not reused: the next request is answered whole.
    again = post(sides.lane, sent[-1], "broken")
    assert streamed_text(again) == streamed_text(post(sides.full, sent[-1], "broken"))
    assert streamed_text(again)


def test_a_stream_that_stalls_on_the_lane_times_out_as_the_full_paths_does(sides: Sides) -> None:
    sent = warm(sides, "stall", 3)
    before = taken(sides.lane)
    stalls = Reply(content="one two three four", chunk_delay=1.6)  # the read timeout is 1 s
    lane, full = both(sides, sent[-1], "stall", stalls)
    assert taken(sides.lane) == before + 1
    assert same_events(lane, full)
    assert events(lane)[-1]["error"]["code"] == "stream_interrupted"
    assert "ReadTimeout" in events(lane)[-1]["error"]["message"]
    time.sleep(1.6 * 4)  # the upstream's handler gives up on its closed connection
    assert streamed_text(post(sides.lane, sent[-1], "stall"))


def test_a_client_too_slow_for_a_large_stream_gets_all_of_it_on_the_lane(sides: Sides) -> None:
    sent = warm(sides, "slow", 3, max_tokens=800_000)
    before = taken(sides.lane)
    text = " word" * 600_000  # 3 MB, in four events
    sides.upstream.enqueue(Reply(content=text))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"authorization: {HEADERS['authorization']}\r\ncontent-type: application/json\r\n"
        f"x-summarizer-session: slow\r\ncontent-length: {len(sent[-1])}\r\n\r\n"
    ).encode()
    port = int(sides.lane.base_url.rsplit(":", 1)[1].split("/")[0])
    received = bytearray()
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", port))
        client.sendall(head + sent[-1])
        client.settimeout(30)
        while not received.endswith(b"0\r\n\r\n"):
            piece = client.recv(65536)
            assert piece, "the proxy closed the connection mid-stream"
            received += piece
            if len(received) < 2_000_000:
                time.sleep(0.002)  # slower than the proxy can write: it must wait for us
    answer = httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=_unchunked(bytes(received.split(b"\r\n\r\n", 1)[1])),
    )
    assert streamed_text(answer) == text
    assert taken(sides.lane) == before + 1
    # The connection went back to the pool reading again: the next request is answered.
    assert streamed_text(post(sides.lane, sent[-1], "slow"))
    assert taken(sides.lane) == before + 2


def _unchunked(body: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, body = body.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return bytes(out)
        out += body[:size]
        body = body[size + 2 :]


def test_a_client_that_leaves_mid_stream_leaves_the_lane_serving(sides: Sides) -> None:
    sent = warm(sides, "leaves", 3)
    before = taken(sides.lane)
    sides.upstream.enqueue(Reply(content="one two three four", chunk_delay=0.3))
    headers = {**HEADERS, "x-summarizer-session": "leaves"}
    with (
        httpx2.Client(timeout=60) as client,
        client.stream(
            "POST", f"{sides.lane.base_url}/chat/completions", content=sent[-1], headers=headers
        ) as reply,
    ):
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                break  # and close the connection with the stream unfinished
    time.sleep(1.5)  # the upstream's handler finishes on its side
    after = post(sides.lane, sent[-1], "leaves")
    assert streamed_text(after)
    assert taken(sides.lane) >= before + 1
