"""The engine through the library, on random growing, forking, retried and edited conversations.

A Hypothesis state machine drives ``context_summarizer.ContextManager`` over a SQLite store with
several conversations at once, and checks after every request the contract of
``tests/invariants.py``: a valid conversation, of this conversation only and in raw order, keeping
every instruction, the latest user message and the final unit, fitting the window, and equal to what
a fresh process over the same store would send. Summary calls go to a scripted summarizer (the
engine's own seam for the model), told by the machine to answer, fail, answer empty or answer too
long. The machine runs once per policy: ``self-summary``; ``hybrid`` (old tool outputs masked
first), where a compaction that only masked must also have made no summary call and made the
request smaller; and the two model-free policies, ``masking`` and ``ledger-only``, which must
never make a summary call whatever the summarizer is told, and report every run they compact as
a fact ledger (no verdict, no failure); ``masking`` must also have masked every tool output it
could before compacting any run.

Below the machine, the shortest programs it found on main (issue 11) are replayed as plain tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    rule,
    run_state_machine_as_test,
)

from context_summarizer import BudgetExceeded, ContextManager
from context_summarizer.core.messages import content_text, group_units
from context_summarizer.core.results import (
    MODEL_FREE_POLICIES,
    CompactionEvent,
    Policy,
    PrepareResult,
    SummarizeCall,
    SummaryOutcome,
)
from context_summarizer.core.tokens import TokenCounter
from context_summarizer.loaders.prompts import load_prompt

from .growing_conversations import (
    FRACTION,
    MODEL,
    TAG_PATTERN,
    TOOLS,
    Conversation,
    GrowingConversations,
    Message,
    Sizes,
    Tags,
    assistant_text,
    count_event,
    final_unit_over_window,
    output_sizes,
    provider_tokens,
    scale,
    tool_exchange,
)
from .invariants import (
    FITS,
    MASKED_OUTPUT,
    check_fits,
    check_request,
    check_same_as_fresh,
    fail,
)

# About 30 s when every rule holds (2 cores). A failure is shrunk for up to Hypothesis's 5-minute
# cap, then replayed from its example database in seconds on the next run.
SETTINGS = settings(
    max_examples=150,
    stateful_step_count=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SUMMARY_MODES = st.sampled_from(["ok", "error", "empty", "overlong"])


class ScriptedSummarizer:
    """Answers the engine's summary calls as the machine says: ``ok`` (a short summary naming
    the tags of the messages it was shown), ``error``, ``empty`` or ``overlong`` (past the
    summary's token cap, cut there as a model would be)."""

    def __init__(self, tags: Tags) -> None:
        self.tags = tags
        self.mode = "ok"
        self.calls = 0

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        self.calls += 1
        shown = call.body["messages"][:-1]  # the last one is the summary instruction
        if self.mode == "error":
            return SummaryOutcome(error="scripted summary failure")
        if self.mode == "empty":
            return SummaryOutcome(text="", finish_reason="stop")
        seen = list(dict.fromkeys(t for m in shown for t in TAG_PATTERN.findall(content_text(m))))
        text = (
            "## Task and constraints\nContinue the work begun in "
            + " ".join(seen[:2])
            + ".\n\n## Current state\nThe latest turns were "
            + " ".join(seen[-4:])
            + "."
        )
        finish = "stop"
        if self.mode == "overlong":
            cap = int(call.body.get("max_completion_tokens") or call.body.get("max_tokens") or 0)
            text += "\n\n## Notes\n" + self.tags.words(cap + 200, seed=-self.calls)
            finish = "length"
        return SummaryOutcome(
            text=text, finish_reason=finish, prompt_tokens=provider_tokens(shown, TOOLS)
        )


class EngineConversations(GrowingConversations):
    """Several agents' conversations through one ``ContextManager`` over one SQLite file."""

    policy: Policy = "self-summary"
    mask_keep_turns = 3

    def __init__(self, db_path: Path, policy: Policy | None = None) -> None:
        super().__init__()
        if policy is not None:
            self.policy = policy
        self.db_path = db_path
        self.summarizer = ScriptedSummarizer(self.tags)
        self.window = 0
        self.manager: ContextManager | None = None

    @initialize(target=GrowingConversations.conversations, window=st.integers(3_000, 8_000))
    def open_manager(self, window: int) -> Conversation:
        self.window = window
        self.sizes = Sizes(window)
        self.manager = ContextManager(
            context_window=window,
            summarizer=self.summarizer,
            store=self.db_path,
            policy=self.policy,
            mask_keep_turns=self.mask_keep_turns,
        )
        return self.new_conversation()

    def teardown(self) -> None:
        if self.manager is not None:
            self.manager.close()

    # -- the model's side, written by the agent ---------------------------------------------------

    @rule(conversation=GrowingConversations.conversations, words=FRACTION)
    def assistant_answers(self, conversation: Conversation, words: int) -> None:
        message = assistant_text(self.tags, scale(words, 3, self.sizes.assistant))
        conversation.messages.append(message)

    @rule(
        conversation=GrowingConversations.conversations,
        outputs=st.lists(FRACTION, min_size=1, max_size=3),
        with_text=st.booleans(),
    )
    def assistant_calls_tools(
        self, conversation: Conversation, outputs: list[int], with_text: bool
    ) -> None:
        words = output_sizes(self.sizes, outputs)
        exchange = tool_exchange(self.tags, words, text_words=12 if with_text else 0)
        conversation.messages.extend(exchange)

    # -- sending --------------------------------------------------------------------------------

    @rule(conversation=GrowingConversations.conversations, summary=SUMMARY_MODES)
    def send(self, conversation: Conversation, summary: str) -> None:
        self.check_send(conversation, list(conversation.messages), summary)

    @rule(conversation=GrowingConversations.conversations, summary=SUMMARY_MODES)
    def retry(self, conversation: Conversation, summary: str) -> None:
        """The last request sent for this conversation, sent again unchanged."""
        if conversation.last_sent is not None:
            self.check_send(conversation, conversation.last_sent, summary)

    @rule(conversation=GrowingConversations.conversations, words=FRACTION, summary=SUMMARY_MODES)
    def edit_and_resend(self, conversation: Conversation, words: int, summary: str) -> None:
        """The latest user message rewritten (what followed it dropped), then sent."""
        self.edit_latest_user_message(conversation, words)
        self.check_send(conversation, list(conversation.messages), summary)

    def check_send(self, conversation: Conversation, raw: list[Message], summary: str) -> None:
        assert self.manager is not None
        self.summarizer.mode = summary
        calls = self.summarizer.calls
        try:
            result = self.manager.prepare(raw, model=MODEL, tools=TOOLS)
        except BudgetExceeded as error:
            raise fail(FITS, f"refused with BudgetExceeded: {error}") from None
        outcome = "compacted" if result.compacted else "rewritten" if result.rewritten else "as is"
        event = result.event
        if event is not None and event.masked:
            outcome = "masked and summarized" if event.verdicts else "masked only"
        if event is not None and event.ledger_only:
            outcome = "masked and ledger" if event.masked else "ledger only"
        count_event(outcome)
        if event is not None:
            check_policy(
                self.policy,
                event,
                result,
                summary_calls=self.summarizer.calls - calls,
                keep_turns=self.mask_keep_turns,
                counter=self.manager.engine.counter_for(MODEL),
            )
        sent = result.messages
        check_request(
            raw,
            sent,
            unit_over_window=final_unit_over_window(raw, self.window),
            tag_pattern=TAG_PATTERN,
        )
        report = result.report
        check_fits(
            report.estimated_tokens,
            context_window=self.window,
            reserve_output_tokens=report.reserve_output_tokens,
        )
        self.check_fresh_process(raw, result)
        self.manager.observe(result, {"prompt_tokens": provider_tokens(sent, TOOLS)}, model=MODEL)
        conversation.last_sent = list(raw)

    def check_fresh_process(self, raw: list[Message], result: PrepareResult) -> None:
        fresh = ContextManager(context_window=self.window, store=self.db_path, policy=self.policy)
        try:
            again = fresh.unchanged(raw, model=MODEL, tools=TOOLS)
        finally:
            fresh.close()
        report = result.report
        check_same_as_fresh(
            result.messages,
            again.messages if again is not None else None,
            estimates=[report.estimated_tokens, report.raw_estimated_tokens],
            trigger_tokens=report.trigger_tokens,
        )


class HybridConversations(EngineConversations):
    """The same with ``policy="hybrid"``, from 0 to 3 newest turns kept from masking, and tool
    exchanges drawn twice as often: with the default 3 turns and the machine's mix of texts,
    masking alone rarely reaches the target, and both paths must be exercised."""

    policy: Policy = "hybrid"

    @initialize(
        target=GrowingConversations.conversations,
        window=st.integers(3_000, 8_000),
        keep=st.integers(0, 3),
    )
    def open_manager(self, window: int, keep: int = 3) -> Conversation:
        self.mask_keep_turns = keep
        return super().open_manager(window)

    @rule(
        conversation=GrowingConversations.conversations,
        outputs=st.lists(FRACTION, min_size=1, max_size=3),
    )
    def agent_reads_more(self, conversation: Conversation, outputs: list[int]) -> None:
        """Another tool exchange: a tool-heavy agent, whose old outputs masking can clear."""
        self.assistant_calls_tools(conversation, outputs, with_text=False)


class MaskingConversations(HybridConversations):
    """The same with ``policy="masking"``: masking first, then the fact ledger alone."""

    policy: Policy = "masking"


class LedgerOnlyConversations(EngineConversations):
    """The same with ``policy="ledger-only"``: the fact ledger alone, no model, no masking."""

    policy: Policy = "ledger-only"


MACHINES: dict[str, type[EngineConversations]] = {
    "self-summary": EngineConversations,
    "hybrid": HybridConversations,
    "masking": MaskingConversations,
    "ledger-only": LedgerOnlyConversations,
}


def check_policy(
    policy: Policy,
    event: CompactionEvent,
    result: PrepareResult,
    *,
    summary_calls: int,
    keep_turns: int,
    counter: TokenCounter,
) -> None:
    """What each policy promises of a compaction: ``self-summary`` and ``ledger-only`` mask
    nothing; a compaction that only masked (or masked and made fact ledgers) asked for no
    summary and made the request smaller; ``masking`` and ``ledger-only`` never make a summary
    call, whatever the summarizer would have answered, and every run they compact is a fact
    ledger, no failure; ``masking`` masked every output it could before compacting a run.

    (A masked compaction lands at or under the target unless the planner found nothing to
    summarize on the masked view either: ``test_hybrid.py`` holds the target on conversations
    where it can be met.)
    """
    if event.policy != policy:
        raise AssertionError(f"[policy] a {policy} engine reported a {event.policy} compaction")
    if policy in ("self-summary", "ledger-only") and event.masked:
        raise AssertionError(f"[policy] {policy} masked {event.masked} tool outputs")
    if policy in MODEL_FREE_POLICIES:
        if summary_calls:
            raise AssertionError(f"[policy] {policy} made {summary_calls} summary calls")
        if event.verdicts or event.failure or event.ledger_only != len(event.replaced):
            raise AssertionError(
                f"[policy] {policy}: verdicts {event.verdicts}, failure {event.failure!r}, "
                f"{event.ledger_only} fact ledgers for {len(event.replaced)} runs replaced"
            )
    elif event.ledger_only:
        raise AssertionError(f"[policy] {policy} made {event.ledger_only} model-free slots")
    if event.masked and not event.verdicts:
        if summary_calls:
            raise AssertionError(f"[policy] masking was enough, yet {summary_calls} summary calls")
        if result.report.estimated_tokens >= event.tokens_before:
            raise AssertionError(
                f"[policy] masking left {result.report.estimated_tokens} of "
                f"{event.tokens_before} tokens"
            )
    if policy == "masking" and event.ledger_only:
        check_masked_first(result.messages, keep_turns=keep_turns, counter=counter)


def check_masked_first(sent: list[Message], *, keep_turns: int, counter: TokenCounter) -> None:
    """Under ``masking``, a compaction that had to compact runs masked every output it could
    first: each tool output still sent whole is in the final unit or one of the newest
    ``keep_turns`` assistant turns, or one the placeholder would not make smaller."""
    units = group_units(sent)
    turns = [u for u, unit in enumerate(units) if unit.kind in ("tool_exchange", "assistant")]
    if keep_turns == 0:
        newest = len(units) - 1  # the final unit is never masked
    else:
        newest = turns[-keep_turns] if keep_turns <= len(turns) else 0
    placeholder = load_prompt("masked_output")
    for unit in units[:newest]:
        if unit.kind != "tool_exchange":
            continue
        for i in unit.indices:
            message = sent[i]
            content = content_text(message)
            if message.get("role") != "tool" or MASKED_OUTPUT.fullmatch(content):
                continue
            tokens = counter.count_message(message)
            masked = {**message, "content": placeholder.format(original_tokens=tokens)}
            if counter.count_message(masked) < tokens:
                raise AssertionError(
                    f"[policy] masking compacted runs while sent[{i}], an old tool output of "
                    f"{tokens} tokens, went unmasked"
                )


@pytest.mark.timeout(900)  # on a failure, Hypothesis shrinks each distinct bug for up to 5 min
@pytest.mark.parametrize("policy", list(MACHINES))
def test_engine_keeps_the_contract_on_random_conversations(tmp_path: Path, policy: Policy) -> None:
    """Every request of every random conversation keeps every rule of ``invariants``."""
    paths = (tmp_path / f"example-{n}.db" for n in itertools.count())

    machine = MACHINES[policy]

    class Conversations(machine):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(next(paths))

    run_state_machine_as_test(Conversations, settings=SETTINGS)


# -- regressions: programs the machine found on main (issue 11), shrunk and replayed as is --------


@pytest.fixture(params=list(MACHINES))
def state(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[EngineConversations]:
    machine = EngineConversations(tmp_path / "store.db", request.param)
    yield machine
    machine.teardown()


def test_a_fork_gets_no_summary_of_its_siblings_turns(state: EngineConversations) -> None:
    """Item 1: the fork (the conversation without its last answer, then a new question) reused
    the parent's checkpoint, whose summary had seen that answer. Broke *belongs*."""
    c0 = state.open_manager(window=8000)
    state.assistant_answers(conversation=c0, words=45)
    for _ in range(6):
        state.assistant_answers(conversation=c0, words=90)
    state.send(conversation=c0, summary="ok")
    c1 = state.fork(parent=c0, cut=1, words=0)
    state.send(conversation=c1, summary="ok")


def test_an_edit_gets_no_summary_of_the_message_it_replaced(state: EngineConversations) -> None:
    """Item 1: after the latest user message was rewritten, the checkpoint made while it was
    there still applied, with a summary of it. Broke *belongs*."""
    c0 = state.open_manager(window=7150)
    state.assistant_answers(conversation=c0, words=84)
    state.assistant_answers(conversation=c0, words=89)
    state.assistant_answers(conversation=c0, words=95)
    state.assistant_calls_tools(conversation=c0, outputs=[0, 26, 49], with_text=False)
    c2 = state.start_conversation()
    state.assistant_answers(conversation=c0, words=27)
    state.user_says(conversation=c0, words=85)
    state.send(conversation=c2, summary="overlong")
    state.send(conversation=c0, summary="overlong")
    state.edit_and_resend(conversation=c0, summary="ok", words=0)


def test_a_mid_conversation_instruction_is_kept(state: EngineConversations) -> None:
    """Item 2: a developer message after the task was summarized away. Broke *instructions
    kept*."""
    c0 = state.open_manager(window=7150)
    state.assistant_answers(conversation=c0, words=42)
    state.assistant_answers(conversation=c0, words=89)
    c1 = state.start_conversation()
    state.assistant_answers(conversation=c0, words=95)
    state.edit_and_resend(conversation=c1, summary="ok", words=0)
    state.instruction_arrives(conversation=c0, role="developer", words=0)
    state.assistant_calls_tools(conversation=c0, outputs=[70], with_text=True)
    state.send(conversation=c0, summary="ok")


def test_the_latest_user_message_does_not_jump_ahead_of_a_summary(
    state: EngineConversations,
) -> None:
    """Item 2: sent as [system, task, latest user message, summary, ...], the turns before the
    latest user message summarized after it. Broke *gaps stood in for by summaries*."""
    c0 = state.open_manager(window=6730)
    state.assistant_answers(conversation=c0, words=84)
    state.assistant_answers(conversation=c0, words=65)
    state.assistant_answers(conversation=c0, words=94)
    state.user_says(conversation=c0, words=0)
    state.assistant_calls_tools(conversation=c0, outputs=[59], with_text=False)
    c2 = state.start_conversation()
    state.edit_and_resend(conversation=c2, summary="ok", words=1)
    state.edit_and_resend(conversation=c2, summary="ok", words=0)
    state.send(conversation=c0, summary="ok")


def test_the_final_tool_result_is_not_cut_when_it_fits(state: EngineConversations) -> None:
    """Item 4: the summary allowance pushed the plan over the trigger, so the final unit's
    tool output was truncated though it fits the window. Broke *final unit kept*."""
    c0 = state.open_manager(window=6730)
    state.assistant_answers(conversation=c0, words=84)
    state.assistant_answers(conversation=c0, words=65)
    state.assistant_answers(conversation=c0, words=94)
    state.assistant_answers(conversation=c0, words=0)
    state.assistant_calls_tools(conversation=c0, outputs=[59], with_text=False)
    c2 = state.start_conversation()
    state.edit_and_resend(conversation=c2, summary="ok", words=0)
    state.send(conversation=c0, summary="ok")


def test_a_request_whose_must_keep_parts_fit_is_not_refused(state: EngineConversations) -> None:
    """Item 4: BudgetExceeded ("must be kept need 4045 tokens, over the budget of 2988") for a
    conversation whose system prompt, task and final unit take about a third of the usable
    window. Broke *fits the window*."""
    c0 = state.open_manager(window=6730)
    state.assistant_answers(conversation=c0, words=84)
    state.assistant_answers(conversation=c0, words=65)
    state.assistant_answers(conversation=c0, words=94)
    state.user_says(conversation=c0, words=0)
    state.assistant_calls_tools(conversation=c0, outputs=[59], with_text=False)
    c2 = state.start_conversation()
    state.edit_and_resend(conversation=c2, summary="error", words=0)
    state.send(conversation=c0, summary="ok")


def test_masking_short_of_the_target_with_nothing_to_summarize_keeps_the_masks(
    tmp_path: Path,
) -> None:
    """Found by the machine with ``policy="hybrid"`` (its first run; replayed here a few words
    longer, since this test's tags are another example's): masking every maskable output left
    the request over the target, and on the masked view the planner found no run worth a
    summary. The masks are kept (a checkpoint with no summary, no call made): the request is
    smaller, and later requests are rewritten the same way."""
    state = EngineConversations(tmp_path / "store.db", "hybrid")
    try:
        state.open_manager(window=3000)
        c2 = state.start_conversation()
        for _ in range(30):
            state.assistant_answers(conversation=c2, words=0)
        state.instruction_arrives(conversation=c2, role="system", words=0)
        state.assistant_calls_tools(conversation=c2, outputs=[68], with_text=False)
        state.assistant_answers(conversation=c2, words=0)
        state.assistant_answers(conversation=c2, words=0)
        state.assistant_answers(conversation=c2, words=90)
        state.instruction_arrives(conversation=c2, role="system", words=0)
        state.assistant_calls_tools(conversation=c2, outputs=[24], with_text=False)
        assert state.manager is not None
        result = state.manager.prepare(list(c2.messages), model=MODEL, tools=TOOLS)
        event = result.event
        assert event is not None and event.masked == 1 and event.verdicts == []
        assert state.summarizer.calls == 0
        assert result.report.target_tokens < event.tokens_after < event.tokens_before
        state.check_send(c2, list(c2.messages), "ok")  # sent again: the contract holds
        assert state.summarizer.calls == 0
    finally:
        state.teardown()
