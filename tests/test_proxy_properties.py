"""The proxy on random growing, forking, retried, edited and shared conversations, two tenants.

A Hypothesis state machine drives the real proxy (``ProxyServer`` on a free port, SQLite store)
with the real ``openai`` SDK, streaming and not, in front of the test upstream. The agent's
answers come back through the proxy and are appended as an agent would (the assistant message,
then a result for each tool call). After every request, each agent request the upstream received
keeps the contract of ``tests/invariants.py``, the upstream accepted it, the proxy's estimate is
within the usable window, a fresh process over the same store (same window, same credential's
namespace) sends the same messages, and no summary written for one API key reaches the other.

Below the machine, the shortest programs it found on main (issue 11) are replayed as plain tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule, run_state_machine_as_test

from context_summarizer import ContextManager
from context_summarizer.core.messages import content_text
from context_summarizer.loaders.tokenizers import make_counter
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import (
    Fault,
    RecordedRequest,
    Reply,
    RoutingResponder,
    TestUpstream,
    ToolCallSpec,
    summary_responder,
)

from .conftest import message_from_stream
from .growing_conversations import (
    FRACTION,
    MAX_CONVERSATIONS,
    MODEL,
    TAG_PATTERN,
    TOOLS,
    Conversation,
    GrowingConversations,
    Message,
    Sizes,
    count_event,
    final_unit_over_window,
    output_sizes,
    scale,
)
from .invariants import (
    FITS,
    TENANCY,
    check_fits,
    check_request,
    check_same_as_fresh,
    check_summaries_exclude,
    fail,
)

WINDOW = 8_000
"""At this window the summary call sees the whole conversation when a compaction is due, so a
checkpoint reused by a fork can carry turns the fork does not have (issue 11, item 1)."""
RESERVE = WINDOW // 4
"""Every request asks for this many completion tokens: the reply reserve, by the request."""
KEYS = ("sk-test-tenant-alpha-0123456789", "sk-test-tenant-bravo-0123456789")
MARKS = ("Summary written for tenant alpha.", "Summary written for tenant bravo.")
"""Each tenant's summaries open with its mark: a summary of one found in the other's request
is a checkpoint that crossed tenants."""

# About 50 s when every rule holds (2 cores; the openai SDK's request building is most of it). A
# failure is shrunk for up to Hypothesis's 5-minute cap, then replayed from its database.
SETTINGS = settings(
    max_examples=30,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SUMMARY_MODES = st.sampled_from(["ok", "error", "empty", "overlong"])
REPLIES = st.sampled_from(["text", "tools", "text_and_tools"])


class AgentScript:
    """The agent model: answers every agent request with the reply the machine planned."""

    def __init__(self) -> None:
        self.reply = Reply(content="ok")

    def __call__(self, body: dict[str, Any]) -> Reply:
        return self.reply.model_copy(deep=True)


class SummaryScript:
    """The summarizing model: ``summary_responder``'s summary, opened with the current tenant's
    mark and the tags of the latest turns it was shown (``ok``); or an empty answer, or one past
    the token cap (cut there by the upstream). Failures (``error``) are a 400 fault injected at
    the upstream instead."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.mark = ""
        self.filler = ""

    def __call__(self, body: dict[str, Any]) -> Reply:
        if self.mode == "empty":
            return Reply(content="")
        shown = body["messages"][:-1]  # the last one is the summary instruction
        tags = [t for m in shown for t in TAG_PATTERN.findall(content_text(m))]
        latest = " ".join(list(dict.fromkeys(tags))[-3:])
        text = f"{self.mark} The latest turns were {latest}.\n\n"
        text += summary_responder(body).content or ""
        if self.mode == "overlong":
            text += "\n\n" + self.filler
        return Reply(content=text)


@dataclass
class Servers:
    """The upstream and the proxy in front of it, shared by every example of the run."""

    upstream: TestUpstream
    proxy: ProxyServer
    agent: AgentScript
    summaries: SummaryScript
    settings: Settings
    db: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One upstream and one proxy for the module: examples keep apart by their own tags."""
    agent, summaries = AgentScript(), SummaryScript()
    db = tmp_path_factory.mktemp("proxy-properties") / "checkpoints.db"
    with TestUpstream(context_window=WINDOW, responder=RoutingResponder(agent, summaries)) as up:
        proxy_settings = Settings(
            upstream=up.base_url,
            port=0,
            db=db,
            context_window=WINDOW,
            keepalive_interval=120,  # keepalive streams are another test's business
            prepare_ratio=None,  # so are drafts ahead of time (test_ahead*)
        )
        with ProxyServer(proxy_settings) as proxy:
            yield Servers(up, proxy, agent, summaries, proxy_settings, db)


def assistant_message(completion: Any) -> Message:
    """The assistant message of a non-streamed completion, as an agent appends it."""
    answer = completion.choices[0].message
    message: Message = {"role": "assistant", "content": answer.content}
    if answer.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in answer.tool_calls
        ]
    return message


def uncalibrated_estimate(messages: list[Message]) -> int:
    """What a process that has not calibrated yet estimates for these messages and tools."""
    counter = make_counter(MODEL)
    return counter.count_messages(messages) + counter.count_tools(TOOLS)


def drain_summary_faults(upstream: TestUpstream) -> None:
    """Consume injected summary faults no summary call took (so they reach no later send)."""
    if not upstream.pending_faults:
        return
    with openai.OpenAI(base_url=upstream.base_url, api_key="sk-drain", max_retries=0) as client:
        while upstream.pending_faults:
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(  # type: ignore[call-overload]
                    model=MODEL,
                    messages=[{"role": "user", "content": "x"}],
                    tools=TOOLS,
                    tool_choice="none",
                )


class ProxyConversations(GrowingConversations):
    """Two tenants' conversations through one proxy."""

    def __init__(self, servers: Servers) -> None:
        super().__init__()
        self.servers = servers
        self.sizes = Sizes(WINDOW)
        # Its own model name: the proxy's calibration (per model) starts afresh in each example,
        # as in a new process, so an example never depends on the ones before it.
        self.model = f"{MODEL}-t{self.tags.nonce:06d}"
        self.clients = [
            openai.OpenAI(base_url=servers.proxy.base_url, api_key=key, max_retries=0, timeout=60)
            for key in KEYS
        ]

    @initialize(target=GrowingConversations.conversations, tenant=st.integers(0, 1))
    def first_conversation(self, tenant: int) -> Conversation:
        conversation = self.new_conversation()
        conversation.tenant = tenant
        return conversation

    def teardown(self) -> None:
        for client in self.clients:
            client.close()

    # -- sending ----------------------------------------------------------------------------------

    @rule(
        conversation=GrowingConversations.conversations,
        stream=st.booleans(),
        summary=SUMMARY_MODES,
        reply=REPLIES,
        words=FRACTION,
        outputs=st.lists(FRACTION, min_size=1, max_size=3),
    )
    def send(
        self,
        conversation: Conversation,
        stream: bool,
        summary: str,
        reply: str,
        words: int,
        outputs: list[int],
    ) -> None:
        """The agent's next request; the answer (and its tool results) joins the conversation."""
        raw = list(conversation.messages)
        plan = self.plan(reply, words, calls=len(outputs))
        answer = self.exchange(conversation, raw, stream, summary, plan)
        self.append_answer(conversation, answer, outputs)

    @rule(
        conversation=GrowingConversations.conversations,
        stream=st.booleans(),
        summary=SUMMARY_MODES,
    )
    def retry(self, conversation: Conversation, stream: bool, summary: str) -> None:
        """The last request sent for this conversation, sent again unchanged (answer dropped)."""
        if conversation.last_sent is not None:
            self.exchange(conversation, conversation.last_sent, stream, summary, self.plan("text"))

    @rule(
        conversation=GrowingConversations.conversations,
        words=FRACTION,
        stream=st.booleans(),
        summary=SUMMARY_MODES,
        outputs=st.lists(FRACTION, min_size=1, max_size=3),
    )
    def edit_and_resend(
        self, conversation: Conversation, words: int, stream: bool, summary: str, outputs: list[int]
    ) -> None:
        """The latest user message rewritten (what followed it dropped), then sent."""
        self.edit_latest_user_message(conversation, words)
        raw = list(conversation.messages)
        plan = self.plan("tools", calls=len(outputs))
        answer = self.exchange(conversation, raw, stream, summary, plan)
        self.append_answer(conversation, answer, outputs)

    @precondition(lambda self: self.count < MAX_CONVERSATIONS)
    @rule(
        target=GrowingConversations.conversations,
        parent=GrowingConversations.conversations,
        stream=st.booleans(),
        summary=SUMMARY_MODES,
    )
    def other_tenant_sends_it(
        self, parent: Conversation, stream: bool, summary: str
    ) -> Conversation:
        """The same conversation sent with the other API key; it goes on from there apart."""
        copy = self.new_conversation(parent, len(parent.messages))
        copy.tenant = 1 - parent.tenant
        answer = self.exchange(copy, list(copy.messages), stream, summary, self.plan("text"))
        self.append_answer(copy, answer, [])
        return copy

    # -- one exchange ------------------------------------------------------------------------------

    def plan(self, reply: str, words: int = 50, calls: int = 1) -> Reply:
        """The agent model's next answer: text, 1-3 parallel tool calls, or both."""
        text = self.tags.text(scale(words, 3, self.sizes.assistant))
        specs = [
            ToolCallSpec(
                name=tool["function"]["name"],
                arguments={"path": f"src/pkg/module_{n}.py"},
                id=self.tags.call_id(),
            )
            for n, tool in enumerate(TOOLS[:calls])
        ]
        if reply == "text":
            return Reply(content=text)
        if reply == "tools":
            return Reply(tool_calls=specs)
        return Reply(content=text, tool_calls=specs)

    def append_answer(
        self, conversation: Conversation, answer: Message, outputs: list[int]
    ) -> None:
        """The answer, then one tool result per call, as an agent appends them."""
        conversation.messages.append(answer)
        calls = answer.get("tool_calls") or []
        sizes = output_sizes(self.sizes, (outputs * 3)[: len(calls)]) if calls else []
        for call, words in zip(calls, sizes, strict=True):
            content = self.tags.text(words, lines=True)
            conversation.messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": content}
            )

    def exchange(
        self,
        conversation: Conversation,
        raw: list[Message],
        stream: bool,
        summary: str,
        reply: Reply,
    ) -> Message:
        """Send ``raw`` through the proxy with the conversation's key, check every rule, and
        return the assistant message that came back."""
        servers = self.servers
        upstream = servers.upstream
        tenant = conversation.tenant
        servers.agent.reply = reply
        servers.summaries.mode = summary
        servers.summaries.mark = MARKS[tenant]
        servers.summaries.filler = self.tags.words(2_200, seed=-len(raw))
        upstream.clear_log()
        if summary == "error":
            upstream.inject(Fault(kind="status", status=400, match="summary"))
        try:
            answer, headers = self.request(tenant, raw, stream)
            records = upstream.requests
        finally:
            drain_summary_faults(upstream)
        self.check_exchange(conversation, raw, records, headers)
        conversation.last_sent = raw
        return answer

    def request(self, tenant: int, raw: list[Message], stream: bool) -> tuple[Message, Any]:
        """One chat completion through the proxy; a refusal breaks the *fits* rule."""
        create = self.clients[tenant].chat.completions.with_raw_response.create
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
        try:
            response = create(
                model=self.model,
                messages=raw,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                max_completion_tokens=RESERVE,
                stream=stream,
                **extra,
            )
        except openai.APIStatusError as error:
            raise fail(
                FITS, f"the proxy answered HTTP {error.status_code}: {error.message}"
            ) from None
        parsed = response.parse()
        message = message_from_stream(parsed) if stream else assistant_message(parsed)
        return message, response.headers

    def check_exchange(
        self,
        conversation: Conversation,
        raw: list[Message],
        records: list[RecordedRequest],
        headers: Any,
    ) -> None:
        tenant = conversation.tenant
        agent = [r for r in records if r.path.endswith("/chat/completions") and not r.is_summary]
        summaries = [r for r in records if r.is_summary]
        count_event(f"{len(summaries)} summary calls")
        if not agent:
            raise fail(FITS, "no agent request reached the upstream")
        for summary_call in summaries:
            if summary_call.headers.get("authorization") != f"Bearer {KEYS[tenant]}":
                raise fail(TENANCY, "a summary call went upstream without the client's own key")
        over_window = final_unit_over_window(raw, WINDOW)
        for record in agent:
            check_request(
                raw, record.messages, unit_over_window=over_window, tag_pattern=TAG_PATTERN
            )
            check_summaries_exclude(
                record.messages, [m for t, m in enumerate(MARKS) if t != tenant]
            )
        final = agent[-1]
        if final.status != 200:
            raise fail(FITS, f"the upstream answered the final agent request {final.status}")
        estimate = headers.get("x-summarizer-prompt-tokens") or ""
        if not estimate.isdigit():
            raise fail(FITS, f"no x-summarizer-prompt-tokens estimate ({estimate!r})")
        check_fits(int(estimate), context_window=WINDOW, reserve_output_tokens=RESERVE)
        sent = final.messages
        # The proxy writes each answer's usage to the store just after the answer; a process
        # started over the store after a graceful stop sees it written.
        assert self.servers.proxy.flush_writes()
        fresh = ContextManager(
            store=self.servers.db,
            config=self.servers.settings.compaction,
        )
        try:
            again = fresh.unchanged(
                raw,
                model=self.model,
                tools=TOOLS,
                request={"model": self.model, "max_completion_tokens": RESERVE},
                namespace=credential_namespace(KEYS[tenant]),
            )
        finally:
            fresh.close()
        trigger = int((WINDOW - RESERVE) * self.servers.settings.compaction.trigger_ratio)
        check_same_as_fresh(
            sent,
            again.messages if again is not None else None,
            estimates=[int(estimate), uncalibrated_estimate(sent)],
            trigger_tokens=trigger,
        )


@pytest.mark.timeout(900)  # on a failure, Hypothesis shrinks each distinct bug for up to 5 min
def test_proxy_keeps_the_contract_on_random_conversations(servers: Servers) -> None:
    """Every request of every random conversation, of either tenant, keeps every rule."""

    class Conversations(ProxyConversations):
        def __init__(self) -> None:
            super().__init__(servers)

    run_state_machine_as_test(Conversations, settings=SETTINGS)


# -- regressions: programs the machine found on main (issue 11), shrunk and replayed as is --------


@pytest.fixture
def state(servers: Servers) -> Iterator[ProxyConversations]:
    machine = ProxyConversations(servers)
    yield machine
    machine.teardown()


def test_a_fork_gets_no_summary_of_its_siblings_turns(state: ProxyConversations) -> None:
    """Item 1: the fork (the parent without its latest question, then another one) reused the
    parent's checkpoint, whose summary had seen that question. Broke *belongs*."""
    c0 = state.first_conversation(tenant=0)
    state.user_says(conversation=c0, words=45)
    for _ in range(20):
        state.user_says(conversation=c0, words=90)
    state.send(conversation=c0, outputs=[10], reply="text", stream=False, summary="ok", words=0)
    c1 = state.fork(parent=c0, cut=2, words=0)
    state.send(conversation=c1, outputs=[10], reply="text", stream=True, summary="ok", words=0)


def test_an_edit_gets_no_summary_of_the_message_it_replaced(state: ProxyConversations) -> None:
    """Item 1: the other tenant's copy, compacted, then its latest user message rewritten: the
    checkpoint made before the edit still applied, summarizing the replaced message. Broke
    *belongs*."""
    c0 = state.first_conversation(tenant=0)
    state.send(
        conversation=c0, outputs=[79], reply="text_and_tools", stream=False, summary="ok", words=77
    )
    for _ in range(5):
        state.user_sends_image(conversation=c0, words=0)
    c1 = state.other_tenant_sends_it(parent=c0, stream=False, summary="ok")
    state.edit_and_resend(conversation=c1, outputs=[63, 22, 2], stream=False, summary="ok", words=0)


def test_a_mid_conversation_instruction_is_kept(state: ProxyConversations) -> None:
    """Item 2: a system message after the task was summarized away. Broke *instructions
    kept*."""
    c0 = state.first_conversation(tenant=0)
    state.send(
        conversation=c0, outputs=[79], reply="text_and_tools", stream=False, summary="ok", words=63
    )
    for _ in range(3):
        state.user_sends_image(conversation=c0, words=0)
    state.instruction_arrives(conversation=c0, role="system", words=0)
    for _ in range(2):
        state.user_sends_image(conversation=c0, words=0)
    state.other_tenant_sends_it(parent=c0, stream=False, summary="ok")


def test_the_latest_user_message_does_not_jump_ahead_of_a_summary(
    state: ProxyConversations,
) -> None:
    """Item 2: the turns before the latest user message were summarized after it. Broke *gaps
    stood in for by summaries*."""
    c0 = state.first_conversation(tenant=0)
    state.send(
        conversation=c0,
        outputs=[68, 79],
        reply="text_and_tools",
        stream=True,
        summary="ok",
        words=77,
    )
    state.user_sends_image(conversation=c0, words=89)
    state.user_sends_image(conversation=c0, words=33)
    state.send(conversation=c0, outputs=[24], reply="tools", stream=False, summary="error", words=0)
    state.send(
        conversation=c0, outputs=[20], reply="text", stream=False, summary="overlong", words=0
    )


def test_a_request_whose_must_keep_parts_fit_is_not_refused(state: ProxyConversations) -> None:
    """Item 4: 400 context_length_exceeded ("must be kept need 5065 tokens, over the budget of
    3928") for three tool-using turns whose final unit takes about a third of the usable
    window. Broke *fits the window*."""
    c0 = state.first_conversation(tenant=0)
    for outputs, stream, summary, words in (
        ([42, 48, 22], False, "ok", 84),
        ([63, 76, 81], False, "error", 72),
        ([51, 6, 22], True, "ok", 0),
    ):
        state.send(
            conversation=c0,
            outputs=outputs,
            reply="text_and_tools",
            stream=stream,
            summary=summary,
            words=words,
        )
