"""The fault suite: each upstream fault, at the agent call and at the summary call, stream or not.

The real proxy in front of the real test upstream, driven by the real openai SDK. Every case
sends a conversation already over the trigger (so a summary call really happens), with one fault
injected, and then checks what must hold after any fault: the client got a correct answer or an
OpenAI-style error (never a 500 of ours, never a stream cut short without an error event), the
SQLite store is intact with every checkpoint readable, and the conversation's next request works.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import socket
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.core.checkpoints import Checkpoint
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.library.manager import ContextManager
from context_summarizer.library.upstream import AsyncOpenAISummaryClient, OpenAISummaryClient
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Fault, RoutingResponder, TestUpstream, echo_responder

from .test_proxy import TOOLS, long_history

MODEL = "gpt-4o-mini"
KEY = "sk-test-faults-0123456789abcdef"
UPSTREAM_TIMEOUT = 1.0
HTML = "text/html; charset=utf-8"
INTERRUPTED = {"status": "stream_interrupted", "call": "agent"}

# (id, fault, what the agent's client gets when the fault hits the agent call: an HTTP status,
# or "answer"). At the summary call every fault must leave the agent's request answered.
FAULTS: list[tuple[str, Fault, int | str]] = [
    ("http-500", Fault(kind="status", status=500), 500),
    ("http-429-retry-after", Fault(kind="rate_limit", retry_after=0.2), 429),
    ("timeout", Fault(kind="delay", seconds=UPSTREAM_TIMEOUT + 0.8), 504),
    ("dropped", Fault(kind="drop"), 502),
    ("invalid-json", Fault(kind="body", content=b'{"id": "x", "choices": [oops'), 502),
    ("empty-body", Fault(kind="body", content=b""), 502),
    ("truncated-json", Fault(kind="body", content=b'{"id": "chatcmpl-1", "object": "chat.'), 502),
    # Nested past orjson's limit and then the stdlib's stack: still no answer, not our failure.
    (
        "nested-too-deep",
        Fault(kind="body", content=b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        502,
    ),
    (
        "text-html",
        Fault(
            kind="body", content=b"<html><body>Bad gateway</body></html>", content_type="text/html"
        ),
        502,
    ),
    ("non-numeric-usage", Fault(kind="bad_usage", prompt_tokens="12"), "answer"),
    ("reset-mid-answer", Fault(kind="reset", events=2), 502),
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(responder=RoutingResponder(echo_responder)) as server:
        yield server


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults") / "checkpoints.db"


@pytest.fixture(scope="module")
def proxy(upstream: TestUpstream, db: Path) -> Iterator[ProxyServer]:
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        db=db,
        context_window=8_000,
        max_summary_tokens=500,
        upstream_timeout=UPSTREAM_TIMEOUT,
        keepalive_interval=0.5,
        prepare_ratio=None,  # each fault meets the compaction it is aimed at (drafts: test_ahead*)
    )
    with ProxyServer(settings) as server:
        yield server


_tasks = itertools.count()


def conversation() -> list[dict[str, Any]]:
    """A conversation of about 5,200 tokens: over the trigger (4,800), inside the window."""
    return long_history(7, size=400, task=f"Fix the failing invoice test, case {next(_tasks)}.")


@dataclass
class Outcome:
    """What the client got: an answer's text, or an error's status and body."""

    text: str | None = None
    status: int | None = None
    error: dict[str, Any] | None = None


def call(proxy: ProxyServer, messages: list[dict[str, Any]], *, stream: bool) -> Outcome:
    """One request through the real SDK; an error must be OpenAI-shaped and never our 500."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=30)
    try:
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model=MODEL,
                    messages=messages,
                    tools=TOOLS,
                    stream=True,  # type: ignore[arg-type]
                )
            )
            finished = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
            assert finished, "the stream ended without its last chunk and without an error event"
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            return Outcome(text=text)
        completion = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
        )
        assert isinstance(completion, openai.types.chat.ChatCompletion), type(completion)
        return Outcome(text=completion.choices[0].message.content)
    except openai.APIStatusError as exc:
        outcome = Outcome(status=exc.status_code, error=_error_object(exc.body))
    except openai.APIError as exc:  # an SSE error event
        outcome = Outcome(error=_error_object(exc.body))
    assert outcome.error is not None
    assert set(outcome.error) >= {"message", "type", "param", "code"}, outcome.error
    assert outcome.error["code"] != "internal_error", outcome.error
    assert KEY not in json.dumps(outcome.error)
    return outcome


def _error_object(body: object) -> dict[str, Any]:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    assert isinstance(body, dict), f"not an OpenAI-style error: {body!r}"
    return body


def assert_store_intact(db: Path) -> None:
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for (body,) in connection.execute("SELECT body FROM checkpoints"):
            Checkpoint.model_validate_json(body)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("where", ["agent", "summary"])
@pytest.mark.parametrize(("fault", "at_agent"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_a_fault_loses_nothing_and_the_conversation_goes_on(
    upstream: TestUpstream,
    proxy: ProxyServer,
    db: Path,
    fault: Fault,
    at_agent: int | str,
    where: str,
    stream: bool,
) -> None:
    upstream.clear_log()
    messages = conversation()
    upstream.inject(fault.model_copy(update={"match": where}))

    outcome = call(proxy, messages, stream=stream)

    assert upstream.pending_faults == 0, "the fault was not reached"
    summaries = [r for r in upstream.requests if r.is_summary]
    assert summaries, "no summary call happened"
    if where == "summary" or at_agent == "answer":
        assert outcome.text, outcome
    elif stream and outcome.status is None:
        assert outcome.error is not None  # the stream was already open: an error event
    else:
        assert outcome.status == at_agent, outcome
    assert_store_intact(db)

    upstream.clear_log()
    follow_up = [
        *messages,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Go."},
    ]
    assert call(proxy, follow_up, stream=stream).text
    agent = [r for r in upstream.requests if not r.is_summary]
    assert agent and agent[-1].status == 200
    assert_store_intact(db)


# -- the fault kinds themselves, straight from the SDK -----------------------------------------


@pytest.mark.parametrize(
    ("fault", "raises"),
    [
        (Fault(kind="body", content=b"{oops"), json.JSONDecodeError),
        (Fault(kind="body", content=b""), json.JSONDecodeError),
        (Fault(kind="reset"), openai.APIConnectionError),
    ],
)
def test_the_new_fault_kinds_reach_the_sdk_as_described(
    upstream: TestUpstream, fault: Fault, raises: type[Exception]
) -> None:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
    upstream.inject(fault)
    with pytest.raises(raises):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])


def test_text_html_comes_back_as_a_string_and_bad_usage_as_given(upstream: TestUpstream) -> None:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
    upstream.inject(Fault(kind="body", content=b"<html></html>", content_type="text/html"))
    page = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert page == "<html></html>"  # type: ignore[comparison-overlap]
    upstream.inject(Fault(kind="bad_usage", prompt_tokens={"n": 1}))
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}]
    )
    assert raw.http_response.json()["usage"]["prompt_tokens"] == {"n": 1}


# -- item 8: bad usage is ignored for calibration, logged once per cause ------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_non_numeric_usage_is_ignored_logged_once_per_cause_and_the_answer_delivered(
    upstream: TestUpstream, tmp_path: Path, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    settings = Settings(
        upstream=upstream.base_url, port=0, db=tmp_path / "c.db", context_window=8_000
    )
    with ProxyServer(settings) as fresh:
        for value in ["12", None, {}, True, "13", 0]:
            upstream.inject(Fault(kind="bad_usage", prompt_tokens=value))
            messages = [{"role": "user", "content": f"usage {value!r} {stream}"}]
            assert call(fresh, messages, stream=stream).text == "ok"
        calibration = fresh.app.state.proxy.context.engine.calibration
        tenant = credential_namespace(KEY)  # calibration is kept per tenant
        assert calibration.snapshot(tenant) == {}, "bad usage moved calibration"
        assert call(fresh, [{"role": "user", "content": "good usage"}], stream=stream).text
        assert MODEL in calibration.snapshot(tenant), "good usage still calibrates"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 5, warnings  # str, NoneType, dict, bool, not positive: once each
    assert all("usage.prompt_tokens" in w for w in warnings)
    assert not [r for r in caplog.records if r.exc_info]


# -- item 9: a reset mid-stream ends with an error event, counted and logged once ---------------


def _metrics(proxy: ProxyServer) -> str:
    return httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_reset_mid_stream_ends_with_an_error_event_counted_and_logged_once(
    upstream: TestUpstream, proxy: ProxyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    before = _metric(
        _metrics(proxy), "summarizer_upstream_errors_total", status="stream_interrupted"
    )
    upstream.inject(Fault(kind="reset", events=2))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "reset me"}], "stream": True}
    with httpx2.stream(
        "POST",
        f"{proxy.base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
    ) as response:
        assert response.status_code == 200
        text = response.read().decode()  # a complete chunked body: no read error here
    events = [e for e in text.split("\n\n") if e.strip()]
    assert len(events) == 3, events  # the two relayed chunks, then the error
    error = json.loads(events[-1].removeprefix("data: "))["error"]
    assert error["code"] == "stream_interrupted" and error["type"] == "upstream_error"
    after = _metric(
        _metrics(proxy), "summarizer_upstream_errors_total", status="stream_interrupted"
    )
    assert after == before + 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "interrupted" in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]


def test_a_reset_in_a_passthrough_body_is_logged_and_ends_without_a_traceback(
    upstream: TestUpstream, proxy: ProxyServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    request = {"model": "text-embedding-3-small", "input": "hello"}
    headers = {"Authorization": f"Bearer {KEY}"}
    whole = httpx2.post(f"{proxy.base_url}/embeddings", json=request, headers=headers)
    assert whole.status_code == 200 and whole.json()["data"]
    upstream.inject(Fault(kind="reset", match="embeddings"))
    cut = httpx2.post(f"{proxy.base_url}/embeddings", json=request, headers=headers)
    assert cut.status_code == 200
    assert 0 < len(cut.content) < len(whole.content)  # the body ends where the upstream's did
    time.sleep(0.2)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelname for r in warnings] == ["WARNING"], [r.getMessage() for r in warnings]
    assert "broke off" in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]
    again = httpx2.post(f"{proxy.base_url}/embeddings", json=request, headers=headers)
    assert again.status_code == 200 and again.json()["data"]


# -- item 16: summary-call failures are counted, apart from agent calls --------------------------


def test_failed_summary_attempts_are_counted_by_status_apart_from_agent_calls(
    upstream: TestUpstream, proxy: ProxyServer
) -> None:
    before = _metrics(proxy)
    upstream.inject(
        Fault(kind="status", status=503, match="summary"),
        Fault(kind="rate_limit", retry_after=0.1, match="summary"),
        Fault(kind="delay", seconds=UPSTREAM_TIMEOUT + 0.5, match="summary"),
    )
    assert call(proxy, conversation(), stream=False).text
    upstream.inject(Fault(kind="status", status=503, match="agent"))
    assert call(proxy, [{"role": "user", "content": "x"}], stream=False).status == 503
    after = _metrics(proxy)

    def grew(status: str, call: str) -> float:
        name = "summarizer_upstream_errors_total"
        return _metric(after, name, status=status, call=call) - _metric(
            before, name, status=status, call=call
        )

    assert grew("503", "summary") == 1
    assert grew("429", "summary") == 1
    assert grew("timeout", "summary") == 1
    assert grew("503", "agent") == 1


# -- item 15: an early-opened stream does not claim a compaction before it is known --------------


def _raw_stream(proxy: ProxyServer, body: dict[str, Any]) -> tuple[bytes, bytes]:
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    data = b""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(request)
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.lower(), rest


@pytest.mark.parametrize("summary_fails", [False, True], ids=["compacted", "not-compacted"])
def test_an_early_opened_stream_says_pending_and_tells_the_truth_in_a_comment(
    upstream: TestUpstream, tmp_path: Path, summary_fails: bool
) -> None:
    # Slower than the 0.5 s keepalive interval: the stream opens before the compaction ends.
    if summary_fails:  # a refused summary: the request still fits, so it goes out unchanged
        fault = Fault(kind="status", status=400, seconds=1.0, match="summary")
    else:
        fault = Fault(kind="delay", seconds=1.0, match="summary")
    upstream.inject(fault)
    body = {"model": MODEL, "messages": conversation(), "tools": TOOLS, "stream": True}
    # A proxy of its own: its calibration starts at 1, so the conversation fits the window.
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        db=tmp_path / "c.db",
        context_window=8_000,
        max_summary_tokens=500,
        keepalive_interval=0.5,
        prepare_ratio=None,
    )
    with ProxyServer(settings) as proxy:
        head, rest = _raw_stream(proxy, body)
    assert b"x-summarizer-compacted: pending" in head
    assert b": summarizer: compacting" in rest
    truth = re.search(
        rb": summarizer: compacted=(true|false) checkpoint=(\w*) prompt_tokens=\d+", rest
    )
    assert truth is not None, rest[:600]
    assert truth.group(1) == (b"false" if summary_fails else b"true")
    assert bool(truth.group(2)) is not summary_fails
    assert truth.start() < rest.index(b"data: {") and b"data: [DONE]" in rest


# -- items 7 and 8 in the library: the summary clients and observe -------------------------------

UNREADABLE = [
    Fault(kind="body", content=b'{"id": "x", "choices": [oops'),
    Fault(kind="body", content=b""),
    Fault(kind="body", content=b'{"id": "chatcmpl-1", "object": "chat.'),
    Fault(kind="body", content=b"<html><body>Bad gateway</body></html>", content_type=HTML),
    Fault(kind="body", content=b'{"choices": [{"message": {"content": {"not": "text"}}}]}'),
]
SUMMARY_BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Summarize."}]}


@pytest.mark.parametrize(
    "fault", UNREADABLE, ids=["invalid", "empty", "truncated", "html", "shape"]
)
def test_the_summary_clients_turn_an_unreadable_answer_into_a_failed_outcome(
    upstream: TestUpstream, fault: Fault
) -> None:
    sync = OpenAISummaryClient(openai.OpenAI(base_url=upstream.base_url, api_key=KEY))
    upstream.inject(fault)
    outcome = sync(SummarizeCall(body=SUMMARY_BODY))
    assert outcome.error and outcome.text is None
    assert outcome.failed_attempts == ["invalid_response"]
    assert KEY not in outcome.error and "Bad gateway" not in outcome.error

    async def run() -> SummaryOutcome:
        async with openai.AsyncOpenAI(base_url=upstream.base_url, api_key=KEY) as client:
            return await AsyncOpenAISummaryClient(client)(SummarizeCall(body=SUMMARY_BODY))

    upstream.inject(fault)
    outcome = asyncio.run(run())
    assert outcome.error and outcome.failed_attempts == ["invalid_response"]


@pytest.mark.parametrize("value", ["12", None, {}, True, -3])
def test_a_summary_with_bad_usage_is_still_a_summary(upstream: TestUpstream, value: Any) -> None:
    sync = OpenAISummaryClient(openai.OpenAI(base_url=upstream.base_url, api_key=KEY))
    upstream.inject(Fault(kind="bad_usage", prompt_tokens=value))
    outcome = sync(SummarizeCall(body=SUMMARY_BODY))
    assert outcome.error is None and outcome.text == "ok"
    # The SDK itself reads "12" as 12 and true as 1; anything else is no figure at all.
    assert outcome.prompt_tokens is None or type(outcome.prompt_tokens) is int
    assert outcome.completion_tokens == 1


@pytest.mark.parametrize("value", ["12", None, {}, True, 0, -5, 1.5])
def test_context_manager_observe_ignores_a_prompt_tokens_that_is_not_a_count(value: Any) -> None:
    context = ContextManager(context_window=8_000)
    result = context.prepare([{"role": "user", "content": "hello"}], model=MODEL)
    context.observe(result, {"prompt_tokens": value}, model=MODEL)
    context.observe(result, SimpleNamespace(prompt_tokens=value), model=MODEL)
    assert context.engine.calibration.snapshot() == {}
    context.observe(result, {"prompt_tokens": 40}, model=MODEL)
    assert MODEL in context.engine.calibration.snapshot()


DEEP = b'{"error": ' * 100_000 + b"1" + b"}" * 100_000
"""An upstream answer nested past orjson's limit and then the stdlib's stack."""


@pytest.mark.parametrize("status", [400, 200])
def test_an_answer_nested_past_any_parser_is_never_our_500(
    upstream: TestUpstream, proxy: ProxyServer, status: int
) -> None:
    # Every place that reads an upstream's JSON: a chat error (is it the window's?), a chat
    # answer, an Anthropic message, each through its own SDK.
    chat = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    upstream.inject(Fault(kind="body", status=status, content=DEEP))
    with pytest.raises(openai.APIStatusError) as caught:
        chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == (502 if status == 200 else status)
    anthropic = pytest.importorskip("anthropic")
    messages = anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=KEY, max_retries=0
    )
    upstream.inject(Fault(kind="body", status=status, content=DEEP))
    with pytest.raises(anthropic.APIStatusError) as refused:
        messages.messages.create(
            model="claude-sonnet-4-5", max_tokens=16, messages=[{"role": "user", "content": "x"}]
        )
    assert refused.value.status_code == (502 if status == 200 else status)
