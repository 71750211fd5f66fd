"""Drive a long scripted agent session through summarizer against the test upstream.

Used by ``summarizer demo``, by the tests and by the benchmarks: it runs a real agent loop with
the real ``openai`` SDK over real sockets, either through the proxy (``via="proxy"``: the agent's
base URL points at ``summarizer serve`` running on a free local port) or through ``wrap()``
(``via="library"``), then reads the upstream's request log to measure what the model actually
received (sizes, compactions, cache hits, append-only requests, facts kept).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from ..core.errors import ConfigurationError
from ..core.messages import canonical_json, message_text
from ..core.results import CompactionEvent
from ..library.wrapping import wrap
from ..testing import Responder, ScriptedToolAgent, TestUpstream
from ..testing.scenario import CodingSession
from .demo_messages import anthropic_tools, conversation, messages_agent, messages_turn, texts
from .demo_proxy import demo_proxy, session_lookup
from .demo_responses import conversation as responses_conversation
from .demo_responses import responses_agent, responses_tools, responses_turn


@dataclass(frozen=True)
class TurnCompaction:
    """A compaction as the agent loop saw it: at which turn, and what happened."""

    turn: int
    event: CompactionEvent


@dataclass
class SessionStats:
    """What the upstream saw during one scripted session."""

    turns: int
    agent_requests: int
    summary_requests: int
    compactions: int
    context_window: int
    largest_prompt_tokens: int
    append_only_pairs: int
    consecutive_pairs: int
    compaction_boundaries: int
    summary_prefix_shared: int
    prompt_tokens: int
    cached_tokens: int
    planted_kept: list[str] = field(default_factory=list)
    planted_lost: list[str] = field(default_factory=list)
    events: list[CompactionEvent] = field(default_factory=list)
    via: str = "proxy"
    session: str | None = None
    stored_checkpoints: int | None = None

    @property
    def cache_share(self) -> float:
        """Share of prompt tokens the upstream reported as cached."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def append_only_share_between_compactions(self) -> float:
        """Share of consecutive agent requests, not separated by a compaction, that were
        append-only."""
        eligible = self.consecutive_pairs - self.compaction_boundaries
        return self.append_only_pairs / eligible if eligible else 1.0


def _is_prefix(shorter: Sequence[str], longer: Sequence[str]) -> bool:
    return len(shorter) <= len(longer) and list(longer[: len(shorter)]) == list(shorter)


@contextmanager
def _agent_client(
    via: Literal["proxy", "library"],
    upstream: TestUpstream,
    context_window: int,
    record: Callable[[CompactionEvent], None],
    config: dict[str, Any],
) -> Iterator[tuple[Callable[..., tuple[Any, str | None]], Callable[[str], Any]]]:
    """The agent's ``create`` (returning the completion and the session header) and a session
    lookup (proxy only)."""
    if via == "library":
        raw_client = openai.OpenAI(base_url=upstream.base_url, api_key="demo-key", max_retries=0)
        wrapped = wrap(raw_client, context_window=context_window, on_compaction=record, **config)

        def create_wrapped(**kwargs: Any) -> tuple[Any, str | None]:
            return wrapped.chat.completions.create(**kwargs), None

        try:
            yield create_wrapped, lambda session: None
        finally:
            raw_client.close()
        return
    with demo_proxy(upstream, context_window, record, config) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="demo-key", max_retries=0)

        def create(**kwargs: Any) -> tuple[Any, str | None]:
            raw = client.chat.completions.with_raw_response.create(**kwargs)
            return raw.parse(), raw.headers.get("x-summarizer-session")

        try:
            yield create, session_lookup(client)
        finally:
            client.close()


def run_coding_session(
    *,
    turns: int = 120,
    context_window: int = 16_000,
    model: str = "gpt-4o-mini",
    max_completion_tokens: int = 1_000,
    seed: int = 7,
    via: Literal["proxy", "library"] = "proxy",
    on_compaction: Callable[[TurnCompaction], None] | None = None,
    api: Literal["chat", "messages", "responses"] = "chat",
    model_calls: Callable[[Responder], Responder] | None = None,
    **config: Any,
) -> SessionStats:
    """Run a ``turns``-turn tool-using session in a ``context_window``-token window.

    ``api``: the agent speaks Chat Completions (the ``openai`` SDK), Anthropic's Messages (the
    ``anthropic`` SDK) or OpenAI's Responses (``client.responses``, the whole input each turn);
    the last two through the proxy only. ``model_calls``: wraps the scripted model (to make it
    call the recall tool, say). ``config``: more ``CompactionConfig`` fields (library) or
    ``Settings`` fields (proxy).
    """
    session = CodingSession(turns=turns, seed=seed)
    agent = ScriptedToolAgent(session.steps)
    events: list[CompactionEvent] = []
    turn_now = {"turn": 0}

    def record(event: CompactionEvent) -> None:
        events.append(event)
        if on_compaction is not None:
            on_compaction(TurnCompaction(turn_now["turn"], event))

    session_id: str | None = None
    stored: int | None = None
    if api != "chat" and via != "proxy":
        raise ConfigurationError(f"the {api} API demo runs through the proxy only")
    clients: Callable[..., Any] = functools.partial(_agent_client, via)
    if api == "messages":
        clients = messages_agent
    elif api == "responses":
        clients = responses_agent
    with (
        TestUpstream(
            context_window=context_window,
            responder=agent if model_calls is None else model_calls(agent),
        ) as upstream,
        clients(upstream, context_window, record, config) as (create, lookup),
    ):
        messages: list[dict[str, Any]] = [session.system, session.task]
        if api != "chat":
            messages = [{"role": "user", "content": session.task["content"]}]
        for turn in range(turns + 1):
            turn_now["turn"] = turn
            if api != "chat":
                one_turn = (
                    functools.partial(
                        messages_turn,
                        system=session.system["content"],
                        tools=anthropic_tools(session.tools),
                    )
                    if api == "messages"
                    else functools.partial(
                        responses_turn,
                        instructions=session.system["content"],
                        tools=responses_tools(session.tools),
                    )
                )
                go_on, named = one_turn(
                    create,
                    messages,
                    model=model,
                    max_tokens=max_completion_tokens,
                    execute=functools.partial(session.execute, turn),
                )
                session_id = named or session_id
                if not go_on:
                    break
                continue
            response, named = create(
                model=model,
                messages=messages,
                tools=session.tools,
                max_completion_tokens=max_completion_tokens,
            )
            session_id = named or session_id
            reply = response.choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": session.execute(
                            turn, call.function.name, call.function.arguments
                        ),
                    }
                )
        if session_id is not None:
            found = lookup(session_id)
            stored = len(found["checkpoints"]) if found else None
        log = list(upstream.requests)

    route = {"messages": "/v1/messages", "responses": "/v1/responses"}.get(api, "/chat/completions")
    chat = [r for r in log if r.path.rstrip("/").endswith(route) and r.body is not None]
    agent_requests = [r for r in chat if not r.is_summary]
    summary_requests = [r for r in chat if r.is_summary]

    def seen(body: Any) -> list[str]:
        if api == "messages":
            found = conversation(body)
        elif api == "responses":
            found = responses_conversation(body)
        else:
            found = body["messages"]
        return [canonical_json(m) for m in found]

    as_json = [seen(r.body or {}) for r in agent_requests]
    append_only = sum(
        1 for before, after in itertools.pairwise(as_json) if _is_prefix(before, after)
    )
    # A summary request must begin with what the model saw last, or be a prefix of it (or of
    # the next request: a draft started with a compaction is of the view about to be sent).
    shared = 0
    for request in summary_requests:
        sent = seen(request.body or {})[:-1]
        earlier = [r for r in agent_requests if r.time <= request.time]
        later = [r for r in agent_requests if r.time > request.time][:1]
        if earlier and (
            _is_prefix(last := seen(earlier[-1].body or {}), sent)
            or _is_prefix(sent, last)
            or any(_is_prefix(sent, seen(r.body or {})) for r in later)
        ):
            shared += 1
    final_body = agent_requests[-1].body or {} if agent_requests else {}
    if api == "chat":
        final_text = "\n".join(map(message_text, final_body.get("messages") or ()))
    else:
        final_text = "\n".join(texts(final_body.get("messages" if api == "messages" else "input")))
    kept = [p.text for p in session.planted if p.text in final_text]
    lost = [p.text for p in session.planted if p.text not in final_text]
    return SessionStats(
        turns=turns,
        agent_requests=len(agent_requests),
        summary_requests=len(summary_requests),
        compactions=sum(event.applied for event in events),
        context_window=context_window,
        largest_prompt_tokens=max((r.prompt_tokens or 0) for r in chat),
        append_only_pairs=append_only,
        consecutive_pairs=max(0, len(agent_requests) - 1),
        compaction_boundaries=sum(event.applied for event in events),
        summary_prefix_shared=shared,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in chat),
        cached_tokens=sum(r.cached_tokens or 0 for r in chat),
        planted_kept=kept,
        planted_lost=lost,
        events=events,
        via=via,
        session=session_id,
        stored_checkpoints=stored,
    )
