"""``wrap(client)`` stays wrapped through ``with_options``/``copy`` and is still an ``OpenAI``.

Real openai SDK against the test upstream on 127.0.0.1, whose window (8,000 tokens) refuses any
request over it: a client that lost its wrapper fails with ``context_length_exceeded``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

import context_summarizer
from context_summarizer.core.results import CompactionEvent
from context_summarizer.testing import TestUpstream
from context_summarizer.testing.responders import is_summary_request

from .conftest import message_from_stream, tool_turn

MODEL = "gpt-4o-mini"
WINDOW = 8_000


def over_the_window(tag: str) -> list[dict[str, Any]]:
    """A conversation of about 20k tokens (over ``WINDOW``), distinct per ``tag``."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": f"Task {tag}: fix the failing invoice test."},
    ]
    for i in range(16):
        output = f"{tag} src/m{i}.py line {i} " + f"line {i} " * 400
        messages += tool_turn(f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}', output)
    messages.append({"role": "user", "content": "Go on."})
    return messages


def agent_requests(upstream: TestUpstream) -> list[Any]:
    return [r for r in upstream.requests if r.body and not is_summary_request(r.body)]


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=WINDOW) as server:
        yield server


Derive = Callable[[Any], Any]
DERIVATIONS: dict[str, Derive] = {
    "itself": lambda c: c,
    "with_options(timeout=30)": lambda c: c.with_options(timeout=30),
    "copy()": lambda c: c.copy(),
    "with_options(max_retries=1).copy(timeout=20)": lambda c: c.with_options(max_retries=1).copy(
        timeout=20
    ),
}


def test_an_unwrapped_client_fails_on_these_conversations(upstream: TestUpstream) -> None:
    """The premise of the tests below: without the wrapper the upstream refuses the request."""
    raw = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="context"):
        raw.chat.completions.create(model=MODEL, messages=over_the_window("raw"))


@pytest.mark.parametrize("derivation", list(DERIVATIONS))
def test_derived_sync_clients_stay_wrapped(upstream: TestUpstream, derivation: str) -> None:
    events: list[CompactionEvent] = []
    raw = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    wrapped = context_summarizer.wrap(raw, context_window=WINDOW, on_compaction=events.append)
    derived = DERIVATIONS[derivation](wrapped)
    response = derived.chat.completions.create(model=MODEL, messages=over_the_window("plain"))
    assert response.choices[0].message.content
    stream = derived.chat.completions.create(
        model=MODEL, messages=over_the_window("stream"), stream=True
    )
    with stream:
        chunks = list(stream)
    assert message_from_stream(chunks)["content"]
    assert all(chunk.choices for chunk in chunks), "the usage chunk nobody asked for is hidden"

    assert len(events) == 2
    sent = agent_requests(upstream)
    assert [r.status for r in sent] == [200, 200]
    assert all((r.prompt_tokens or 0) <= WINDOW for r in sent)
    assert isinstance(derived, openai.OpenAI)
    assert not isinstance(derived, openai.AsyncOpenAI)
    assert derived.context is wrapped.context


@pytest.mark.parametrize("derivation", list(DERIVATIONS))
def test_derived_async_clients_stay_wrapped(upstream: TestUpstream, derivation: str) -> None:
    events: list[CompactionEvent] = []

    async def run() -> None:
        raw = openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
        wrapped = context_summarizer.wrap(raw, context_window=WINDOW, on_compaction=events.append)
        derived = DERIVATIONS[derivation](wrapped)
        response = await derived.chat.completions.create(
            model=MODEL, messages=over_the_window("plain")
        )
        assert response.choices[0].message.content
        stream = await derived.chat.completions.create(
            model=MODEL, messages=over_the_window("stream"), stream=True
        )
        chunks = [chunk async for chunk in stream]
        assert message_from_stream(chunks)["content"]
        assert all(chunk.choices for chunk in chunks)
        assert isinstance(derived, openai.AsyncOpenAI)
        assert not isinstance(derived, openai.OpenAI)
        assert derived.context is wrapped.context
        await raw.close()

    asyncio.run(run())
    assert len(events) == 2
    sent = agent_requests(upstream)
    assert [r.status for r in sent] == [200, 200]
    assert all((r.prompt_tokens or 0) <= WINDOW for r in sent)


def test_every_other_attribute_is_the_clients_own(upstream: TestUpstream) -> None:
    raw = openai.OpenAI(base_url=upstream.base_url, api_key="k-attr", max_retries=0, timeout=12)
    raw.chat  # a resource the client already built is not what the wrapper uses  # noqa: B018
    wrapped = context_summarizer.wrap(raw, context_window=WINDOW)
    assert wrapped.api_key == "k-attr" and str(wrapped.base_url) == str(raw.base_url)
    assert wrapped.timeout == 12 and wrapped.max_retries == 0
    assert [m.id for m in wrapped.models.list()] == [upstream.model_name]
    embedding = wrapped.embeddings.create(model="text-embedding-3-small", input="hello")
    assert embedding.data[0].embedding
    derived = wrapped.with_options(timeout=30, max_retries=2)
    assert derived.timeout == 30 and derived.max_retries == 2 and wrapped.timeout == 12
    assert [m.id for m in derived.models.list()] == [upstream.model_name]
    # Wrapping leaves the original client as it was: unwrapped.
    assert type(raw) is openai.OpenAI
    with pytest.raises(openai.BadRequestError):
        raw.chat.completions.create(model=MODEL, messages=over_the_window("raw"))
    # The wrapper closes like the client (the connection pool is the original's).
    with wrapped.with_options(timeout=5) as scoped:
        assert [m.id for m in scoped.models.list()] == [upstream.model_name]


def test_wrapping_a_wrapped_client_is_refused(upstream: TestUpstream) -> None:
    wrapped = context_summarizer.wrap(openai.OpenAI(base_url=upstream.base_url, api_key="k"))
    with pytest.raises(TypeError, match="already wrapped"):
        context_summarizer.wrap(wrapped.with_options(timeout=3))


def test_raw_and_streaming_responses_are_context_managed_too(upstream: TestUpstream) -> None:
    events: list[CompactionEvent] = []
    wrapped = context_summarizer.wrap(
        openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0),
        context_window=WINDOW,
        on_compaction=events.append,
    )
    completions = wrapped.chat.completions
    raw = completions.with_raw_response.create(model=MODEL, messages=over_the_window("raw"))
    assert raw.headers["x-request-id"] and raw.parse().choices[0].message.content
    assert len(events) == 1
    calibrated = wrapped.context.engine.calibration.ratio(MODEL)
    assert calibrated != 1.0  # the usage of the parsed raw response was fed back
    with completions.with_streaming_response.create(
        model=MODEL, messages=over_the_window("streamed raw")
    ) as streamed:
        assert streamed.http_response.status_code == 200
        assert streamed.parse().choices[0].message.content
    assert len(events) == 2
    assert all(r.status == 200 for r in agent_requests(upstream))


def test_async_raw_and_streaming_responses_are_context_managed_too(
    upstream: TestUpstream,
) -> None:
    async def run() -> None:
        wrapped = context_summarizer.wrap(
            openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", max_retries=0),
            context_window=WINDOW,
        )
        completions = wrapped.chat.completions
        raw = await completions.with_raw_response.create(
            model=MODEL, messages=over_the_window("async raw")
        )
        assert raw.parse().choices[0].message.content  # the raw response parses in sync
        async with completions.with_streaming_response.create(
            model=MODEL, messages=over_the_window("async streamed raw")
        ) as streamed:
            assert (await streamed.parse()).choices[0].message.content

    asyncio.run(run())
    assert all(r.status == 200 for r in agent_requests(upstream))
    assert len(agent_requests(upstream)) == 2
