"""The lane (``context_summarizer.proxy.lane``) streams a body upstream as it arrives, and the
upstream never acts on anything but what the full path would have sent.

Over real HTTP, with a relay in front of the test upstream that keeps every request body it
receives, whole or cut off: a proxy with the lane and one without send byte-identical requests
and give the same answers, through compactions, streams and upstream failures; a body that
departs from the remembered one it was streamed against (an edit, a changed field, padding) is
handed over to the full path, and what the lane had streamed of it never reads as JSON.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.app import create_app
from context_summarizer.proxy.lane import with_lane
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Fault, Reply, TestUpstream, summary_responder

from .recording_relay import Recorder, recorded_proxy

MODEL = "gpt-4o-mini"
TRICKY = '"\\]}[{,:' + "\n\t é日本🚀\u2028"


def metric(proxy: ProxyServer, name: str, label: str) -> float:
    """A counter's value for ``outcome=label`` on the proxy's ``/metrics``."""
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    for line in text.splitlines():
        if line.startswith(f'{name}{{outcome="{label}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@dataclass
class Side:
    proxy: ProxyServer
    recorder: Recorder

    def metric(self, name: str, label: str) -> float:
        return metric(self.proxy, name, label)


@dataclass
class Pair:
    upstream: TestUpstream
    lane: Side
    full: Side


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with TestUpstream(responder=summary_responder) as upstream, ExitStack() as stack:
        sides = [
            Side(*stack.enter_context(recorded_proxy(upstream, folder, fast_path=fast)))
            for fast in (True, False)
            for folder in [tmp_path_factory.mktemp(f"lane-{fast}")]
        ]
        yield Pair(upstream, *sides)


def dumps(body: dict[str, Any]) -> bytes:
    """Serialized as the openai SDK does (compact separators, UTF-8 kept)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def post(side: Side, raw: bytes, session: str, key: str = "sk-lane-test") -> httpx2.Response:
    headers = {
        "authorization": f"Bearer {key}",
        "content-type": "application/json",
        "x-summarizer-session": session,
    }
    with httpx2.Client(timeout=60) as client:
        return client.post(f"{side.proxy.base_url}/chat/completions", content=raw, headers=headers)


def answer_text(response: httpx2.Response) -> str:
    """The assistant's text of a whole or streamed answer."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = ""
        for line in response.text.splitlines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    text += choice.get("delta", {}).get("content") or ""
        return text
    return str(response.json()["choices"][0]["message"]["content"])


def usage_events(response: httpx2.Response) -> int:
    """How many events of a streamed answer carry usage (-1: not a stream)."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return -1
    return sum(
        1
        for line in response.text.splitlines()
        if line.startswith("data: {") and json.loads(line[6:]).get("usage")
    )


def send_both(pair: Pair, bodies: list[bytes], session: str) -> None:
    """Each body to both proxies: the same bytes reach the upstream, the same answers return."""
    for raw in bodies:
        replies = []
        for side in (pair.lane, pair.full):
            before = len(side.recorder.whole)
            replies.append((post(side, raw, session), side.recorder.whole[before:]))
        (lane, lane_sent), (full, full_sent) = replies
        assert lane_sent == full_sent  # byte for byte, summary requests included
        assert lane.status_code == full.status_code
        for name in ("x-summarizer-compacted", "x-summarizer-prompt-tokens"):
            assert lane.headers.get(name) == full.headers.get(name), name
        if lane.status_code == 200:
            assert answer_text(lane) == answer_text(full)
            assert usage_events(lane) == usage_events(full)  # dropped unless asked for
        else:
            assert lane.json()["error"]["code"] == full.json()["error"]["code"]


def agent_session(seed: int, turns: int) -> list[bytes]:
    """An agent's successive bodies: each the previous plus an answer and a reply, text full of
    JSON's special characters, some streamed, some asking for usage in the stream."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "Fix the invoices " + TRICKY},
    ]
    bodies = []
    for turn in range(turns):
        body: dict[str, Any] = {"messages": list(messages), "model": MODEL, "max_tokens": 16}
        if turn % 3 == 1:
            body["stream"] = True
        if turn % 6 == 4:
            body["stream_options"] = {"include_usage": True}
        bodies.append(dumps(body))
        words = " ".join(rng.choice(["alpha", "beta", TRICKY, "gamma"]) for _ in range(40))
        messages.append({"role": "assistant", "content": f"step {turn} {words}"})
        messages.append({"role": "user", "content": f"go on {turn}"})
    return bodies


def test_the_lane_takes_an_agents_requests_and_sends_what_the_full_path_sends(pair: Pair) -> None:
    taken = pair.lane.metric("summarizer_lane_requests_total", "taken")
    handed = pair.lane.metric("summarizer_lane_requests_total", "handed_over")
    send_both(pair, agent_session(seed=1, turns=18), "agent")
    # Until the first compaction: after it every request is rewritten, which the lane leaves to
    # the full path.
    assert pair.lane.metric("summarizer_lane_requests_total", "taken") - taken >= 5
    # The requests that compacted went the full way (their summary requests matched too).
    assert pair.lane.metric("summarizer_lane_requests_total", "handed_over") > handed
    assert pair.full.metric("summarizer_lane_requests_total", "taken") == 0
    assert pair.lane.recorder.cut_off == [] or all(
        not parses(cut) for cut in pair.lane.recorder.cut_off
    )


def test_a_request_sent_before_it_is_located_is_located_once_its_answer_is_in(
    tmp_path: Path,
) -> None:
    # The lane sends a request that extends a settled one before locating it, and takes its
    # locating up while the upstream works. Only a request located and settled lets the next one
    # go early too: each must have been, for every request after the first two to go early.
    settings = Settings(port=0, db=tmp_path / "checkpoints.db", context_window=1_000_000)
    bodies = [  # all streamed: a request that changes "stream" goes the full way
        dumps({**json.loads(raw), "stream": True, "stream_options": {"include_usage": True}})
        for raw in agent_session(seed=17, turns=10)
    ]
    with TestUpstream(responder=summary_responder) as upstream:
        proxy = ProxyServer(settings.model_copy(update={"upstream": upstream.base_url})).start()
        try:
            headers = {
                "authorization": "Bearer sk-lane-test",
                "content-type": "application/json",
                "x-summarizer-session": "early",
            }
            url = f"{proxy.base_url}/chat/completions"
            with httpx2.Client(timeout=60) as client:
                replies = [client.post(url, content=raw, headers=headers) for raw in bodies]
            early = metric(proxy, "summarizer_lane_requests_total", "sent_early")
            over = metric(proxy, "summarizer_lane_requests_total", "sent_over_bound")
            taken = metric(proxy, "summarizer_lane_requests_total", "taken")
        finally:
            proxy.stop()
    assert [reply.status_code for reply in replies] == [200] * len(bodies), [
        reply.text[:300] for reply in replies if reply.status_code != 200
    ]
    assert all(answer_text(reply) for reply in replies)
    # The first is remembered, the second located before it is sent (its previous one was
    # never located), every later one sent early.
    assert taken == len(bodies) - 1
    assert early == len(bodies) - 2
    assert over == 0
    # Each answer's usage calibrated the counts: the proxy reports its figure on every answer.
    assert all(reply.headers.get("x-summarizer-prompt-tokens") for reply in replies[2:])


def parses(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "depart",
    ["edit_early", "changed_field", "padded_and_changed"],
)
def test_a_body_that_departs_from_the_remembered_one_is_never_acted_on(
    pair: Pair, depart: str
) -> None:
    """The lane streams the new body against the last one of its conversation; where they
    part, the full path takes it, and the upstream receives only what the full path sends."""
    session = f"depart-{depart}"
    first = agent_session(seed=2, turns=3)[2]  # not streamed: sent as the client wrote it
    key = "sk-lane-departures"  # a namespace of its own: the other proxy never sees these
    assert post(pair.lane, first, session, key).status_code == 200
    body = json.loads(first)
    body["messages"].append({"role": "assistant", "content": "done " + TRICKY})
    body["messages"].append({"role": "user", "content": "and the tests?"})
    if depart == "edit_early":
        body["messages"][2]["content"] = "an edited step"
    raw = dumps(body)
    if depart != "edit_early":
        raw = raw.replace(b'"max_tokens":16', b'"max_tokens":17')
    if depart == "padded_and_changed":
        raw += b" " * 300  # what the lane streamed could otherwise end with the object's "}"
    pair.lane.recorder.cut_off.clear()
    before = len(pair.lane.recorder.whole)
    handed = pair.lane.metric("summarizer_lane_requests_total", "handed_over")

    reply = post(pair.lane, raw, session, key)

    assert reply.status_code == 200
    assert pair.lane.metric("summarizer_lane_requests_total", "handed_over") == handed + 1
    sent = pair.lane.recorder.whole[before:]
    assert [json.loads(b) for b in sent] == [json.loads(raw)]  # once, and as the client wrote it
    for cut in pair.lane.recorder.cut_off:
        assert raw.startswith(cut) or depart != "edit_early"
        assert not parses(cut), "a cut-off body the upstream could have read as whole"


def test_an_upstream_failure_on_the_lane_is_answered_as_the_full_path_answers_it(
    pair: Pair,
) -> None:
    bodies = agent_session(seed=3, turns=3)
    send_both(pair, bodies, "faults")
    taken = pair.lane.metric("summarizer_lane_requests_total", "taken")
    for kind in ("drop", "status"):
        replies = []
        for side in (pair.lane, pair.full):
            pair.upstream.inject(Fault(kind=kind, status=503, match="agent"))
            replies.append(post(side, bodies[2], "faults"))
        lane, full = replies
        assert lane.status_code == full.status_code >= 500
        assert lane.json()["error"]["code"] == full.json()["error"]["code"]
        assert lane.json()["error"]["type"] == full.json()["error"]["type"]
    assert pair.lane.metric("summarizer_lane_requests_total", "taken") >= taken + 2


def test_the_lane_is_off_where_it_would_bypass_the_full_paths_client(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def lane_is_on(app: Starlette) -> bool:
        return with_lane(app.state.proxy.lane, app) is not app

    settings = Settings(upstream="http://127.0.0.1:9/v1", port=0, db=tmp_path / "c.db")
    assert lane_is_on(create_app(settings))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert not lane_is_on(create_app(settings))  # the client would use it
    monkeypatch.delenv("HTTPS_PROXY")
    off = Settings(upstream="http://127.0.0.1:9/v1", port=0, db=tmp_path / "d.db", fast_path=False)
    assert not lane_is_on(create_app(off))
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200))
    assert not lane_is_on(create_app(settings, transport=transport))


OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 3000 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def test_an_overflow_on_the_lane_gets_the_full_paths_one_retry_and_the_checkpoint_holds(
    pair: Pair,
) -> None:
    """The upstream refuses a request the lane sent as too long: the full path compacts harder
    and sends once more (no second copy of the refused request), and the next request, which
    the checkpoint now rewrites, goes rewritten, never as the client wrote it."""
    bodies = agent_session(seed=4, turns=6)
    send_both(pair, [bodies[0], bodies[2]], "overflow")  # not streamed: settled on both sides
    sent = []
    for side in (pair.lane, pair.full):
        before = len(side.recorder.whole)
        pair.upstream.inject(Fault(kind="status", status=400, body=OVERFLOW, match="agent"))
        reply = post(side, bodies[3], "overflow")
        assert reply.status_code == 200
        assert reply.headers["x-summarizer-compacted"] == "true"
        sent.append(side.recorder.whole[before:])
    assert sent[0] == sent[1]  # the refused request once, the summary call, the retry
    assert sent[0][0] == bodies[3] and sent[0][-1] != bodies[3]
    send_both(pair, [bodies[5]], "overflow")
    assert pair.lane.recorder.whole[-1] != bodies[5]  # rewritten by the checkpoint


def test_each_request_on_the_lane_goes_upstream_with_its_own_headers(pair: Pair) -> None:
    # The lane keeps upstream request heads per client headers: a header that changes between
    # an agent's requests (a trace id) must reach the upstream as sent each time, never the
    # head kept for an earlier request.
    bodies = agent_session(seed=7, turns=10)
    taken = pair.lane.metric("summarizer_lane_requests_total", "taken")
    seen = []
    for turn, raw in enumerate(bodies):
        trace = f"trace-{turn % 2}-{turn}"
        headers = {
            "authorization": "Bearer sk-lane-heads",
            "content-type": "application/json",
            "x-summarizer-session": "heads",
            "x-trace-id": trace,
        }
        before = len(pair.upstream.requests)
        with httpx2.Client(timeout=60) as client:
            reply = client.post(
                f"{pair.lane.proxy.base_url}/chat/completions", content=raw, headers=headers
            )
        assert reply.status_code == 200
        sent = [r for r in pair.upstream.requests[before:] if r.path.endswith("/completions")]
        seen.append([r.headers.get("x-trace-id") for r in sent])
    assert seen == [[f"trace-{turn % 2}-{turn}"] for turn in range(len(bodies))]
    assert pair.lane.metric("summarizer_lane_requests_total", "taken") - taken >= 3


def test_an_answer_carries_one_date_on_the_lane_and_on_the_full_path(pair: Pair) -> None:
    # The server dates every answer itself; the upstream's Date must not make a second one.
    bodies = agent_session(seed=11, turns=4)
    for side in (pair.lane, pair.full):
        for raw in bodies:
            reply = post(side, raw, "dates")
            assert reply.status_code == 200
            assert len(reply.headers.get_list("date")) == 1
    assert pair.lane.metric("summarizer_lane_requests_total", "taken") >= 1


def test_a_stream_on_the_lane_reaches_the_client_as_the_upstream_sends_it(
    tmp_path: Path,
) -> None:
    # The lane writes what is ready together: events that come apart must still go at once,
    # not wait for the rest of the stream. (Straight to the upstream: the recorder in front of
    # the pair's reads each answer whole.)
    bodies = [dumps({**json.loads(raw), "stream": True}) for raw in agent_session(13, 3)]
    settings = Settings(port=0, db=tmp_path / "checkpoints.db", context_window=3_000)
    with TestUpstream(responder=summary_responder) as upstream:
        proxy = ProxyServer(settings.model_copy(update={"upstream": upstream.base_url})).start()
        headers = {
            "authorization": "Bearer sk-lane-test",
            "content-type": "application/json",
            "x-summarizer-session": "trickle",
        }
        try:
            for raw in bodies[:-1]:
                reply = httpx2.post(
                    f"{proxy.base_url}/chat/completions", content=raw, headers=headers, timeout=60
                )
                assert reply.status_code == 200
            taken = metric(proxy, "summarizer_lane_requests_total", "taken")
            upstream.enqueue(Reply(content="one two three four five six", chunk_delay=0.3))
            arrivals: list[float] = []
            with httpx2.Client(timeout=60) as client:
                started = time.monotonic()
                url = f"{proxy.base_url}/chat/completions"
                with client.stream("POST", url, content=bodies[-1], headers=headers) as reply:
                    assert reply.status_code == 200
                    for line in reply.iter_lines():
                        if line.startswith("data: {"):
                            arrivals.append(time.monotonic() - started)
            assert metric(proxy, "summarizer_lane_requests_total", "taken") == taken + 1
        finally:
            proxy.stop()
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(gaps) >= 4
    assert arrivals[0] < 0.25  # the first event came before the upstream's next one
    assert sum(gap > 0.15 for gap in gaps) >= len(gaps) - 1  # and each as it was sent


def test_the_lane_keeps_no_verdict_on_headers_the_guard_refuses(tmp_path: Path) -> None:
    # The lane works out once per set of client headers whether the guard lets them through
    # and who sends them. A key that differs from an accepted one, or a session name that is
    # not one, must still be refused every time, and never reach the upstream.
    session = agent_session(seed=5, turns=9)
    bodies = [raw for turn, raw in enumerate(session) if turn % 3 != 1]  # none streamed
    with TestUpstream(responder=summary_responder) as upstream:
        settings = Settings(
            upstream=upstream.base_url,
            port=0,
            db=tmp_path / "c.db",
            client_keys=frozenset({"sk-good"}),
        )
        proxy = ProxyServer(settings).start()
        try:

            def send(raw: bytes, key: str, session: str = "guarded") -> httpx2.Response:
                headers = {
                    "authorization": f"Bearer {key}",
                    "content-type": "application/json",
                    "x-summarizer-session": session,
                }
                with httpx2.Client(timeout=60) as client:
                    url = f"{proxy.base_url}/chat/completions"
                    return client.post(url, content=raw, headers=headers)

            for raw in bodies[:4]:
                assert send(raw, "sk-good").status_code == 200
            taken = metric(proxy, "summarizer_lane_requests_total", "taken")
            assert taken >= 1
            before = len(upstream.requests)
            for _ in range(2):
                refused = send(bodies[4], "sk-bad")
                assert refused.status_code == 401
                assert refused.json()["error"]["code"] == "invalid_api_key"
                invalid = send(bodies[4], "sk-good", session="not a session name")
                assert invalid.status_code == 400
            assert len(upstream.requests) == before
            assert metric(proxy, "summarizer_lane_requests_total", "taken") == taken
            assert send(bodies[4], "sk-good").status_code == 200
            assert metric(proxy, "summarizer_lane_requests_total", "taken") == taken + 1
        finally:
            proxy.stop()
