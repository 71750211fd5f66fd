"""wrap() and ContextManager with the real openai SDK against the test upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

import context_summarizer
from context_summarizer import ContextManager, UnknownModelError
from context_summarizer.cli.demo import run_coding_session
from context_summarizer.core.messages import canonical_json
from context_summarizer.testing import (
    Fault,
    Reply,
    RoutingResponder,
    ScriptedToolAgent,
    TestUpstream,
    echo_responder,
)
from context_summarizer.testing.responders import is_summary_request
from context_summarizer.testing.scenario import CodingSession

from .conftest import message_from_stream, tool_turn

MODEL = "gpt-4o-mini"


def test_a_100_turn_tool_session_stays_inside_a_16k_window() -> None:
    stats = run_coding_session(turns=110, context_window=16_000, model=MODEL, via="library")
    # Every request reached the model inside its window (the upstream rejects anything over).
    assert stats.agent_requests == 111
    assert stats.largest_prompt_tokens + 1_000 <= 16_000
    assert stats.compactions >= 5
    assert stats.summary_requests == stats.compactions
    # Every summary request begins with what the model saw last.
    assert stats.summary_prefix_shared == stats.summary_requests
    # Between compactions, each request extends the previous one byte for byte.
    assert stats.append_only_share_between_compactions == 1.0
    assert stats.append_only_pairs == stats.consecutive_pairs - stats.compactions
    assert stats.planted_lost == []
    assert stats.cache_share > 0.6


def _agent_bodies(upstream: TestUpstream) -> list[dict[str, Any]]:
    return [
        r.body
        for r in upstream.requests
        if r.path.endswith("/chat/completions") and r.body and not is_summary_request(r.body)
    ]


def _drive(client: Any, session: CodingSession, turns: int, **extra: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [session.system, session.task]
    for turn in range(turns):
        response = client.chat.completions.create(
            model=MODEL, messages=messages, tools=session.tools, **extra
        )
        reply = response.choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or []:
            output = session.execute(turn, call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        if not reply.tool_calls:
            break
    return messages


def test_unknown_fields_and_parameters_reach_the_upstream_unchanged() -> None:
    with TestUpstream() as upstream:
        client = context_summarizer.wrap(
            openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
        )
        messages = [
            {"role": "system", "content": "s", "x_vendor": {"cache": True}},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
        ]
        client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0.3, seed=5, extra_body={"top_k": 4}
        )
        body = upstream.requests[-1].body
        assert body is not None
        assert body["messages"] == messages
        assert (body["temperature"], body["seed"], body["top_k"]) == (0.3, 5, 4)
        # Other resources are the wrapped client's own.
        assert [m.id for m in client.models.list().data]


def test_restart_with_sqlite_rewrites_the_same_conversation_identically(tmp_path: Any) -> None:
    db = tmp_path / "state.db"
    session = CodingSession(turns=40)
    agent = ScriptedToolAgent(session.steps)
    with TestUpstream(context_window=8_000, responder=agent) as upstream:
        raw = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
        first = ContextManager(client=raw, context_window=8_000, store=str(db))
        client = context_summarizer.wrap(raw, context_window=8_000, store=str(db))
        history = _drive(client, session, turns=25, max_completion_tokens=500)
        # Exactly the agent's last request: the history before the last reply, same reply cap.
        last_reply = max(i for i, m in enumerate(history) if m["role"] == "assistant")
        history = history[:last_reply]
        request = {"max_completion_tokens": 500}
        before = first.prepare(history, model=MODEL, tools=session.tools, request=request)
        assert before.rewritten and not before.compacted
        first.close()
        # A new process: nothing in memory, only the SQLite file.
        again = ContextManager(client=raw, context_window=8_000, store=str(db))
        after = again.prepare(history, model=MODEL, tools=session.tools, request=request)
        assert after.checkpoint_id == before.checkpoint_id
        assert [canonical_json(m) for m in after.messages] == [
            canonical_json(m) for m in before.messages
        ]
        # And what the last request sent is a prefix of it: the cache stays valid.
        last_sent = _agent_bodies(upstream)[-1]["messages"]
        assert canonical_json(after.messages[: len(last_sent)]) == canonical_json(last_sent)


def test_streaming_calls_compact_and_hide_the_usage_chunk_unless_asked() -> None:
    session = CodingSession(turns=30)
    with TestUpstream(context_window=8_000, responder=ScriptedToolAgent(session.steps)) as up:
        events: list[Any] = []
        client = context_summarizer.wrap(
            openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0),
            context_window=8_000,
            on_compaction=events.append,
        )
        messages: list[dict[str, Any]] = [session.system, session.task]
        for turn in range(30):
            stream = client.chat.completions.create(
                model=MODEL,
                messages=messages,
                tools=session.tools,
                stream=True,
                max_completion_tokens=500,
            )
            with stream:
                chunks = list(stream)
            assert all(chunk.choices for chunk in chunks)  # usage-only chunk hidden
            message = message_from_stream(chunks)
            messages.append(message)
            for call in message.get("tool_calls", []):
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": session.execute(
                            turn, call["function"]["name"], call["function"]["arguments"]
                        ),
                    }
                )
        assert len(events) >= 2
        sent = [r.body for r in up.requests if r.body and r.body.get("stream")]
        assert all(b["stream_options"] == {"include_usage": True} for b in sent)
        assert max(r.prompt_tokens or 0 for r in up.requests) + 500 <= 8_000
        # The usage the stream reported calibrated the estimate for this model.
        assert client.context.engine.calibration.ratio(MODEL) != 1.0


def test_async_client_compacts_too() -> None:
    session = CodingSession(turns=30)

    async def run(base_url: str) -> tuple[int, list[dict[str, Any]]]:
        events: list[Any] = []
        raw = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
        client = context_summarizer.wrap(raw, context_window=8_000, on_compaction=events.append)
        messages: list[dict[str, Any]] = [session.system, session.task]
        for turn in range(30):
            response = await client.chat.completions.create(
                model=MODEL, messages=messages, tools=session.tools, max_completion_tokens=500
            )
            reply = response.choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            for call in reply.tool_calls or []:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": session.execute(
                            turn, call.function.name, call.function.arguments
                        ),
                    }
                )
        await raw.close()
        return len(events), messages

    with TestUpstream(context_window=8_000, responder=ScriptedToolAgent(session.steps)) as up:
        compactions, _ = asyncio.run(run(up.base_url))
        assert compactions >= 2
        assert max(r.prompt_tokens or 0 for r in up.requests) + 500 <= 8_000


def _filled(n: int, size: int = 400) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task: keep going"},
    ]
    for i in range(n):
        messages += tool_turn(
            f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}', f"line {i} " * size
        )
    return messages


def test_summary_call_is_retried_on_5xx_and_429() -> None:
    with TestUpstream(responder=RoutingResponder(echo_responder)) as up:
        up.inject(
            Fault(kind="status", status=500, match="summary"),
            Fault(kind="rate_limit", retry_after=0.05, match="summary"),
        )
        raw = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        context = ContextManager(client=raw, context_window=8_000)
        result = context.prepare(
            _filled(12),
            model=MODEL,
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "parameters": {"type": "object", "properties": {}},
                    },
                }
            ],
        )
        assert result.compacted and result.event is not None
        assert result.event.failure is None
        summaries = [r for r in up.requests if r.body and is_summary_request(r.body)]
        assert [r.status for r in summaries] == [500, 429, 200]


def test_a_500_that_is_a_validation_error_is_not_retried() -> None:
    # llama-cpp-python's server answers 500 with pydantic's message when it cannot validate a
    # request: the same request fails the same way, so it is a failed summary at once.
    validation = {
        "error": {
            "message": "1 validation error for CreateChatCompletionRequest\nmessages.2.content\n"
            "  Input should be a valid string",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }
    with TestUpstream(responder=RoutingResponder(echo_responder)) as up:
        up.inject(Fault(kind="status", status=500, body=validation, match="summary"))
        raw = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        context = ContextManager(client=raw, context_window=8_000)
        result = context.prepare(_filled(12), model=MODEL)
        summaries = [r for r in up.requests if r.body and is_summary_request(r.body)]
        assert [r.status for r in summaries] == [500]  # one attempt, no retry
        # Over the window: the mechanical fallback stands in for the failed summary.
        assert result.compacted and result.event is not None
        assert result.event.verdicts == ["replaced"] and result.event.problems == ["error"]
        assert result.event.failure is not None and "500" in result.event.failure


def test_failed_summary_sends_the_request_unchanged_when_it_still_fits() -> None:
    with TestUpstream() as up:
        up.inject(*[Fault(kind="status", status=503, match="summary") for _ in range(10)])
        raw = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        context = ContextManager(client=raw, context_window=8_000)
        messages = _filled(4)  # 4,916 tokens: over the trigger (4,800) but under usable (6,000)
        result = context.prepare(messages, model=MODEL)
        assert not result.compacted and result.messages == messages
        assert result.report.estimated_tokens <= 8_000 - result.report.reserve_output_tokens


def test_failed_summary_compacts_mechanically_when_the_request_does_not_fit() -> None:
    with TestUpstream() as up:
        up.inject(*[Fault(kind="status", status=503, match="summary") for _ in range(10)])
        raw = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        context = ContextManager(client=raw, context_window=8_000)
        messages = _filled(16)  # over the window
        result = context.prepare(messages, model=MODEL)
        assert result.compacted and result.event is not None
        assert result.event.failure is not None and "503" in result.event.failure
        summary = next(m for m in result.messages if "[Context summary]" in str(m.get("content")))
        assert "could not summarize" in summary["content"]
        assert "src/m0.py" in summary["content"]  # the ledger still carries the facts
        assert result.report.estimated_tokens <= result.report.trigger_tokens


def test_context_length_exceeded_compacts_tighter_and_retries_once() -> None:
    # Our window is configured larger than the upstream's real one.
    with TestUpstream(context_window=6_000) as up:
        client = context_summarizer.wrap(
            openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0), context_window=12_000
        )
        response = client.chat.completions.create(
            model=MODEL,
            messages=_filled(7),
            max_completion_tokens=200,  # 8,591 tokens
        )
        assert response.choices[0].message.content == "ok"
        statuses = [r.status for r in up.requests if r.body and not is_summary_request(r.body)]
        assert statuses == [400, 200]


def test_unknown_model_needs_a_configured_window() -> None:
    with TestUpstream() as up:
        client = context_summarizer.wrap(
            openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        )
        with pytest.raises(UnknownModelError, match="context_window"):
            client.chat.completions.create(
                model="acme-brain-7", messages=[{"role": "user", "content": "hi"}]
            )
        assert up.requests == []


def test_an_empty_summary_is_retried_with_the_strict_instruction() -> None:
    with TestUpstream() as up:
        calls: list[str] = []

        def responder(body: dict[str, Any]) -> Reply:
            if not is_summary_request(body):
                return Reply(content="ok")
            instruction = body["messages"][-1]["content"]
            calls.append(instruction)
            if len(calls) == 1:
                return Reply(content="")
            return Reply(content="## Task and constraints\nread src/m0.py and src/m1.py")

        up.responder = responder
        raw = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        context = ContextManager(client=raw, context_window=8_000)
        result = context.prepare(_filled(16), model=MODEL)
        assert len(calls) == 2 and "could not be used" in calls[1]
        assert result.event is not None and result.event.failure is None
        assert result.event.score is not None and result.event.score > 0


def test_async_streaming_hides_usage_unless_asked_and_calibrates() -> None:
    async def run(base_url: str) -> tuple[list[Any], list[Any], Any]:
        raw = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
        client = context_summarizer.wrap(raw, context_window=8_000)
        messages = [{"role": "user", "content": "hello there " * 50}]
        hidden = [
            c
            async for c in await client.chat.completions.create(
                model=MODEL, messages=messages, stream=True
            )
        ]
        shown = [
            c
            async for c in await client.chat.completions.create(
                model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
            )
        ]
        await raw.close()
        return hidden, shown, client

    with TestUpstream() as up:
        hidden, shown, client = asyncio.run(run(up.base_url))
    assert all(chunk.choices for chunk in hidden)
    assert not shown[-1].choices and shown[-1].usage.prompt_tokens > 0
    assert client.context.engine.calibration.ratio(MODEL) != 1.0


def test_a_conversation_holding_a_lone_surrogate_compacts_and_is_stored(tmp_path: Any) -> None:
    """JSON text may carry a lone surrogate escape, so an agent's history may hold one (the openai
    SDK cannot send it, but an agent's own HTTP client can): it compacts, and SQLite stores the
    checkpoint holding it, in a cut tool output and in the ledger's facts."""
    store = tmp_path / "cp.db"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Fix src/\ud800bad.py please."},
    ]
    for i in range(8):
        output = f"src/m{i}.py: ValueError: bad \udfff byte " + "data " * 700
        messages += tool_turn(f"c{i}", "read_file", "{}", output)
    # The summaries are written by the scripted summarizer: "ok" is no summary.
    with TestUpstream(responder=RoutingResponder(echo_responder)) as up:
        llm = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        context = ContextManager(client=llm, context_window=8_000, store=store)
        prepared = context.prepare(messages, model="gpt-4o-mini")
        assert prepared.compacted and prepared.event is not None
        assert prepared.event.failure is None  # the model wrote the summary
    # A fresh process over the same store rewrites the conversation the same way.
    again = ContextManager(context_window=8_000, store=store)
    replay = again.unchanged(messages, model="gpt-4o-mini")
    assert replay is not None and replay.messages == prepared.messages
